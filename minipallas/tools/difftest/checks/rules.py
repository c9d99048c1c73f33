"""The interpreter's rule table for the kernel checks: signed integer arithmetic that wraps is
an error, and every error names the buffer it touched.

XLA defines int32 overflow as wrapping, so the reference interpreter wraps silently. In index
arithmetic (a flat offset ``i * big``, an index map, a position ``offset + iota``) a wrap is
never meant: on the chip the address lands elsewhere, and the read halts the core or returns
other data. Index arithmetic is arithmetic on grid indices, iotas, constants and scalars in
SMEM; a value computed from data loaded from VMEM (or HBM) is data, which may wrap by design
(and padding garbage does), so it is not checked. Unsigned integers wrap by design (hashes,
the PRNG) and are left alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.core import Op, Value
from minipallas.ir.errors import MiniPallasError
from minipallas.ir.interpret.engine import RULES, Interpreter, Ref, Rule

_WIDE = {"add": np.add, "sub": np.subtract, "mul": np.multiply}


class Overflow(MiniPallasError):
    """Signed integer arithmetic wrapped around."""


def _checked_arith(name: str, base: Rule, data: set[Value]) -> Rule:
    wide = _WIDE[name]

    def apply(interp: Interpreter, op: Op, args: Sequence[Any]) -> Sequence[Any]:
        outs = base(interp, op, args)
        dtype = op.results[0].type.dtype
        indices = not any(v in data for v in op.operands)
        if indices and dtypes.is_int(dtype) and dtype.startswith("i"):
            exact = wide(*(np.asarray(a, np.int64) for a in args))
            wrapped = np.asarray(outs[0], np.int64)
            if not np.array_equal(exact, wrapped):
                k = int(np.argmax((exact != wrapped).ravel()))
                raise Overflow(
                    f"{dtype} {name} wraps around: {np.ravel(exact)[k]} becomes "
                    f"{np.ravel(wrapped)[k]}",
                    op=op.name,
                    loc=op.loc,
                    fix="compute the offset in fewer steps that each fit, or index a "
                    "smaller view (ref.at[...]) instead of a flat offset",
                )
        return outs

    return apply


def checked_rules(
    name_of: Callable[[np.ndarray], str], scalar: Callable[[np.ndarray], bool]
) -> dict[str, Rule]:
    """``RULES`` with overflow checks on signed index arithmetic (``add``/``sub``/``mul`` of
    values no load from a non-``scalar`` buffer fed), and every error of a rule that took a ref
    re-raised with ``buffer`` set to ``name_of`` its storage. One table per run: it keeps
    which values are data."""
    data: set[Value] = set()
    table: dict[str, Rule] = {}
    for name, base in RULES.items():
        rule = _checked_arith(name, base, data) if name in _WIDE else base
        table[name] = _tracking(rule, name_of, scalar, data)
    return table


def _tracking(
    rule: Rule,
    name_of: Callable[[np.ndarray], str],
    scalar: Callable[[np.ndarray], bool],
    data: set[Value],
) -> Rule:
    def apply(interp: Interpreter, op: Op, args: Sequence[Any]) -> Sequence[Any]:
        refs = [a for a in args if type(a) is Ref]
        try:
            outs = rule(interp, op, args)
        except MiniPallasError as e:
            if getattr(e, "buffer", None) is None:
                e.buffer = _named(e.message, refs, name_of)
            raise
        if any(not scalar(r.data) for r in refs) or any(v in data for v in op.operands):
            data.update(op.results)
        return outs

    return apply


def _named(message: str, refs: list[Ref], name_of: Callable[[np.ndarray], str]) -> str:
    """The buffer an error is about: a copy's semaphore or destination when it says so, else
    the op's first ref."""
    if not refs:
        return ""
    if "semaphore" in message:
        return name_of(refs[-1].data)
    if "destination" in message and len(refs) > 1:
        return name_of(refs[1].data)
    return name_of(refs[0].data)
