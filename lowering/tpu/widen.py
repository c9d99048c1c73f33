"""8-bit integer vector arithmetic through 32 bits, with the same bits.

Mosaic refuses arithmetic on ``vector<...xi8>`` ("Only vector<i16> and vector<i32> are
supported, but got 'i8'. Please cast your input"); upstream Pallas emits it as is and fails to
compile. ``@widened`` wraps a rule so that an op with an ``int8``/``uint8`` vector operand runs
on 32 bits instead:

1. each 8-bit operand is extended to ``int32``/``uint32``: sign-extended for ``int8``,
   zero-extended for ``uint8``, except that a logical right shift and a population count
   zero-extend and an arithmetic right shift sign-extends whatever the dtype (they read the
   bits, not the number);
2. the rule runs on a copy of the op whose 8-bit types are the 32-bit ones, so it picks its ops
   and constants for them;
3. each 8-bit result is truncated back (``arith.trunci``); a comparison's ``i1`` stays.

The low 8 bits of a wrapping ``+``, ``-``, ``*``, a bitwise op or a left shift do not depend on
the high bits; ``max``, ``min``, comparisons, ``/``, ``%`` and right shifts of the extended
values are those of the 8-bit values. So every result has the bits Mosaic would give on 8 bits.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from minipallas.ir.core import Op, Value
from minipallas.ir.rules import RuleTable
from minipallas.ir.types import ArrayType
from minipallas.lowering.compat.jaxlib_shim import arith, ir
from minipallas.lowering.tpu import emit

WIDE = {"int8": "int32", "uint8": "uint32"}
# op -> the extension its operands take, whatever their dtype (step 1): those that read bits
EXTENSION = RuleTable.of(
    "TPU operand extension",
    {
        "shift_right_logical": arith.extui,
        "shift_right_arithmetic": arith.extsi,
        "population_count": arith.extui,
    },
)


def widened(rule: Callable[..., Sequence[ir.Value]]) -> Callable[..., Sequence[ir.Value]]:
    """``rule``, run on 32 bits when an operand is an 8-bit integer vector (the module doc)."""

    @functools.wraps(rule)
    def on_32_bits(ctx: object, op: Op, *args: ir.Value) -> Sequence[ir.Value]:
        if not any(_narrow(v.type) for v in op.operands):
            return rule(ctx, op, *args)
        wide = op.replace(
            operands=tuple(_wide_value(v) for v in op.operands),
            results=tuple(_wide_value(v) for v in op.results),
        )
        args = [_extend(op.name, x, v.type) for x, v in zip(args, op.operands, strict=True)]
        outs = rule(ctx, wide, *args)
        return [
            arith.trunci(emit.value_type(v.type), x) if _narrow(v.type) else x
            for x, v in zip(outs, op.results, strict=True)
        ]

    return on_32_bits


def _narrow(t: object) -> bool:
    return isinstance(t, ArrayType) and bool(t.shape) and t.dtype in WIDE


def _wide_value(v: Value) -> Value:
    t = v.type
    return Value(ArrayType(t.shape, WIDE[t.dtype])) if _narrow(t) else v


def _extend(name: str, x: ir.Value, t: object) -> ir.Value:
    if not _narrow(t):
        return x
    extend = EXTENSION.get(name, arith.extsi if t.dtype == "int8" else arith.extui)
    return extend(emit.value_type(ArrayType(t.shape, WIDE[t.dtype])), x)
