"""``make fuzz-tpu``: random kernels on a TPU, minipallas's Mosaic module against upstream's.

Each kernel is ``random_kernel`` made Mosaic-legal (``tpu_sized``: blocks tiled (16, 128),
outputs written rather than accumulated into), with inputs from its seed, written once for
both sides (``fuzz.kernels.upstream_call``). Two modes:

1. ``--aot`` (any machine; CI runs a few seeds): minipallas's module and upstream's, each
   compiled ahead of time by libtpu for a v5e. A kernel one side compiles and the other
   refuses is a finding (``minipallas-refuses`` / ``beyond-upstream``); both refusing is
   counted, not a finding.
2. on the chip (the default; needs a TPU): ``difftest.run(case, device="tpu", compile=False)``:
   minipallas's module against upstream's bit for bit on the elements the kernel defines, and
   each TPU way against the reference interpreter within the chip's numerics envelope
   (``minipallas.tools.difftest.tpu``). The verdict's kind is the finding's class.

Kernels also draw the parameters upstream's ops and block specs take
(``generate.kernel_params``: a dot's precision and product dtype, ``pl.reciprocal``'s
``approx``, a transcendental's ``accuracy``, ``pipeline_mode=pl.Buffered(n)``,
``pl.multiple_of`` in the body and in an index map, ``lax.mul``'s ``out_dtype``), so a
parameter one lowering drops is a finding the next time it is drawn. Where both refuse one
(``HIGH``, mixed precisions, ``Buffered(3)``, ``accuracy=``, a bfloat16 matmul accumulator) the
kernel is ``both-refuse``; upstream refusing one that ``BEYOND`` documents minipallas running
(``lax.mul``'s ``out_dtype``, whose upstream rule fails) is ``beyond-upstream-documented``, not a
finding. The summary gives, per parameter value, the kernels that drew it and their classes
(``difftest.coverage``).

Either way, a kernel whose index map names a block past its array's end may halt the chip or
read garbage (upstream's too), so the generator sizes every array to hold the blocks its map
reaches. ``--oob-rate`` (``OOB_RATE`` by default) makes that share of kernels out of bounds on
purpose instead (``random_kernel(out_of_bounds=...)``): each is checked, and never sent to the
chip, against ``halts.out_of_bounds_block``, which must flag it (``out-of-bounds-flagged``,
counted apart in the summary). A kernel out of bounds that the check does not flag
(``out-of-bounds-missed``), or that the generator meant in bounds (``out-of-bounds-unmeant``, or
the verdict's own ``out-of-bounds``), is a finding.

On the chip the campaign runs in worker processes (``supervised``), each for at most
``WORKER_SECONDS``: a kernel that kills its worker (a halted chip poisons the process holding
it) is reported ``halted`` and a fresh worker goes on with the next one.

``--load FILE.py`` and ``--pass-pipeline PIPE`` (``minipallas.tools.user_passes``) run a
researcher's pipeline on minipallas's side: on each kernel before its Mosaic module is made
(``Case.passes`` on the chip; ``--aot``: the module libtpu compiles). With ``--aot`` each kernel in
bounds is also run on the CPU with and without the pipeline (``fuzz.kernels.pipeline_blame``), so a
pass that changes values is found without a chip. A finding the pipeline causes is ``pass-bug`` (and
a refusal ``minipallas-refuses``), naming the pass after which it appears, with the kernel before
and after it. As in ``fuzz.kernels``, the summary says how many kernels each pass changed, and
kernels are drawn so the user's passes rewrite them (``--target-pass``).

A finding is shrunk: each simplification of its spec (one option back to its plainest value,
a grid axis of size 1, one input fewer) that keeps the same class is kept, until none does;
the smallest spec is printed. The summary gives kernels per second and findings by class.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TextIO

import jax

from minipallas.interop.importer.rules.kernel_call import kernel_from_eqn
from minipallas.ir.errors import MiniPallasError
from minipallas.lowering.compat.jax_private import core as jax_core
from minipallas.lowering.runtime.libtpu import tpu_device, tpu_sharding
from minipallas.tools.difftest.checks.program import kernel_eqns
from minipallas.tools.difftest.coverage import Coverage
from minipallas.tools.difftest.halts import out_of_bounds_block
from minipallas.tools.difftest.harness import run
from minipallas.tools.difftest.report import Case
from minipallas.tools.difftest.tpu import KernelRule, evaluate, minipallas_kernel, upstream_kernel
from minipallas.tools.difftest.tpu import tpu_device as the_chip
from minipallas.tools.fuzz import loop
from minipallas.tools.fuzz.kernels import kernel_texts, pipeline_blame, upstream_call
from minipallas.tools.generate import kernel_params
from minipallas.tools.generate.choices import Choices, RandomChoices
from minipallas.tools.generate.directed_kernels import Director
from minipallas.tools.generate.kernels import (
    KernelSpec,
    kernel_inputs,
    minipallas_call,
    random_kernel,
    tpu_sized,
)
from minipallas.tools.progress import Progress, campaign_parser, print_summary
from minipallas.tools.user_passes import (
    PassCoverage,
    argv_of,
    first_bad_pass,
)
from minipallas.tpu import VMEM

# not findings: a kernel made out of bounds on purpose, and flagged (``halts``); upstream
# refusing a drawn parameter minipallas documents running (``BEYOND``)
GOOD = ("agree", "both-refuse", "out-of-bounds-flagged", "beyond-upstream-documented")
# Parameters upstream's Mosaic lowering fails on and minipallas honours, as the parameter
# corpus documents them (minipallas/tools/corpora/param_op_cases.py): the parameter (a key of
# ``kernel_params.parameters``) and a fragment of upstream's error.
BEYOND = {
    "mul out_dtype": "Too many leaves for PyTreeDef",  # upstream's rule traces its helper
    # a float32 dot into bfloat16: minipallas accumulates in float32 and rounds once (XLA's
    # meaning); upstream's matmul takes a bfloat16 accumulator, which Mosaic refuses
    "preferred_element_type": "acc to be 32-bit",
}
OOB_RATE = 0.05  # the share of kernels made out of bounds on purpose, by default
Verdict = Callable[[KernelSpec, int], tuple[str, str]]
WORKER_SECONDS = 40  # a process holding the chip was killed ~55 s in on the v5e (README)


@dataclass
class Summary:
    kernels: int = 0
    classes: Counter = field(default_factory=Counter)  # verdict kind -> kernels
    findings: list[str] = field(default_factory=list)  # "kind: why; shrunk spec"
    coverage: Coverage = field(default_factory=Coverage)  # parameters drawn, by verdict
    passes: PassCoverage | None = None  # with a pipeline: the kernels each pass changed

    def add(
        self,
        kind: str,
        finding: str | None,
        params: dict[str, str] | None = None,
        changed: Sequence[str] | None = None,  # the passes that changed the kernel
    ) -> None:
        self.kernels += 1
        self.classes[kind] += 1
        self.coverage.add(params or {}, kind)
        if self.passes is not None:
            self.passes.count(changed or [])
        if finding is not None:
            self.findings.append(finding)


def kernel(
    rng: random.Random, oob_rate: float = OOB_RATE, params: random.Random | None = None
) -> tuple[KernelSpec, int]:
    """The next kernel of an undirected campaign (out of bounds on purpose with chance
    ``oob_rate``; its parameters drawn from ``params``, if given), and its inputs' seed."""
    choices = None if params is None else RandomChoices(params)
    return _draw(oob_rate, RandomChoices(rng), choices), rng.randrange(2**16)


