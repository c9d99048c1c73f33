"""The cleanup pass's algebraic identities: rewrites that are exact in the interpreter's numerics.

Integer and bool arithmetic is exact (wrapping), so there ``x + 0``, ``x - 0``, ``x * 1``,
``x / 1``, ``x | 0``, ``x ^ 0``, ``x & ~0`` and shifts by 0 are ``x``; ``x * 0``, ``x & 0``
and ``x | ~0`` are the constant; ``x & x``, ``x | x``, ``max(x, x)``, ``min(x, x)``,
``not not x`` and ``-(-x)`` are ``x``.

None of these fire on floats: ``-0.0 + 0.0`` is ``+0.0``, XLA on CPU flushes subnormals in
``x * 1`` and ``x + -0.0`` (the interpreter does too, see ``ir/interpret/xla/numerics.py``), and
float16/bfloat16 arithmetic goes through float32, quieting signalling NaNs.

A ``convert`` back to the dtype a ``convert`` came from is its first operand when the middle
dtype holds every value of the first exactly (``holds``): i8 -> i32 -> i8, u8 -> bf16 -> u8,
bool -> f32 -> bool, f16 -> f32 -> f16, bf16 -> f32 -> bf16, but not f32 -> f16 -> f32 or
i16 -> f16 -> i16. Float values survive the widening pair exactly; a NaN stays a NaN of the same
sign with its bits as they were, which is what XLA's compiled code gives (its algebraic
simplifier removes the same pair), while the interpreter run on the pair quiets a signalling
float16 NaN and gives bfloat16's canonical NaN.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.core import Op, Value
from minipallas.passes.cleanup_patterns import Pattern, pattern

# op name -> its identities, tried after its ``PATTERNS``; ``cleanup{fold=false}`` skips them
IDENTITIES: dict[str, list[Pattern]] = {}

# x OP c is x when c is: "zero" (every bit clear), "one" (the value 1) or "ones" (every bit set)
_KEEPS = {
    "add": "zero",
    "sub": "zero",
    "mul": "one",
    "div": "one",
    "or": "zero",
    "xor": "zero",
    "and": "ones",
    "shift_left": "zero",
    "shift_right_logical": "zero",
    "shift_right_arithmetic": "zero",
}
# x OP c is c when c is:
_ABSORBS = {"mul": "zero", "and": "zero", "or": "ones"}
_COMMUTATIVE = frozenset(("add", "mul", "or", "xor", "and"))
_IDEMPOTENT = frozenset(("and", "or", "max", "min"))

# significant bits of each float dtype (the implicit leading bit included)
_PRECISION = {"float32": 24, "bfloat16": 8, "float16": 11}


def _exact(dtype: str) -> bool:
    """Integer and bool arithmetic, where the identities hold for every value."""
    return dtype == "bool" or dtypes.is_int(dtype)


def _kinds(value: Value, defs: Mapping[Value, Op]) -> frozenset[str]:
    """Which of "zero", "one", "ones" a splat constant ``value`` is (none if not a constant)."""
    source = defs.get(value)
    if source is None or source.name != "constant":
        return frozenset()
    literal = source.attrs["value"]
    if not literal.type.size or not literal.is_splat():
        return frozenset()
    element = literal.array().reshape(-1)[:1]
    bits = element.view(np.uint8)
    kinds = {"zero"} if not bits.any() else set()
    if (bits == 0xFF).all() or (literal.type.dtype == "bool" and element[0]):
        kinds.add("ones")
    if element[0] == 1:
        kinds.add("one")
    return frozenset(kinds)


@pattern(*sorted({*_KEEPS, *_ABSORBS, *_IDEMPOTENT}), table=IDENTITIES)
def integer_identity(op: Op, defs: Mapping[Value, Op]) -> Value | Op | None:
    """``x + 0``, ``x * 1``, ``x * 0``, ``x & x`` ... on integers and bools (module doc)."""
    x, y = op.operands
    if not _exact(x.type.dtype):
        return None
    if x is y and op.name in _IDEMPOTENT:
        return x
    sides = ((x, y), (y, x)) if op.name in _COMMUTATIVE else ((x, y),)
    for other, constant in sides:
        kinds = _kinds(constant, defs)
        if _KEEPS.get(op.name) in kinds:
            return other
        if _ABSORBS.get(op.name) in kinds:
            return constant
    return None


@pattern("not", "neg", table=IDENTITIES)
def involution(op: Op, defs: Mapping[Value, Op]) -> Value | Op | None:
    """``not not x`` and ``-(-x)`` are ``x`` on integers (and bools: ``not``)."""
    inner = defs.get(op.operands[0])
    if inner is None or inner.name != op.name or not _exact(op.operands[0].type.dtype):
        return None
    return inner.operands[0]


def holds(mid: str, src: str) -> bool:
    """Whether dtype ``mid`` holds every value of dtype ``src``, so converting ``src`` to
    ``mid`` and back gives the value it started from."""
    if src == "bool":
        return True  # 0 or 1, and back by ``!= 0``
    if dtypes.is_int(src):
        if dtypes.is_int(mid):
            return dtypes.itemsize(mid) >= dtypes.itemsize(src)  # wrapping twice undoes itself
        return mid in _PRECISION and _PRECISION[mid] >= 8 * dtypes.itemsize(src)
    return mid == "float32" and src in ("float16", "bfloat16")


@pattern("convert", table=IDENTITIES)
def convert_round_trip(op: Op, defs: Mapping[Value, Op]) -> Value | Op | None:
    """``convert(convert(x, mid), dtype(x))`` is ``x`` when ``mid`` holds every value of x's
    dtype (module doc)."""
    inner = defs.get(op.operands[0])
    if inner is None or inner.name != "convert":
        return None
    (x,) = inner.operands
    if x.type != op.results[0].type or not holds(inner.results[0].type.dtype, x.type.dtype):
        return None
    return x
