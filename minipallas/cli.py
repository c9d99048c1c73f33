"""``minipallas-opt``: parse text IR, verify it, optionally run passes, print the result.

::

    minipallas-opt kernel.mir                      # parse, verify, print
    minipallas-opt - < kernel.mir                  # the same, reading stdin
    minipallas-opt kernel.mir --pass-pipeline=collectives,discharge,cleanup --print-ir-after-all
    minipallas-opt kernel.mir --print-effects --locations
    minipallas-opt kernel.mir --pass-pipeline=discharge --print-ir-before-all --print-effects
    minipallas-opt kernel.mir --load my_pass.py --pass-pipeline=my-pass,discharge
    minipallas-opt kernel.mir --view=svg             # a picture: kernel.svg (Graphviz)
    minipallas-opt kernel.mir --pass-pipeline=discharge --view=dot --view-after-all

    minipallas-opt kernel.mir --emit=stablehlo        # discharge and lower to StableHLO
    minipallas-opt kernel.py --pass-pipeline=discharge{keep_params=3} --print-effects
    minipallas-opt kernel.py --emit=tpu               # a pallas_call's Mosaic TPU kernel
    minipallas-opt kernel.py --emit=stablehlo         # a pallas_call's CPU program
    minipallas-opt kernel.py --print-ir-after-all     # each stage from kernel body to CPU program
    minipallas-opt kernel.py --emit=gpu               # a pallas_call's Triton GPU kernel
    minipallas-opt kernel.py --emit=ptx               # ... compiled to PTX by triton

The text's last function is the one worked on; the functions before it are its callees.
``--emit`` prints MLIR instead of minipallas IR: for a text IR file, ``stablehlo`` lowers the
function with ``minipallas.lower``, after ``--pass-pipeline``'s passes when given (the target's
own pipeline then runs too); a Python kernel file (see ``KERNEL_FILE``) is lowered with its
``pallas_call``'s ``lower(..., target=...)``, whose pipeline is the target's own, so
``--pass-pipeline`` is refused with ``--emit`` there. ``--print-ir-before-all``,
``--print-ir-after-all`` and ``--print-effects`` show every pass that runs, the target's too;
``--load FILE.py`` registers a user's passes (``passes.registry.register``) for the pipeline. With
``--split-input-file`` the input is cut at lines reading ``// -----`` and each piece is handled
on its own (an error in one does not stop the others), as ``mlir-opt`` does; line numbers in
messages stay those of the whole file. Errors in the input are printed to stderr as
``FILE:LINE:COL: message`` and the exit code is 1; there is no traceback for them.
"""

from __future__ import annotations

import argparse
import re
import runpy
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from minipallas.ir.core import Function
from minipallas.ir.effects import EffectsAnalysis
from minipallas.ir.errors import MiniPallasError
from minipallas.ir.excerpt import source_excerpt
from minipallas.ir.kernel_spec import Kernel
from minipallas.ir.location import Location
from minipallas.ir.parser import parse_module
from minipallas.ir.printer import effects_text, print_function
from minipallas.ir.verifier import verify
from minipallas.kernels.pallas_call import PallasCall
from minipallas.lowering import TARGETS, AfterEach, Target
from minipallas.passes import pipeline
from minipallas.passes.kernel.grid_fusion.explain import explain
from minipallas.passes.registry import PASSES, describe
from minipallas.pictures import FORMATS, PassPictures, draw, emitter

