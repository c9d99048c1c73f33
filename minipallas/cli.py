"""``minipallas-opt``: parse text IR, verify it, optionally run passes, print the result.

::

    minipallas-opt kernel.mir                      # parse, verify, print
    minipallas-opt - < kernel.mir                  # the same, reading stdin
    minipallas-opt kernel.mir --pass-pipeline=collectives,discharge,cleanup --print-ir-after-all
    minipallas-opt kernel.mir --print-effects --locations

The text's last function is the one worked on; the functions before it are its callees. With
``--split-input-file`` the input is cut at lines reading ``// -----`` and each piece is handled
on its own (an error in one does not stop the others), as ``mlir-opt`` does; line numbers in
messages stay those of the whole file. Errors in the input are printed to stderr as
``FILE:LINE:COL: message`` and the exit code is 1; there is no traceback for them.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence

from minipallas.errors import MiniPallasError
from minipallas.ir.core import Function
from minipallas.ir.location import Location
from minipallas.ir.parser import parse_module
from minipallas.ir.printer import effects_text, print_function

SPLIT_MARKER = re.compile(r"^// -----\s*$", re.MULTILINE)


def _arguments() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="minipallas-opt", description="Parse, verify, transform and print minipallas IR."
    )
    ap.add_argument("file", help="text IR file, or '-' for stdin")
    ap.add_argument(
        "--pass-pipeline",
        metavar="PASSES",
        help="comma-separated passes to run, e.g. collectives,discharge,cleanup",
    )
    ap.add_argument(
        "--print-ir-after-all", action="store_true", help="print the IR after every pass"
    )
    ap.add_argument(
        "--print-effects",
        action="store_true",
        help="print the effects of each function and each region op before the IR",
    )
    ap.add_argument("--locations", action="store_true", help="print each op's loc(...)")
    ap.add_argument(
        "--split-input-file",
        action="store_true",
        help="handle each '// -----'-separated piece of the input on its own",
    )
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit code (0 ok, 1 bad input, 2 bad arguments)."""
    args = _arguments().parse_args(argv)
    name = "<stdin>" if args.file == "-" else args.file
    try:
        text = sys.stdin.read() if args.file == "-" else open(args.file).read()
    except OSError as e:
        print(f"minipallas-opt: cannot read {name}: {e.strerror}", file=sys.stderr)
        return 1
    pieces = _split(text) if args.split_input_file else [text]
    status = 0
    for k, piece in enumerate(pieces):
        if k:
            print("// -----")
        try:
            _process(piece, args)
        except MiniPallasError as e:
            sys.stdout.flush()  # keep stdout and stderr in order when both go to one place
            print(_describe(e, name), file=sys.stderr)
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


def _process(text: str, args: argparse.Namespace) -> None:
    from minipallas.ir.verifier import verify

    module = parse_module(text)
    verify(module)
    fn = module.entry
    if args.pass_pipeline is not None:
        from minipallas.passes.pipeline import run

        def dump(pass_name: str, result: Function) -> None:
            print(f"// -----// IR Dump After {pass_name} //----- //")
            print(print_function(result, locations=args.locations) + "\n")

        after_each = dump if args.print_ir_after_all else None
        fn = run(fn, args.pass_pipeline, verify=True, after_each=after_each)
    if args.print_effects:
        print(_effects_report(fn))
    print(print_function(fn, locations=args.locations))


def _effects_report(fn: Function) -> str:
    """``// effects of @f: {...}`` per function, then one line per region op or call, whose
    effects are at the positions of its operands."""
    from minipallas.passes.effects import EffectsAnalysis

    analysis = EffectsAnalysis()
    lines = []
    for f in (*fn.callees(), fn):
        lines.append(f"// effects of @{f.name}: {effects_text(analysis.function(f))}")
        for op in f.walk():
            if op.regions or op.name == "call":
                lines.append(f"//   {op.name} at {op.loc}: {effects_text(analysis.op(op))}")
    return "\n".join(lines)


def _describe(error: MiniPallasError, name: str) -> str:
    """The error as ``FILE:LINE:COL: message`` (position in the text) or ``FILE: message``,
    followed by any notes attached to it."""
    loc = error.loc
    verbatim = getattr(error, "verbatim", False)  # upstream's exact words; the note says where
    in_text = isinstance(loc, Location) and not loc.file and loc.line and not verbatim
    lines = [f"{name}:{error}" if in_text else f"{name}: {error}"]
    lines += getattr(error, "__notes__", [])
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
