"""Constant folding for the cleanup pass: a pure op on constants becomes a constant.

The value is what the reference interpreter computes, by running the op's own interpreter rule
on the constant operands, so folding is right by construction: the folded program gives the
interpreter's bits (NaN payloads, signed zeros and XLA's subnormal flushing included). The rule
runs with ``checks=True``: an op that would raise at run time under ``interpret(...,
checks=True)`` (a constant out-of-range index) is left for run time to report.

Folded: pure, region-free ops with at least one operand, every operand a ``constant``. Not
folded: ops with effects, ``optimization_barrier`` (hiding a value from folding is its point),
ops without operands (``iota``, ``uninitialized``: a constant would only be longer), and ops
whose constant would bloat the program: one with more than ``MAX_ELEMENTS`` elements must be a
splat (printed as one scalar), and no constant in or out may have more than ``MAX_SPLAT``
elements. An elementwise op or a data move on splats is computed on one element, so folding
costs O(1) work per op plus writing the result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from minipallas.ir.core import Op, Value
from minipallas.ir.interpret import RULES, Interpreter
from minipallas.ir.interpret.engine import conforms
from minipallas.ir.literal import Literal
from minipallas.ir.opdef import OPS
from minipallas.ir.opset.arrays import (
    ARITHMETIC,
    BITWISE,
    COMPARISONS,
    FLOAT_BINARY,
    SHIFTS,
    UNARY,
)
from minipallas.ir.types import ArrayType

MAX_ELEMENTS = 1024  # a folded constant larger than this must be a splat
MAX_SPLAT = 1 << 16  # no constant folded into or out of may be larger (256 KiB of f32)

# ops computing each element from the elements at the same position (a splat in, a splat out)
ELEMENTWISE = frozenset(
    (*ARITHMETIC, *FLOAT_BINARY, *BITWISE, *SHIFTS, *COMPARISONS, *UNARY)
    + ("logistic", "select", "convert", "bitcast", "reciprocal", "multiple_of")
)
# ops whose point is to hide a value from folding, XLA's included
KEPT = frozenset(("optimization_barrier",))
# ops that only move or copy operand 0's elements: a splat stays the same splat
MOVES = frozenset(("broadcast_in_dim", "reshape", "transpose", "reverse", "slice"))


def fold(op: Op, defs: Mapping[Value, Op]) -> Op | None:
    """``op`` as a ``constant`` with the same result, or None if it is not folded."""
    if not op.operands or op.regions or len(op.results) != 1:
        return None
    opdef = OPS.get(op.name)
    if opdef is None or not opdef.pure or op.name in KEPT:
        return None
    literals = []
    for v in op.operands:
        source = defs.get(v)
        if source is None or source.name != "constant":
            return None
        literals.append(source.attrs["value"])
    result = op.results[0].type
    if not isinstance(result, ArrayType) or result.size > MAX_SPLAT:
        return None
    if any(lit.type.size > MAX_SPLAT for lit in literals):
        return None
    value = _splat(op, literals) if all(lit.is_splat() for lit in literals) else None
    if value is None:
        if result.size > MAX_ELEMENTS:
            return None
        value = _run(op, [lit.array() for lit in literals])
        if value is None:
            return None
    literal = Literal(result, np.ascontiguousarray(value).tobytes())
    if result.size > MAX_ELEMENTS and not literal.is_splat():
        return None
    return Op.of_parts("constant", (), op.results, {"value": literal}, (), op.loc)


def _splat(op: Op, literals: Sequence[Literal]) -> np.ndarray | None:
    """The result of ``op`` on splat operands, computed on one element, when it is a splat;
    None when ``op`` is neither elementwise nor a move (it is then run on the full arrays)."""
    result = op.results[0].type
    if not all(lit.type.size for lit in literals):
        return None
    scalars = [lit.array().reshape(-1)[:1].reshape(()) for lit in literals]
    if op.name in MOVES:
        element = scalars[0]
    elif op.name in ELEMENTWISE:
        shrunk = Op.of_parts(
            op.name,
            tuple(Value(ArrayType((), lit.type.dtype)) for lit in literals),
            (Value(ArrayType((), result.dtype)),),
            op.attrs,
            (),
            op.loc,
        )
        element = _run(shrunk, scalars)
        if element is None:
            return None
    else:
        return None
    return np.broadcast_to(element, result.shape)


def _run(op: Op, args: list[Any]) -> np.ndarray | None:
    """The interpreter rule's result for ``op``, or None if it raises or gives a value of
    another type (left for run time, where the interpreter reports it)."""
    try:
        with np.errstate(all="ignore"):  # as ``interpret``: integers wrap, floats are IEEE's
            (out,) = RULES[op.name](Interpreter(checks=True), op, args)  # fresh: no state kept
    except Exception:  # an InterpretError, or numpy's on operands the op rejects
        return None
    out = np.asarray(out)
    return out if conforms(out, op.results[0].type) else None
