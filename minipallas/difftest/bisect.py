"""The first op whose compiled value leaves its envelope, for a ``compile`` disagreement.

``first_op_out(report)``:

1. Check that discharging what the ``compile`` way compiled (the import, or ``plant`` of it)
   and interpreting it gives what interpreting it gives; if not, the bug is discharge's, and
   that is the answer (no bisect).
2. Tap the import: a copy whose top-level ops' array results (at most ``MAX_TAPS``, in program
   order) are extra results. Tap what compile compiled the same way, keeping only the values
   it shares with the import (a ``plant`` keeps the import's ops and values except those it
   replaces, so both taps line up by value identity, before any pass renames them).
3. Interpret the tapped import (plus ``envelope.SAMPLES`` perturbed runs for each tap's
   envelope), compile and run the tapped program, and return the first tap, in program order,
   whose compiled value leaves its envelope (bits for non-floats): the op defining it, as IR
   text with its source location.

Taps are only top-level values: a bug inside a loop body is reported at the loop op.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from minipallas.difftest.envelope import envelope
from minipallas.ir.core import Block, Function, Op, Value
from minipallas.ir.types import ArrayType

MAX_TAPS = 256


def op_text(fn: Function, op: Op) -> str:
    """``op``'s first printed line, with the value names it has in ``fn``'s text, and where it
    comes from."""
    from minipallas.ir.printer import Printer

    whole = Printer()
    whole.function(fn)
    alone = Printer()
    alone.names = dict(whole.names)
    if op.results:  # results are named in a row: start at the first one's number
        alone.defined = int(whole.names[op.results[0]][1:])
    alone.op(op, "")
    return f"{alone.lines[0]}  (at {op.loc})"


def _tapped(fn: Function, taps: Sequence[Value]) -> Function:
    return Function(fn.name, Block(fn.params, fn.body.ops, (*fn.body.results, *taps)))


def _top_level_arrays(fn: Function) -> dict[Value, Op]:
    return {v: op for op in fn.body.ops for v in op.results if isinstance(v.type, ArrayType)}


def first_op_out(report: Any) -> tuple[str | None, str]:  # noqa: ANN401 - a harness.Report
    """(the first op out of its envelope, or None; what was found), for ``report``'s
    ``compile`` disagreement."""
    from minipallas.compiled import compile as compile_fn
    from minipallas.difftest.harness import _initial, compare, interpret_outputs
    from minipallas.passes.discharge import discharge

    program, compiled, args = report.program, report.compiled, report.case.args
    if program is None or compiled is None:
        return None, "no program to bisect"
    mine = interpret_outputs(compiled, args)
    pure = interpret_outputs(discharge(compiled), [getattr(a, "value", a) for a in args])
    if any(compare(w, g) is not None for w, g in zip(mine, pure, strict=False)):
        return None, "discharge of the compiled program disagrees with interpreting it (no bisect)"
    ours = _top_level_arrays(program)
    theirs = _top_level_arrays(compiled)
    shared = [v for v in theirs if v in ours]
    note = ""
    if len(shared) > MAX_TAPS:
        note = f" (tapped the first {MAX_TAPS} of {len(shared)} top-level values)"
        shared = shared[:MAX_TAPS]
    reference, run = _tapped(program, shared), _tapped(compiled, shared)
    base = interpret_outputs(reference, args)
    env = envelope(reference, args, base)
    got = list(compile_fn(run)(*_initial(args)))
    first = len(program.body.results)
    for i, v in enumerate(shared):
        k = first + i
        d = env.judge(k, base[k], got[k], report.case.ulps)
        if d is None:
            out = compare(base[k], got[k]) is not None
            how = "differs in bits"
        else:
            out = not d.within
            how = f"{d.ulps} ulps, {d.fraction:.3g}x its envelope"
        if out:
            text = op_text(compiled, theirs[v])
            return text, f"first op out of its envelope{note}: {text}: {how}"
    return None, f"no tapped value leaves its envelope{note}; only the outputs do"