SPLIT_MARKER = re.compile(r"^// -----\s*$", re.MULTILINE)
EMIT_TARGETS = {  # --emit=NAME: what it prints, for --help; the rest is the target table's
    "ir": "minipallas IR, after the passes if any (the default)",
    **{name: t.doc for name, t in TARGETS.items()},
}
KERNEL_ONLY = tuple(name for name, t in TARGETS.items() if t.kernel)
KERNEL_FILE = """\
kernel files: a Python file (ending in .py) that defines a minipallas.pallas_call named
`kernel` or `KERNEL` and its example inputs, a sequence of minipallas.ArrayType (or arrays)
named `args` or `ARGS`. Without --emit its kernel body's IR is printed (after --pass-pipeline,
with --print-effects, --view as for text IR), or, with --print-ir-after-all (or -before-all) and
no --pass-pipeline, each stage from the body to its CPU program (bind-grid, discharge, ...,
cpu-program) and then the program; with --emit=TARGET the call is lowered for it:

    import minipallas as mp
    def add(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] + y_ref[...]
    f32 = mp.ArrayType((64, 256), "float32")
    spec = mp.BlockSpec((8, 128), lambda i, j: (i, j))
    KERNEL = mp.pallas_call(add, f32, grid=(8, 2), in_specs=[spec, spec], out_specs=spec)
    ARGS = (f32, f32)
"""


def _arguments() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="minipallas-opt",
        description="Parse, verify, transform and print minipallas IR; emit MLIR.",
        epilog=f"{describe()}\n\n{_targets()}\n\n{KERNEL_FILE}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("file", help="text IR file, kernel file (.py), or '-' for stdin")
    ap.add_argument(
        "--pass-pipeline",
        metavar="PASSES",
        help="comma-separated passes to run, each with options in braces, e.g. "
        "collectives,discharge{discharge_scoped=false},cleanup (the passes are listed below)",
    )
    add_load_argument(ap)
    ap.add_argument(
        "--print-ir-before-all", action="store_true", help="print the IR before every pass"
    )
    ap.add_argument(
        "--print-ir-after-all", action="store_true", help="print the IR after every pass"
    )
    ap.add_argument(
        "--print-effects",
        action="store_true",
        help="print the effects of each function and each region op before the IR; when a "
        "pipeline runs, also before the first pass and after each pass",
    )
    ap.add_argument("--locations", action="store_true", help="print each op's loc(...)")
    ap.add_argument(
        "--split-input-file",
        action="store_true",
        help="handle each '// -----'-separated piece of the input on its own",
    )
    ap.add_argument(
        "--emit",
        choices=EMIT_TARGETS,
        default="ir",
        help="what to print (the targets are listed below)",
    )
    ap.add_argument(
        "--view",
        choices=FORMATS,
        help="draw the function (after the passes) with Graphviz instead of printing it: dot "
        "prints DOT text, which needs no Graphviz program; svg and png write FILE.svg/.png "
        "next to the input (stdin: ./stdin.svg) and need Graphviz's dot (apt-get install graphviz)",
    )
    ap.add_argument(
        "--view-after-all",
        action="store_true",
        help="draw the function before and after every pass, side by side, in --view's "
        "format (dot if not given): FILE.1-PASS.svg...; DOT pictures one after another",
    )
    ap.add_argument(
        "--explain",
        action="store_true",
        help="for a kernel file: the windows fuse-grid-steps gives the kernel on the TPU (with "
        "its options from --pass-pipeline) and why, with the cost model's times",
    )
    ap.add_argument(
        "--promote-scratch",
        action="store_true",
        help="with --emit=tpu: keep register-sized scoped scratch in vector registers",
    )
    return ap