def _draw(oob_rate: float, c: Choices, params: Choices | None) -> KernelSpec:
    return tpu_sized(random_kernel(c, out_of_bounds=oob_rate, params=params))


def documented(spec: KernelSpec, kind: str, why: str) -> str:
    """``kind``, or ``beyond-upstream-documented`` for upstream refusing a parameter ``spec``
    draws that ``BEYOND`` documents minipallas running."""
    drawn = kernel_params.parameters(spec)
    if kind == "beyond-upstream" and any(p in drawn and text in why for p, text in BEYOND.items()):
        return "beyond-upstream-documented"
    return kind


def bounds_verdict(spec: KernelSpec, seed: int) -> tuple[str, str] | None:
    """None for a kernel in bounds by the generator's arithmetic (``KernelSpec.outside``) and by
    ``halts``' run of its maps on its TPU blocks; else the class (module doc) and why."""
    args = kernel_inputs(spec, seed)
    # a block's place is the maps' and the arrays' business: a transcendental's accuracy=,
    # which minipallas refuses (as upstream's Mosaic lowering does), changes none
    traced = minipallas_call(dataclasses.replace(spec, accuracy=None))
    found = out_of_bounds_block(traced.trace(*args, memory_space=VMEM), args)
    meant = spec.outside()
    if meant is None and found is None:
        return None
    if found is None:
        return "out-of-bounds-missed", f"made out of bounds ({meant}), not flagged by halts"
    if meant is None:
        return "out-of-bounds-unmeant", f"made in bounds, flagged by halts: {found}"
    return "out-of-bounds-flagged", found


