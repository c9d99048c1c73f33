"""Triton rules for windows of register arrays: what discharged scratch reads and writes become.

Scratch lives in registers on the GPU path, and Triton has no op that slices a tensor, so:

- ``slice`` / ``dynamic_slice`` pick positions ``start + stride * j`` along each narrowed
  dimension with ``tt.gather`` (one per such dimension); an integer index gathers one position
  and drops the dimension with ``tt.reshape``. Dynamic starts are clamped as the IR defines.
- ``dynamic_update_slice`` spreads the update over the whole array the same way (a gather
  from the update, at each position's offset into the window) and keeps it where a position is
  inside the window: ``arith.select``.

Whole-array windows cost nothing (cleanup usually removes them before they get here). Integer
-array indexing of register arrays (``gather``, ``scatter``, ``scatter_add``) is rejected.
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir import indexing
from minipallas.ir.core import Op
from minipallas.ir.errors import PassError
from minipallas.ir.indexing import Dyn, Int
from minipallas.lowering.gpu import emit
from minipallas.lowering.gpu.context import LoweringContext, rule
from minipallas.lowering.gpu.emit import Index, arith, ir, tt


def _starts(op: Op, shape: Sequence[int], dyn: Sequence[ir.Value]) -> list[tuple[Index, int, int]]:
    """Per dimension ``(start, size, stride)`` (size 0 for an integer index), clamped."""
    found = []
    for entry, n in zip(op.attrs["indexer"], shape, strict=True):
        if isinstance(entry, Int):
            start, size, stride, span = entry.index, 0, 1, 1
        else:
            span = indexing.span(entry)
            start, size, stride = entry.start, entry.size, entry.stride
        if isinstance(start, Dyn):
            dtype = op.operands[1 + start.pos].type.dtype
            start = emit.clamp(emit.to_i32(dyn[start.pos], dtype), 0, n - span)
        found.append((start, size, stride))
    return found


def _positions(shape: Sequence[int], axis: int) -> ir.Value:
    """``j`` along ``axis`` of a tensor of ``shape``, as ``i32``."""
    steps = tt.make_range(emit.shaped(emit.element_type("int32"), [shape[axis]]), 0, shape[axis])
    return emit.broadcast_to(emit.expand(steps, len(shape), [axis]), shape)


def _gather(x: ir.Value, axis: int, index: ir.Value) -> ir.Value:
    shape = emit.shape_of(index)
    return tt.gather(x, index, axis, results=[emit.shaped(emit.element_of(x), shape)])


@rule("slice", "dynamic_slice")
def slice_(ctx: LoweringContext, op: Op, x: ir.Value, *dyn: ir.Value) -> Sequence[ir.Value]:
    shape = list(op.operands[0].type.shape)
    for axis, (start, size, stride) in enumerate(_starts(op, shape, dyn)):
        if size == shape[axis] and start == 0 and stride == 1:
            continue
        shape[axis] = max(size, 1)
        index = emit.add(emit.mul(_positions(shape, axis), stride), start)
        x = _gather(x, axis, emit.i32(index, shape))
    return [emit.reshape(x, op.result.type.shape)]


@rule("dynamic_update_slice")
def update(ctx: LoweringContext, op: Op, x: ir.Value, *rest: ir.Value) -> Sequence[ir.Value]:
    *dyn, window = rest
    shape = list(op.operands[0].type.shape)
    starts = _starts(op, shape, dyn)
    kept = [max(size, 1) for _, size, _ in starts]
    spread = emit.reshape(window, kept)
    inside = None
    for axis, (start, size, stride) in enumerate(starts):
        if size == shape[axis] and start == 0 and stride == 1:
            continue
        small = [1] * len(shape)
        small[axis] = shape[axis]
        offset = emit.sub(_positions(small, axis), start)  # position - start, along `axis`
        j = arith.divsi(offset, emit.i32(stride, small)) if stride > 1 else offset
        kept[axis] = shape[axis]
        spread = _gather(spread, axis, emit.i32(emit.clamp(j, 0, max(size, 1) - 1), kept))
        hit = arith.andi(
            arith.cmpi(arith.CmpIPredicate.sge, offset, emit.i32(0, small)),
            emit.less(offset, (max(size, 1) - 1) * stride + 1),
        )
        if stride > 1:
            rem = arith.remsi(offset, emit.i32(stride, small))
            hit = arith.andi(hit, arith.cmpi(arith.CmpIPredicate.eq, rem, emit.i32(0, small)))
        hit = emit.broadcast_to(hit, shape)
        inside = hit if inside is None else arith.andi(inside, hit)
    if inside is None:
        return [spread]
    return [arith.select(inside, spread, x)]


@rule("gather", "scatter", "scatter_add")
def array_indexed(ctx: LoweringContext, op: Op, *args: ir.Value) -> Sequence[ir.Value]:
    del args
    raise PassError(
        "with integer-array indices on a register array (discharged scratch) has no Triton "
        "lowering",
        op=op.name,
        loc=op.loc,
        fix="index scratch with slices and integers, or use an operand ref for gathers",
    )
