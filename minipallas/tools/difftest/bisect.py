"""The first op whose compiled value leaves its envelope, for a ``compile`` disagreement.

``first_op_out(report)``:

1. Check that discharging what the ``compile`` way compiled (the import, or ``plant`` of it)
   and interpreting it gives what interpreting it gives; if not, the bug is discharge's, and
   that is the answer (no bisect).
2. Tap the import: a copy whose top-level ops' array results (at most ``MAX_TAPS``, in program
   order) are extra results, keeping only the values that what compile compiled shares with
   the import (a ``plant`` keeps the import's ops and values except those it replaces, so
   both line up by value identity, before any pass renames them). Interpret it: every tapped
   value as the interpreter computes it.
3. Judge each tap *locally*, in program order: the ops of what compile compiled that define it
   from tapped values and parameters (the import's op, or a plant's ops) run compiled on the
   interpreter's values of those operands (every tap's ops in one program, one compile), and
   the result is compared with the interpreter's within the envelope of the import's op alone
   on the same operands (sampled only for a tap whose bits differ). A tap of parameters only
   that the program returns (a kernel's ``call``) is judged by the harness's own comparison.
   The first tap out of its local envelope is the answer. Judged this way, a legal difference
   an earlier op made and a later one amplifies (``x - mean`` one ulp off, then squared; a
   max-subtracting ``exp`` of a value one ulp off) counts against no op.
4. If no tap is out locally (a bug that needs the whole program's fusion, or an op reading a
   ref), the first tap whose value in the tapped program, compiled, leaves the tapped
   import's envelope, and the finding says the answer is that one.

Bits decide for non-floats. Taps are only top-level values: a bug inside a loop body or a
kernel is reported at the loop op or the kernel's call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from minipallas.ir.core import Block, Function, Op, Value
from minipallas.ir.errors import MiniPallasError
from minipallas.ir.printer import Printer
from minipallas.ir.types import ArrayType
from minipallas.lowering.runtime.compiled import compile as compile_fn
from minipallas.passes.pipeline import run as run_pipeline
from minipallas.tools.difftest.outputs import initial, interpret_outputs
from minipallas.tools.difftest.report import Report, compare, numerics_envelope
from minipallas.tools.envelope.measure import Envelope, envelope

MAX_TAPS = 256


def op_text(fn: Function, op: Op) -> str:
    """``op``'s first printed line, with the value names it has in ``fn``'s text, and where it
    comes from."""

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


def first_op_out(report: Report) -> tuple[str | None, str]:
    """(the first op out of its envelope, or None; what was found), for ``report``'s
    ``compile`` disagreement."""
    program, compiled, args = report.program, report.compiled, report.case.args
    if program is None or compiled is None:
        return None, "no program to bisect"
    mine = interpret_outputs(compiled, args)
    pure = interpret_outputs(
        run_pipeline(compiled, "discharge"), [getattr(a, "value", a) for a in args]
    )
    if any(compare(w, g) is not None for w, g in zip(mine, pure, strict=False)):
        return None, "discharge of the compiled program disagrees with interpreting it (no bisect)"
    ours = _top_level_arrays(program)
    theirs = _top_level_arrays(compiled)
    shared = [v for v in theirs if v in ours]
    note = ""
    if len(shared) > MAX_TAPS:
        note = f" (tapped the first {MAX_TAPS} of {len(shared)} top-level values)"
        shared = shared[:MAX_TAPS]
    reference = _tapped(program, shared)
    base = interpret_outputs(reference, args)
    first = len(program.body.results)
    values = dict(zip(shared, base[first : first + len(shared)], strict=True))
    values.update(
        (p, a) for p, a in zip(program.params, args, strict=True) if isinstance(p.type, ArrayType)
    )
    local = _Local(report, ours, compiled, values)
    for v in shared:
        how = local.out(v)
        if how is not None:
            text = op_text(compiled, theirs[v])
            return (
                text,
                f"first op out of its envelope on the interpreter's operands{note}: {text}: {how}",
            )
    run = _tapped(compiled, shared)
    env = envelope(reference, args, base)
    got = _compiled_outputs(run, args)
    for i, v in enumerate(shared):
        how = _out(env, first + i, base[first + i], got[first + i], report.case.ulps)
        if how is not None:
            text = op_text(compiled, theirs[v])
            return text, (
                f"no op leaves its envelope on the interpreter's operands{note}{local.note}; "
                f"the first tapped value out of its envelope in the whole program: {text}: {how}"
            )
    return None, f"no tapped value leaves its envelope{note}{local.note}; only the outputs do"


def _compiled_outputs(fn: Function, args: Sequence[Any]) -> list[np.ndarray]:
    return list(compile_fn(fn)(*initial(args)))


def _out(env: Envelope, k: int, want: np.ndarray, got: np.ndarray, ulps: int) -> str | None:
    """How output ``k`` 's ``got`` leaves ``env`` (bits for a non-float), or None if it stays."""
    d = env.judge(k, want, got, ulps)
    if d is None:
        return "differs in bits" if compare(want, got) is not None else None
    return None if d.within else f"{d.ulps} ulps, {d.fraction:.3g}x its envelope"