def aot_verdict(spec: KernelSpec, seed: int, passes: str = "") -> tuple[str, str]:
    """Both sides compiled by libtpu for a v5e (mode 1), each as the difftest's TPU way runs
    it (minipallas's after the pipeline ``passes``; then first its values on the CPU): the
    class and why."""
    args = kernel_inputs(spec, seed)
    if passes:
        blame = pipeline_blame(spec, args, passes)
        if blame is not None:
            return "pass-bug", blame.text()
    jaxpr = jax.make_jaxpr(upstream_call(spec))(*args)
    sharding = tpu_sharding()
    specs = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding) for a in args]

    def refusal(kernel_rule: KernelRule) -> str | None:
        fn = functools.partial(evaluate, jaxpr.jaxpr, jaxpr.consts, kernel=kernel_rule)
        try:
            with jax.default_device(tpu_device()):  # upstream's lowering asks the device kind
                jax.jit(lambda *xs: fn(xs), out_shardings=sharding).lower(*specs).compile()
        except Exception as e:  # a refusal, whatever its class
            return f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200]}"
        return None

    ours = functools.partial(minipallas_kernel, passes=passes)
    sides = (("minipallas", ours), ("upstream", upstream_kernel))
    why = {side: found for side, rule in sides if (found := refusal(rule)) is not None}
    if len(why) == 2:
        return "both-refuse", f"minipallas: {why['minipallas']}; upstream: {why['upstream']}"
    if "minipallas" in why:
        blame = _refusing_pass(jaxpr, passes, refusal)
        return "minipallas-refuses", why["minipallas"] + (f"\n{blame}" if blame else "")
    if why:
        return documented(spec, "beyond-upstream", why["upstream"]), why["upstream"]
    return "agree", ""


def _refusing_pass(
    jaxpr: jax_core.ClosedJaxpr, passes: str, refusal: Callable[[KernelRule], str | None]
) -> str | None:
    """The pass of ``passes`` after which libtpu first refuses minipallas's module, with the
    kernel before and after it (``user_passes.first_bad_pass``); None without one."""
    eqns = list(kernel_eqns(jaxpr.jaxpr))
    if not passes or len(eqns) != 1:
        return None
    (eqn,) = eqns

    def compiles(prefix: str) -> list[None]:
        found = refusal(functools.partial(minipallas_kernel, passes=prefix))
        if found is not None:
            raise MiniPallasError(found)
        return []

    def text(prefix: str) -> str:
        return str(kernel_from_eqn(eqn, memory_space=VMEM, passes=prefix))

    blame = first_bad_pass(passes, compiles, text, lambda want, got: None)
    return None if blame is None else blame.text()


def chip_verdict(spec: KernelSpec, seed: int, passes: str = "") -> tuple[str, str]:
    """The difftest's TPU ways (mode 2), minipallas's kernel after ``passes``: the verdict's
    kind and message (``pass-bug`` when the pipeline changed the CPU ways' values). Without a
    TPU, ``NoTpuError`` (the harness would only compile ahead of time, which is ``--aot``)."""
    the_chip()
    args = tuple(kernel_inputs(spec, seed))
    case = Case(f"fuzz-tpu {seed}", upstream_call(spec), args, passes=passes)
    report = run(case, compile=False, device="tpu")
    jax.clear_caches()  # each kernel's executables, not kept alive on the chip
    if report.blame is not None:
        return "pass-bug", report.blame.text()
    return documented(spec, report.tpu.kind, report.tpu.message), report.tpu.message


def simpler(spec: KernelSpec) -> Iterator[KernelSpec]:
    """Specs one step plainer than ``spec`` (module doc)."""
    plain = {
        "scratch": None, "reduce": None, "inner_loop": False, "staged": False,
        "branch_axis": None, "dtype": "float32", "dot": None, "reciprocal": None,
        "accuracy": None, "buffered": None, "multiple_of": False, "mul_out": None,
    }  # fmt: skip
    for name, value in plain.items():
        if getattr(spec, name) != value:
            yield dataclasses.replace(spec, **{name: value})
    if spec.dot is not None and spec.dot.precision is not None:
        yield dataclasses.replace(spec, dot=dataclasses.replace(spec.dot, precision=None))
    if spec.dot is not None and spec.dot.out is not None:
        yield dataclasses.replace(spec, dot=dataclasses.replace(spec.dot, out=None))
    operands = [*spec.inputs, spec.output]
    for k, o in enumerate(operands):
        if o.index_map.multiple_of:
            unaligned = dataclasses.replace(o.index_map, multiple_of=False)
            changed = list(operands)
            changed[k] = dataclasses.replace(o, index_map=unaligned)
            yield dataclasses.replace(spec, inputs=tuple(changed[:-1]), output=changed[-1])
    for axis, n in enumerate(spec.grid):
        if n > 1:
            yield dataclasses.replace(spec, grid=(*spec.grid[:axis], 1, *spec.grid[axis + 1 :]))
    if len(spec.inputs) > 1:
        buffered = spec.buffered if spec.buffered is None or spec.buffered[0] < 1 else None
        yield dataclasses.replace(spec, inputs=spec.inputs[:1], buffered=buffered)


