"""StableHLO rules for upstream's TPU vector primitives, as upstream's interpret mode lowers
them: ``roll`` is ``jnp.roll``'s dynamic form (the shift modulo the size, the array
concatenated with itself, a dynamic slice), one slice of ``stride_axis`` at a time when
strided; ``packed_bitcast`` is ``stablehlo.bitcast_convert`` with the last two dims swapped
around it (``state.utils.bitcast``)."""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir import dtypes
from minipallas.ir.core import Op
from minipallas.ir.types import ArrayType
from minipallas.lowering.compat.jaxlib_shim import ir, stablehlo
from minipallas.lowering.stablehlo import emit
from minipallas.lowering.stablehlo.context import LoweringContext, rule


@rule("roll")
def roll(ctx: LoweringContext, op: Op, x: ir.Value, shift: ir.Value) -> Sequence[ir.Value]:
    axis, shape = op.attrs["axis"], op.operands[0].type.shape
    if not op.attrs["stride"]:
        return [_roll(x, shift, axis, shape)]
    stride, stride_axis = op.attrs["stride"]
    pieces = []
    for i in range(shape[stride_axis]):
        starts = [i if d == stride_axis else 0 for d in range(len(shape))]
        limits = [i + 1 if d == stride_axis else n for d, n in enumerate(shape)]
        piece = stablehlo.SliceOp(x, starts, limits, [1] * len(shape)).result
        amount = stablehlo.AddOp(shift, emit.constant(i * stride, "int32")).result
        piece_shape = tuple(1 if d == stride_axis else n for d, n in enumerate(shape))
        pieces.append(_roll(piece, amount, axis, piece_shape))
    return [stablehlo.ConcatenateOp(pieces, stride_axis).result if pieces else x]


def _roll(x: ir.Value, shift: ir.Value, axis: int, shape: Sequence[int]) -> ir.Value:
    """``x`` rolled by ``shift mod n`` along ``axis``: ``concat(x, x)[n - shift mod n :][:n]``."""
    n = emit.constant(max(shape[axis], 1), "int32")
    rem = stablehlo.RemOp(shift, n).result
    negative = emit.compare(rem, emit.constant(0, "int32"), "LT")
    rem = emit.select(negative, stablehlo.AddOp(rem, n).result, rem)
    start = stablehlo.SubtractOp(n, rem).result
    twice = stablehlo.ConcatenateOp([x, x], axis).result
    zero = emit.constant(0, "int32")
    starts = [start if d == axis else zero for d in range(len(shape))]
    return stablehlo.DynamicSliceOp(twice, starts, list(shape)).result


@rule("packed_bitcast")
def packed_bitcast(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    return [repack(x, op.operands[0].type, op.results[0].type)]


def repack(x: ir.Value, source: ArrayType, target: ArrayType) -> ir.Value:
    """``x``'s bits as ``target``, packed along the second-minor dim (``packed_bitcast``)."""
    old, new = dtypes.itemsize(source.dtype), dtypes.itemsize(target.dtype)
    if old == new:
        return stablehlo.BitcastConvertOp(emit.tensor_type(target), x).result
    *lead, m, n = source.shape
    swap = [*range(len(lead)), len(lead), len(lead) + 2, len(lead) + 1]
    if old > new:
        r = old // new
        pieces = ArrayType((*lead, m, n, r), target.dtype)
        y = stablehlo.BitcastConvertOp(emit.tensor_type(pieces), x).result
        return emit.reshape(emit.transpose(y, swap), target.shape)
    r = new // old
    rows = emit.transpose(emit.reshape(x, (*lead, m // r, r, n)), swap)
    return stablehlo.BitcastConvertOp(emit.tensor_type(target), rows).result
