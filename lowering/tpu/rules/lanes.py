"""Mosaic rules for upstream's TPU vector primitives, as upstream emits them: ``packed_bitcast``
is ``tpu.bitcast`` (its packing is the TPU's own); ``roll`` is ``tpu.dynamic_rotate``, on 32
bits for a 16- or 8-bit vector rolled across sublanes or strided (which Mosaic refuses:
"unsupported packed type rotation"; upstream fails there).
minipallas's roll takes the shift modulo the size (upstream's interpret mode); unless the shift
is known to lie in ``[0, n)`` (``ranges``), the rule reduces it first (``arith.remsi`` and a
select on a negative remainder), so every shift means the same on the chip."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from minipallas.ir import dtypes
from minipallas.ir.core import Op
from minipallas.ir.types import ArrayType
from minipallas.lowering.compat.jaxlib_shim import arith, ir, tpu
from minipallas.lowering.tpu import emit
from minipallas.lowering.tpu.context import LoweringContext, rule, unsupported


@rule("roll")
def roll(ctx: LoweringContext, op: Op, x: ir.Value, shift: ir.Value) -> Sequence[ir.Value]:
    axis, x_type = op.attrs["axis"], op.operands[0].type
    if op.attrs["stride"] and op.attrs["stride"][1] == x_type.ndim - 1:
        raise unsupported(
            op,
            "a strided roll whose stride_axis is the minor-most dim (Mosaic: 'Not implemented: "
            "stride dimension is the minor most')",
            fix="stride along another dim, or transpose so the strided dim is not the last",
        )
    n = x_type.shape[axis]
    known = ctx.range_of(op.operands[1])
    if known is None or known[0] < 0 or known[1] >= n:
        shift = _floor_mod(shift, n)
    stride = dict(zip(("stride", "stride_dimension"), op.attrs["stride"], strict=False))
    if dtypes.itemsize(x_type.dtype) == 4 or (axis == x_type.ndim - 1 and not stride):
        return [tpu.dynamic_rotate(x, shift, axis, **stride)]
    return [_on_32_bits(x, x_type, lambda wide: tpu.dynamic_rotate(wide, shift, axis, **stride))]


def _on_32_bits(x: ir.Value, t: ArrayType, rotate: Callable[[ir.Value], ir.Value]) -> ir.Value:
    """``rotate`` of a 16- or 8-bit vector on 32 bits (Mosaic: "unsupported packed type
    rotation" across sublanes or strided): its bits as an integer of its width, zero-extended,
    rotated, truncated back and bitcast to its dtype. Moving elements keeps their bits."""
    bits = emit.value_type(ArrayType(t.shape, f"uint{8 * dtypes.itemsize(t.dtype)}"))
    wide = emit.value_type(ArrayType(t.shape, "uint32"))
    same = bits == x.type  # an integer vector: its bits already
    y = arith.extui(wide, x if same else tpu.bitcast(bits, x))
    y = arith.trunci(bits, rotate(y))
    return y if same else tpu.bitcast(x.type, y)


def _floor_mod(shift: ir.Value, n: int) -> ir.Value:
    size = emit.i32(max(n, 1))
    rem = arith.remsi(shift, size)
    negative = arith.cmpi(arith.CmpIPredicate.slt, rem, emit.i32(0))
    return arith.select(negative, arith.addi(rem, size), rem)


@rule("packed_bitcast")
def packed_bitcast(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    return [tpu.bitcast(emit.value_type(op.results[0].type), x)]