def _targets() -> str:
    """The ``--emit`` targets, one line each, as ``--help`` lists them."""
    width = max(map(len, EMIT_TARGETS))
    lines = ["targets (--emit=NAME):"]
    lines += [f"  {name:<{width}}  {doc}" for name, doc in EMIT_TARGETS.items()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit code, as every minipallas command does: 0 ok,
    1 a finding (the program is rejected), 2 a usage error (an unknown pass or option, a file
    that cannot be read or defines no kernel), printed in one line.

    The passes of ``--load`` files are registered for this call only (``--help`` lists them)
    and removed after it, so one process may run several commands."""
    loads, _ = _load_argument().parse_known_args(argv)
    registered = set(PASSES)
    try:
        for path in loads.load:
            status = _load(path)
            if status:
                return status
        return _main(_arguments().parse_args(argv))
    finally:
        for name in set(PASSES) - registered:
            del PASSES[name]


def add_load_argument(parser: argparse.ArgumentParser) -> None:
    """``--load FILE.py`` (repeatable): this command line's, and the difftest's and the
    fuzzers' (``minipallas.tools.user_passes``)."""
    parser.add_argument(
        "--load",
        metavar="FILE.py",
        action="append",
        default=[],
        help="run this Python file first, so the passes it registers (@register) can be named "
        "in --pass-pipeline and the rewrites it registers (@pattern) join every cleanup; may "
        "be given several times",
    )


def _load_argument() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--load", action="append", default=[])
    return ap


def _load(path: str) -> int:
    """Runs a ``--load`` file (as ``__minipallas_load__``, so its demo under ``if __name__ ==
    "__main__"`` stays quiet); 2 (a usage error) when it cannot be read or raises a minipallas
    error."""
    return 0 if _run_python(path, "__minipallas_load__", "load") is not None else 2


def _run_python(path: str, run_name: str, verb: str) -> dict[str, Any] | None:
    """The namespace ``path`` leaves once run; None, with the error printed, when it cannot
    be read (``cannot VERB``) or raises a minipallas error."""
    try:
        return runpy.run_path(path, run_name=run_name)
    except MiniPallasError as e:
        print(_describe(e, path), file=sys.stderr)
    except OSError as e:
        print(f"minipallas-opt: cannot {verb} {path}: {e.strerror}", file=sys.stderr)
    return None


def _main(args: argparse.Namespace) -> int:
    name = "<stdin>" if args.file == "-" else args.file
    if args.promote_scratch and args.emit != "tpu":
        print("minipallas-opt: --promote-scratch goes with --emit=tpu", file=sys.stderr)
        return 2
    if args.view and args.emit != "ir":
        print(
            "minipallas-opt: --view draws minipallas IR; it does not go with --emit",
            file=sys.stderr,
        )
        return 2
    if args.pass_pipeline:
        try:
            pipeline.parse_pipeline(args.pass_pipeline)
        except MiniPallasError as e:  # checked before any input is read: a usage error
            print(_describe(e, name), file=sys.stderr)
            return 2
    if args.file.endswith(".py"):
        return _kernel_file(args, name)
    if args.emit in KERNEL_ONLY or args.explain:
        flag = "--explain" if args.explain else f"--emit={args.emit}"
        print(
            f"minipallas-opt: {flag} takes a kernel file (.py defining a "
            "pallas_call named kernel or KERNEL), not text IR",
            file=sys.stderr,
        )
        return 2
    try:
        text = sys.stdin.read() if args.file == "-" else open(args.file).read()
    except OSError as e:
        print(f"minipallas-opt: cannot read {name}: {e.strerror}", file=sys.stderr)
        return 2
    pieces = _split(text) if args.split_input_file else [text]
    status = 0
    for k, piece in enumerate(pieces):
        if k:
            print("// -----")
        stem = "stdin" if args.file == "-" else args.file.removesuffix(".mir").removesuffix(".mpir")
        try:
            _process(piece, args, f"{stem}.{k + 1}" if len(pieces) > 1 else stem)
        except MiniPallasError as e:
            sys.stdout.flush()  # keep stdout and stderr in order when both go to one place
            print(_describe(e, name, piece), file=sys.stderr)
            status = 1
    return status


def _split(text: str) -> list[str]:
    """Pieces between ``// -----`` lines, each padded with newlines to keep its line numbers."""
    pieces, start, line = [], 0, 0
    for m in SPLIT_MARKER.finditer(text):
        pieces.append("\n" * line + text[start : m.start()])
        line += text.count("\n", start, m.end())
        start = m.end()
    pieces.append("\n" * line + text[start:])
    return pieces


def _process(text: str, args: argparse.Namespace, stem: str) -> None:
    """Handles one piece of input; pictures (``--view``) are named after ``stem``."""
    module = parse_module(text)
    verify(module)
    _transform_and_print(module.entry, args, stem)


def _transform_and_print(fn: Function, args: argparse.Namespace, stem: str) -> None:
    """Runs ``--pass-pipeline`` on ``fn``, then prints (or draws) what the flags ask for."""
    emit = emitter(args.view or "dot", stem)
    stages = None
    if args.pass_pipeline is not None:
        stages = _stages(args, fn, args.pass_pipeline)
        hooks = [stages, PassPictures(fn, emit) if args.view_after_all else None]
        fn = pipeline.run(fn, args.pass_pipeline, verify=True, after_each=_each(hooks))
    if args.print_effects and not (stages and stages.names):  # else shown after the last pass
        print(_effects_report(fn))
    if args.emit == "stablehlo":
        from minipallas.lowering.lowered import lower  # jaxlib: kept off --help's path

        hook = _stages(args, fn, TARGETS["stablehlo"].pipeline)
        print(lower(fn, after_each=hook).as_text(debug_info=args.locations), end="")
        return
    if args.view:
        emit(draw(fn))
        return
    print(print_function(fn, locations=args.locations))


def _kernel_passes(pipe: str | None) -> bool:
    """Whether ``pipe`` names a kernel pass (``fuse-grid-steps``): it runs on the whole
    kernel, so the kernel is printed whole (``str(kernel)``: grid, block specs, body)."""
    steps = pipeline.parse_pipeline(pipe) if pipe else []
    return any(PASSES[name].subject == "kernel" for name, _ in steps)


def _transform_kernel(kernel: Kernel, args: argparse.Namespace) -> None:
    hook = _stages(args, kernel.body, args.pass_pipeline)
    print(pipeline.run(kernel, args.pass_pipeline, verify=True, after_each=hook))


def _kernel_file(args: argparse.Namespace, name: str) -> int:
    """The IR of the ``pallas_call`` a Python kernel file defines (``KERNEL_FILE``): its
    kernel body, through the flags as a text IR function; or, with ``--emit``, the call
    lowered for that target (whose own pipeline runs, so ``--pass-pipeline`` is refused)."""
    if args.emit != "ir" and args.pass_pipeline is not None:
        print(
            f"minipallas-opt: --pass-pipeline runs on the kernel's IR; --emit={args.emit} runs "
            "the target's own pipeline (see it with --print-ir-after-all)",
            file=sys.stderr,
        )
        return 2
    namespace = _run_python(args.file, "__minipallas_kernel__", "read")
    if namespace is None:
        return 2
    calls = [namespace[k] for k in ("kernel", "KERNEL") if hasattr(namespace.get(k), "lower")]
    inputs = namespace.get("args", namespace.get("ARGS"))
    if not calls or inputs is None:
        print(
            f"minipallas-opt: {name} must define a pallas_call named kernel or KERNEL and its "
            "example inputs named args or ARGS",
            file=sys.stderr,
        )
        return 2
    options = {"promote_scratch": True} if args.promote_scratch else {}
    try:
        if not isinstance(calls[0], PallasCall) and (args.emit != "ir" or _dumps(args)):
            raise MiniPallasError(
                f"{name} defines its pallas_call with upstream Pallas (jax.experimental.pallas): "
                "minipallas-opt imports its kernel's IR, but lowers only minipallas's own calls",
                op="pallas_call",
                fix="print or transform the imported kernel (no --emit, no --print-ir-*), or "
                "write the call with minipallas (import minipallas as mp; mp.pallas_call) to "
                "lower it",
            )
        if args.explain:
            print(_explain(_trace(calls[0], inputs, TARGETS["tpu"].memory_space), args))
            return 0
        if args.emit == "ir" and args.pass_pipeline is None and _dumps(args):
            program = _cpu_stages(args, calls[0], _trace(calls[0], inputs))
            print(print_function(program, locations=args.locations))
            return 0
        if args.emit == "ir" and _kernel_passes(args.pass_pipeline):
            _transform_kernel(_trace(calls[0], inputs), args)
            return 0
        if args.emit == "ir":
            _transform_and_print(_trace(calls[0], inputs).body, args, args.file.removesuffix(".py"))
            return 0
        kernel = _trace(calls[0], inputs, TARGETS[args.emit].memory_space)
        if args.print_effects:
            print(_effects_report(kernel.body))
        hook = _kernel_stages(args, calls[0], kernel, options)
        lowered = calls[0].lower(*inputs, target=args.emit, after_each=hook, **options)
    except MiniPallasError as e:
        print(_describe(e, name), file=sys.stderr)
        return 1
    print(lowered.as_text(debug_info=args.locations), end="")
    return 0


def _explain(kernel: Kernel, args: argparse.Namespace) -> str:
    """``--explain``: fuse-grid-steps' choices for ``kernel``, with the options the pipeline
    gives it."""
    steps = pipeline.parse_pipeline(args.pass_pipeline) if args.pass_pipeline else []
    options = next((o for name, o in steps if name == "fuse-grid-steps"), {})
    return explain(kernel, **options)


def _trace(call: Any, inputs: Sequence[Any], memory_space: Any = None) -> Kernel:  # noqa: ANN401
    """The kernel of ``call``: a minipallas ``pallas_call`` traced, or an upstream one (a jax
    callable) imported from its jaxpr (``kernel_from_jaxpr``)."""
    if isinstance(call, PallasCall):
        space = {} if memory_space is None else {"memory_space": memory_space}
        return call.trace(*inputs, **space)
    import jax  # noqa: PLC0415  (the upstream kernel file has loaded it already)

    from minipallas.interop.importer.rules.kernel_call import kernel_from_jaxpr  # noqa: PLC0415

    return kernel_from_jaxpr(jax.make_jaxpr(call)(*inputs))


class _Stages:
    """The ``after_each`` hook that shows each pass of a pipeline whose pass names are
    ``names``: ``--print-ir-before-all`` / ``--print-ir-after-all`` print the IR before / after
    it, ``--print-effects`` its effects report (``_effects_report``) after it. Created before
    the first pass, it shows the input as the stage before it."""

    def __init__(self, args: argparse.Namespace, names: list[str], fn: Function) -> None:
        self.args = args
        self.names = names
        self.done = 0
        if args.print_effects and names:
            self.show("Effects Before", names[0], _effects_report(fn))
        self.before(fn)

    def __call__(self, pass_name: str, result: Function) -> None:
        self.done += 1
        if self.args.print_effects:
            self.show("Effects After", pass_name, _effects_report(result))
        if self.args.print_ir_after_all:
            self.show("IR Dump After", pass_name, self.text(result) + "\n")
        self.before(result)

    def before(self, fn: Function) -> None:
        if self.args.print_ir_before_all and self.done < len(self.names):
            self.show("IR Dump Before", self.names[self.done], self.text(fn) + "\n")

    def text(self, fn: Function) -> str:
        return print_function(fn, locations=self.args.locations)

    @staticmethod
    def show(what: str, pass_name: str, text: str) -> None:
        print(f"// -----// {what} {pass_name} //----- //")
        print(text)


def _stages(args: argparse.Namespace, fn: Function, passes: str) -> _Stages | None:
    """The hook showing the passes of ``passes`` (a pipeline) run on ``fn``, if any flag asks."""
    if not (_dumps(args) or args.print_effects):
        return None
    return _Stages(args, pipeline.pass_names(passes), fn)


def _kernel_stages(
    args: argparse.Namespace, call: Any, kernel: Kernel, options: dict[str, Any]
) -> _Stages | None:
    """``_stages`` for a kernel lowered to ``--emit``'s target, its option passes included
    (``--promote-scratch``: ``promote-scratch``). A target that lowers a Function runs on the
    CPU program built from the kernel body, whose stages ``lower`` reports first
    (its ``prepare`` step, ``choose.cpu_program``: ``bind-grid``, ``discharge``, ...,
    ``hoist-invariant``,
    ``batch-grid``, then ``cpu-program``); they are named here ahead, from a first build."""
    target = TARGETS[args.emit]
    if target.kernel:
        return _stages(args, kernel.body, target.pipeline_for(kernel, options))
    if not (_dumps(args) or args.print_effects):
        return None
    names: list[str] = []
    _prepared(target, call, kernel, lambda name, _: names.append(name))
    return _Stages(args, names + pipeline.pass_names(target.pipeline), kernel.body)


def _cpu_stages(args: argparse.Namespace, call: Any, kernel: Kernel) -> Function:
    """The kernel's CPU program, each stage on the way shown as the flags ask."""
    stages: list[tuple[str, Function]] = []
    program = _prepared(TARGETS["stablehlo"], call, kernel, lambda *stage: stages.append(stage))
    hook = _Stages(args, [name for name, _ in stages], kernel.body)
    for name, fn in stages:
        hook(name, fn)
    return program


def _prepared(target: Target, call: Any, kernel: Kernel, after_each: AfterEach) -> Function:
    """The Function ``target``'s prepare step makes of ``kernel`` with ``call``'s choices."""
    return target.prepared(
        kernel,
        match_upstream=call.match_upstream,
        collective_axes=call.collective_axes,
        after_each=after_each,
    )


def _dumps(args: argparse.Namespace) -> bool:
    return args.print_ir_before_all or args.print_ir_after_all


def _each(hooks: list[Callable[[str, Function], None] | None]) -> Callable | None:
    """The ``after_each`` hook that calls each of ``hooks`` (those not None) in order."""
    found = [hook for hook in hooks if hook is not None]
    if not found:
        return None

    def each(pass_name: str, result: Function) -> None:
        for hook in found:
            hook(pass_name, result)

    return each


def _effects_report(fn: Function) -> str:
    """``// effects of @f: {...}`` per function, then one line per region op or call, whose
    effects are at the positions of its operands; a collective ``run_scoped`` adds the
    group's effects on its allocations (at their positions)."""
    analysis = EffectsAnalysis()
    lines = []
    for f in (*fn.callees(), fn):
        lines.append(f"// effects of @{f.name}: {effects_text(analysis.function(f))}")
        for op in f.walk():
            if op.regions or op.name == "call":
                lines.append(f"//   {op.name} at {op.loc}: {effects_text(analysis.op(op))}")
            if op.name == "run_scoped" and op.attrs.get("collective_axes"):
                axes = ", ".join(op.attrs["collective_axes"])
                group = effects_text(analysis.shared(op))
                lines.append(f"//     the group along {axes} on its allocations: {group}")
    return "\n".join(lines)


def _describe(error: MiniPallasError, name: str, text: str | None = None) -> str:
    """The error as ``FILE:LINE:COL: message`` (position in the text), ``FILE:LINE: message``
    (a line of the kernel file) or ``FILE: message``, followed by any notes attached to it.
    At a position in ``text``, the lines of ``text`` there are shown, carets under the op,
    instead of the printed IR around it (the note of ``ir.excerpt``): the user's own names
    read better than the printer's numbers."""
    loc = error.loc
    verbatim = getattr(error, "verbatim", False)  # upstream's exact words; the note says where
    in_text = isinstance(loc, Location) and not loc.file and loc.line and not verbatim
    in_file = (
        isinstance(loc, Location) and loc.file and Path(loc.file).resolve() == Path(name).resolve()
    )
    lines = [f"{name}:{error}" if in_text else str(error) if in_file else f"{name}: {error}"]
    notes = getattr(error, "__notes__", [])
    source = source_excerpt(text, loc, error.op) if in_text and text is not None else None
    if source is not None:
        lines.append(source)
        notes = [note for note in notes if note is not error.excerpt]
    lines += notes
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
