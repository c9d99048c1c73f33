"""Ops whose shape rule reads particular dims: ``bitcast`` across widths (a last dim comes or
goes), ``packed_bitcast`` (the second-minor dim scales) and ``roll`` (along ``axis``, strided
along ``stride_axis``). Each takes the leading layout, so the dims it reads keep their places
from the end; ``roll``'s dims move past the batch axes, and its shift must be one value."""

from __future__ import annotations

from minipallas.ir.builder import Builder
from minipallas.ir.core import Op
from minipallas.passes.batching.arrays import _elementwise
from minipallas.passes.batching.engine import Batched, Batcher, leading_op, rank, rule, unbatched


@rule("bitcast", "packed_bitcast")
def _bitcast(bt: Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    if op.name == "bitcast" and rank(op.result) == rank(op.operands[0]):
        return _elementwise(bt, builder, op, ins)
    x = bt.conform(builder, ins[0], bt.leading(rank(op.operands[0])))
    return leading_op(bt, builder, op, [x])


@rule("roll")
def _roll(bt: Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    n = len(bt.sizes)
    x = bt.conform(builder, ins[0], bt.leading(rank(op.operands[0])))
    shift = unbatched(op, "shift", ins[1])
    stride = op.attrs["stride"]
    moved = (stride[0], stride[1] + n) if stride else ()
    return leading_op(bt, builder, op, [x, shift], axis=op.attrs["axis"] + n, stride=moved)