def shrink(spec: KernelSpec, seed: int, kind: str, verdict: Verdict) -> KernelSpec:
    """The plainest spec reached by steps that keep the finding's class."""
    progressed = True
    while progressed:
        progressed = False
        for candidate in simpler(spec):
            try:
                same = verdict(candidate, seed)[0] == kind
            except Exception:  # a simplification that breaks the harness is not kept
                same = False
            if same:
                spec, progressed = candidate, True
                break
    return spec


def campaign(
    count: int,
    seconds: float,
    seed: int,
    verdict: Verdict,
    out: TextIO | None = None,
    progress: Progress | None = None,
    journal: TextIO | None = None,
    skip: int = 0,
    simulate_halt: int | None = None,
    oob_rate: float = OOB_RATE,
    passes: str = "",
    targets: Sequence[str] = (),
) -> Summary:
    """Kernels ``skip``, ``skip + 1``, ... of the campaign ``seed`` (at most ``count`` in all,
    for ``seconds``), drawn so the passes ``targets`` of ``passes`` rewrite them
    (``generate.directed_kernels``), each judged by ``bounds_verdict``, then, in bounds, by
    ``verdict``; with a ``journal``, a line before and after each kernel (``{"start": k}``,
    ``{"done": k, "kind": ..., "finding": ...}``)."""

    def judged(spec: KernelSpec, seed: int) -> tuple[str, str]:
        return bounds_verdict(spec, seed) or verdict(spec, seed)

    rng, params = random.Random(seed), kernel_params.generator(seed)
    director = Director(functools.partial(_draw, oob_rate), passes, targets)
    for _ in range(skip):  # the same draws, so a worker goes on where the last one stopped
        director.next(rng, params)
        rng.randrange(2**16)
    summary = Summary(passes=PassCoverage(passes, "kernels") if passes else None)
    deadline = time.monotonic() + seconds
    for index in range(skip, count):
        if time.monotonic() >= deadline:
            break
        chosen = director.next(rng, params)
        spec, inputs_seed = chosen.spec, rng.randrange(2**16)
        _note(journal, {"start": index})
        if index == simulate_halt:  # die as a process holding a halted chip does
            os._exit(134)
        kind, why = judged(spec, inputs_seed)
        finding = None
        if kind not in GOOD:
            small = shrink(spec, inputs_seed, kind, judged)
            finding = f"{kind} (kernel {index}, inputs seed {inputs_seed}): {why}; shrunk: "
            finding += small.describe()
            print(f"FINDING {finding}", file=out or sys.stdout, flush=True)
        drawn = kernel_params.parameters(spec)
        changed: list[str] = []
        if summary.passes is not None:  # the director's texts, when it traced the kernel
            texts = chosen.texts
            changed = summary.passes.fired(texts or kernel_texts(spec, inputs_seed, passes))
        summary.add(kind, finding, drawn, changed)
        done = {"done": index, "kind": kind, "finding": finding, "params": drawn}
        _note(journal, done | {"changed": changed})
        if progress is not None:
            progress.update(findings=len(summary.findings))
    return summary


def _note(journal: TextIO | None, entry: dict) -> None:
    if journal is not None:
        journal.write(json.dumps(entry) + "\n")
        journal.flush()