class _Local:
    """Step 3: each tap's defining ops, compiled on the interpreter's operand values (all taps
    at once, on first use), judged against the import's op alone on the same operands."""

    def __init__(
        self,
        report: Report,
        ours: dict[Value, Op],
        compiled: Function,
        values: dict[Value, Any],
    ) -> None:
        self.report, self.ours, self.values = report, ours, values
        self.note = ""
        params = set(compiled.params)
        imported = {v for op in report.program.body.ops for v in op.results}
        defs = {v: op for op in compiled.body.ops for v in op.results}
        order = {op: i for i, op in enumerate(compiled.body.ops)}
        self.sources: dict[Value, list[Op]] = {}
        for v in ours:
            if v in values and v in defs and all(u in values for u in ours[v].operands):
                ops = _sources(defs, v, values, imported)
                if ops is not None:
                    self.sources[v] = sorted(ops, key=order.__getitem__)
        # taps of parameters only that both programs return: the whole program's own verdict
        returned = _returned(report.program, compiled)
        self.whole = {
            v: returned[v]
            for v, ops in self.sources.items()
            if v in returned
            and all(u in params for u in (*ours[v].operands, *_leaves(ops, values)))
        }
        self.got: dict[Value, np.ndarray] | None = None

    def out(self, v: Value) -> str | None:
        """How the tap ``v`` leaves its local envelope, or None if it stays or is not judged
        locally (an operand that is no tapped value)."""
        ulps = self.report.case.ulps
        if v in self.whole:
            env = numerics_envelope(self.report)
            got = self.report.outcomes["compile"].outputs
            if env is None or got is None:
                return None
            return _out(env, self.whole[v], self.values[v], got[self.whole[v]], ulps)
        got = self._compiled().get(v)
        if got is None:
            return None
        want = self.values[v]
        if compare(want, got) is None:
            return None  # the same bits: no envelope to sample
        fn, operands = _alone(self.ours[v], v)
        env = envelope(fn, [self.values[u] for u in operands], [want])
        return _out(env, 0, want, got, ulps)

    def _compiled(self) -> dict[Value, np.ndarray]:
        """Every locally judged tap's value, its defining ops compiled in one program."""
        if self.got is None:
            taps = [v for v in self.sources if v not in self.whole]
            leaves = list(
                dict.fromkeys(u for v in taps for u in _leaves(self.sources[v], self.values))
            )
            fn = _local_program([self.sources[v] for v in taps], taps, leaves)
            try:
                got = _compiled_outputs(fn, [self.values[u] for u in leaves]) if taps else []
            except MiniPallasError as e:  # e.g. an op the lowering takes only in context
                self.note = f" (the ops alone did not compile: {str(e).splitlines()[0]})"
                taps, got = [], []
            self.got = dict(zip(taps, got, strict=True))
        return self.got


def _returned(program: Function, compiled: Function) -> dict[Value, int]:
    """The values both programs return at the same position: that position (the first)."""
    out: dict[Value, int] = {}
    for k, (a, b) in enumerate(zip(program.body.results, compiled.body.results, strict=False)):
        if a is b:
            out.setdefault(a, k)
    return out


def _sources(
    defs: dict[Value, Op], v: Value, leaves: dict[Value, Any], imported: set[Value]
) -> list[Op] | None:
    """The ops that define ``v`` from ``leaves``: ``v`` 's op and, through values the import
    lacks (a plant's), the ops before it; None if one reads anything else (a ref, an untapped
    value)."""
    found: list[Op] = []
    todo = [defs[v]]
    while todo:
        op = todo.pop()
        if op in found:
            continue
        found.append(op)
        for u in op.operands:
            if u in leaves:
                continue
            if u in imported or u not in defs:
                return None
            todo.append(defs[u])
    return found


def _leaves(ops: Sequence[Op], values: dict[Value, Any]) -> list[Value]:
    """The operands of ``ops`` that are tapped values or parameters."""
    return [u for op in ops for u in op.operands if u in values]


def _local_program(
    groups: Sequence[list[Op]], taps: Sequence[Value], leaves: Sequence[Value]
) -> Function:
    """One program over ``leaves`` returning each tap as its group of ops computes it, every
    group reading only the parameters (copies with fresh results)."""
    params = {u: Value(u.type) for u in leaves}
    ops: list[Op] = []
    results = []
    for group, v in zip(groups, taps, strict=True):
        names = dict(params)
        for op in group:
            copy = op.renamed(tuple(names[u] for u in op.operands))
            names.update(zip(op.results, copy.results, strict=True))
            ops.append(copy)
        results.append(names[v])
    return Function("local", Block(tuple(params.values()), tuple(ops), tuple(results)))


def _alone(op: Op, v: Value) -> tuple[Function, list[Value]]:
    """``op`` as a program of its own over its distinct operands, returning ``v``; and those
    operands, in parameter order."""
    operands = list(dict.fromkeys(op.operands))
    params = {u: Value(u.type) for u in operands}
    copy = op.renamed(tuple(params[u] for u in op.operands))
    result = copy.results[op.results.index(v)]
    return Function("alone", Block(tuple(params.values()), (copy,), (result,))), operands