def supervised(
    count: int,
    seconds: float,
    seed: int,
    aot: bool = False,
    simulate_halt: int | None = None,
    oob_rate: float = OOB_RATE,
    pass_flags: Sequence[str] = (),
    passes: str = "",
) -> Summary:
    """The chip campaign in worker processes: a worker that dies (a halted chip poisons the
    process that holds it) costs only the kernel it was running, reported as ``halted``, and a
    fresh worker goes on after it. ``aot`` gives the workers the ahead-of-time verdict and
    ``simulate_halt`` kills the worker at that kernel: how the tests check the isolation.
    ``pass_flags`` (``--load``, ``--pass-pipeline``) go to every worker; ``passes`` is the
    pipeline they name, whose passes' changes the workers journal."""
    summary = Summary(passes=PassCoverage(passes, "kernels") if passes else None)
    start, deadline = 0, time.monotonic() + seconds
    while start < count and time.monotonic() < deadline:
        first = start
        with tempfile.NamedTemporaryFile("r", suffix=".jsonl") as journal:
            left = str(min(max(deadline - time.monotonic(), 1.0), WORKER_SECONDS))
            command = [sys.executable, "-m", "minipallas.tools.fuzz.tpu", "--worker"]
            command += ["--seed", str(seed), "--skip", str(start), "--count", str(count)]
            command += ["--oob-rate", str(oob_rate), *pass_flags]
            command += ["--seconds", left, "--journal", journal.name] + (["--aot"] if aot else [])
            if simulate_halt is not None:
                command += ["--simulate-halt", str(simulate_halt)]
            worker = subprocess.run(command, stderr=subprocess.PIPE, text=True, check=False)
            running = None
            for line in journal.read().splitlines():
                entry = json.loads(line)
                if "start" in entry:
                    running = entry["start"]
                    continue
                summary.add(
                    entry["kind"], entry["finding"], entry.get("params"), entry.get("changed")
                )
                running, start = None, entry["done"] + 1
        if running is None:  # every kernel it started finished
            if worker.returncode not in (0, 1) and start == first:
                raise RuntimeError(f"the fuzz-tpu worker failed:\n{worker.stderr[-2000:]}")
            continue
        log = worker.stderr.strip().splitlines()[-1:] or ["no output"]
        finding = f"halted (kernel {running}): the worker died (exit {worker.returncode}): {log[0]}"
        print(f"FINDING {finding}", flush=True)
        summary.add("halted", finding)
        start = running + 1
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    parser = campaign_parser("minipallas.tools.fuzz.tpu", __doc__.splitlines()[0])
    parser.add_argument("--aot", action="store_true", help="compile both sides only (no chip)")
    parser.add_argument(
        "--oob-rate", type=float, default=OOB_RATE, help="share of kernels out of bounds on purpose"
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--skip", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--journal", help=argparse.SUPPRESS)
    parser.add_argument("--simulate-halt", type=int, help=argparse.SUPPRESS)
    return loop.main(parser, argv, _main, name="fuzz-tpu")


def _main(args: argparse.Namespace, passes: str, targets: list[str]) -> int:
    verdict = functools.partial(aot_verdict if args.aot else chip_verdict, passes=passes)
    if args.worker:
        with open(args.journal, "a") as journal:
            s = campaign(args.count, args.seconds, args.seed, verdict, journal=journal,
                         skip=args.skip, simulate_halt=args.simulate_halt,
                         oob_rate=args.oob_rate, passes=passes, targets=targets)  # fmt: skip
        return 1 if s.findings else 0
    if targets:
        print(f"pass-directed: {', '.join(targets)}")
    start = time.monotonic()
    if args.aot:
        with Progress("fuzz-tpu", args.count, args.seconds, unit="kernel") as bar:
            s = campaign(args.count, args.seconds, args.seed, verdict, progress=bar,
                         oob_rate=args.oob_rate, passes=passes, targets=targets)  # fmt: skip
    else:
        target = ["--target-pass", args.target_pass] if args.target_pass else []
        s = supervised(args.count, args.seconds, args.seed, oob_rate=args.oob_rate,
                       pass_flags=[*argv_of(args), *target], passes=passes)  # fmt: skip
    elapsed = time.monotonic() - start
    mode = "ahead of time (libtpu, v5e)" if args.aot else "on the chip"
    print(f"{s.kernels} kernels {mode}, {len(s.findings)} findings, {s.kernels / elapsed:.2f}/s")
    for line in s.passes.lines() if s.passes else ():
        print(line)
    s.coverage.report()
    meant = s.classes["out-of-bounds-flagged"] + s.classes["out-of-bounds-missed"]
    rows = {"kernels": s.kernels, "in bounds": s.kernels - meant, "out of bounds on purpose": meant}
    rows |= {f"class {k}": n for k, n in sorted(s.classes.items())}
    rows |= s.coverage.rows()
    print_summary(f"fuzz-tpu, seed {args.seed}, {mode}, {elapsed:.1f} s", rows)
    return 1 if s.findings else 0


if __name__ == "__main__":
    sys.exit(main())
