"""Array ops: elementwise ops, shape ops, reductions and ``dot``.

Elementwise ops, ``transpose``, ``broadcast_in_dim`` and the reductions keep the batch axes
where they lie: they work on the original dimensions only, so the value is never moved for
them. ``reshape`` takes the leading layout (a reshape may merge any dimensions), and ``dot``
lays its operands out as XLA's ``dot_general`` wants them.
"""

from __future__ import annotations

import math

from minipallas.ir.builder import Builder
from minipallas.ir.core import Op, Value
from minipallas.ir.indexing import Int, Slice, along
from minipallas.ir.opset.arrays import (
    ARITHMETIC,
    BITWISE,
    COMPARISONS,
    FLOAT_BINARY,
    SHIFTS,
    UNARY,
)
from minipallas.ir.types import ArrayType
from minipallas.passes.batching.engine import (
    Batched,
    Batcher,
    Layout,
    NotBatchable,
    axes,
    emit,
    keeps_bits,
    leading,
    leading_op,
    original,
    rule,
    slots_of,
    splat,
)
from minipallas.passes.batching.exactness import (
    MAX_CHUNKS,
    WINDOW,
    approximate_crosses,
    chunk_points,
    own_dot,
    spelled_tree,
)


@rule(
    *ARITHMETIC,
    *FLOAT_BINARY,
    *BITWISE,
    *SHIFTS,
    *COMPARISONS,
    *UNARY,
    "select",
    "convert",
)
def _elementwise(bt: Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    """In the layout of the operand with the most batch axes when it has all the others'
    (else all leading); the other operands are moved to it. (``bitcast`` of one width too:
    ``lanes``.)"""
    richest = max((lay for _, lay in ins), key=lambda lay: len(axes(lay)))
    if not all(axes(lay) <= axes(richest) for _, lay in ins):
        richest = leading(bt.sizes, len(richest) - len(axes(richest)))
    operands = [bt.conform(builder, b, richest) for b in ins]
    batched = bt.type(op.result.type, richest)
    if not (bt.exact and bt.offloads and approximate_crosses(op, batched)):
        return [(builder.create(op.name, operands, op.attrs, (), op.loc).result, richest)]
    points = chunk_points(op, [bt.sizes[d] for d in richest if d is not None])
    if points is None:
        raise NotBatchable(
            "batched, this op could move into a YNNPACK graph, which rounds it differently, "
            f"even in {MAX_CHUNKS} chunks",
            op=op.name,
            loc=op.loc,
            fix="exact=False (pallas_call's match_upstream=False) batches it, exact to rounding",
        )
    bt.breaks += 1
    return [(_in_chunks(builder, op, operands, richest, points, batched), richest)]


def _in_chunks(
    builder: Builder, op: Op, operands: list, layout: Layout, points: int, batched: ArrayType
) -> Value:
    """``op`` on ``operands`` (all in ``layout``) ``points`` points at a time along the first
    batch axis, each chunk written into a result of type ``batched``: every chunk stays under
    YNNPACK's threshold, as one point's op does, so XLA rounds it as it rounds a point's."""
    axis = next(k for k, d in enumerate(layout) if d is not None)
    result = splat(builder, 0, batched)
    for start in range(0, batched.shape[axis], points):
        size = min(points, batched.shape[axis] - start)
        window = along(batched.shape, axis, Slice(start, size))
        chunk = [emit(builder, "slice", [v], indexer=window) for v in operands]
        part = builder.create(op.name, chunk, op.attrs, (), op.loc).result
        result = emit(builder, "dynamic_update_slice", [result, part], indexer=window)
    return result


@rule("transpose")
def _transpose(bt: Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    """The original dimensions permuted among their own positions; batch axes stay put."""
    (x, layout), perm = ins[0], op.attrs["permutation"]
    slots = slots_of(layout)
    full = list(range(len(layout)))
    for slot, p in zip(slots, perm, strict=True):
        full[slot] = slots[p]
    new = builder.create("transpose", [x], {"permutation": tuple(full)}, (), op.loc)
    return [(new.result, layout)]


@rule("broadcast_in_dim")
def _broadcast_in_dim(bt: Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    """Each batch axis stays next to the original dimension it lies next to: just before the
    dimension its next original dimension goes to, or after the last one's (a scalar's go
    first), so the broadcast is one ``broadcast_in_dim`` of the value as it lies, and the
    result lies as blocks in place do (a batched scalar broadcast to a block gets the block's
    leading batch axes, not trailing ones that would transpose every op it meets)."""
    (x, layout), shape, dims = ins[0], op.attrs["shape"], op.attrs["dims"]
    before: dict[int, list[int]] = {}  # result dim -> the batch axes placed just before it
    pending: list[int] = []
    body = iter(dims)
    last = -1  # the result dim of the last original dimension seen
    for d in layout:
        if d is None:
            last = next(body)
            before.setdefault(last, []).extend(pending)
            pending = []
        else:
            pending.append(d)
    out: list[int | None] = list(pending) if last < 0 else []
    for r in range(len(shape)):
        out += [*before.get(r, []), None]
        if r == last:
            out += pending
    result = tuple(out)
    position = {d: k for k, d in enumerate(result) if d is not None}
    slots = slots_of(result)
    body = iter(dims)
    where = tuple(slots[next(body)] if d is None else position[d] for d in layout)
    new_shape = bt.type(op.result.type, result).shape
    new = builder.create("broadcast_in_dim", [x], {"shape": new_shape, "dims": where}, (), op.loc)
    return [(new.result, result)]


@rule("reshape")
def _reshape(bt: Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    shape = (*bt.sizes, *op.attrs["shape"])
    return leading_op(bt, builder, op, bt.all_leading(builder, ins), shape=shape)


@rule("reduce_sum", "reduce_max", "reduce_min", "reduce_prod")
def _reduce(bt: Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    """Over the original dimensions where they lie; the batch axes stay put. In exact mode a
    small float sum that XLA would add up in another order batched is written out in its
    per-point order instead (``_spelled_sum``)."""
    if bt.exact and spelled_tree(op, [original(v.type, lay) for v, lay in ins]):
        return [(_spelled_sum(bt, builder, ins[0]), bt.leading(op.result.type.ndim))]
    keeps_bits(bt, op, ins)
    (x, layout), reduced = ins[0], set(op.attrs["axes"])
    slots = slots_of(layout)
    positions = tuple(slots[a] for a in sorted(reduced))
    out = tuple(d for k, d in enumerate(layout) if k not in positions)
    new = builder.create(op.name, [x], {**op.attrs, "axes": positions}, (), op.loc)
    return [(new.result, out)]


def _spelled_sum(bt: Batcher, builder: Builder, value: Batched) -> Value:
    """The sum over the minor axis as XLA adds it up at one point: in windows of ``WINDOW``,
    each added left to right from 0, then the windows' sums the same way. Slices and adds
    leave XLA nothing to reorder, so every point keeps its bits whatever the batch size."""
    x = bt.to_leading(builder, value)
    *outer, n = x.type.shape
    windows = emit(builder, "reshape", [x], shape=(*outer, n // WINDOW, WINDOW))
    return _left_to_right(builder, _left_to_right(builder, windows))


def _left_to_right(builder: Builder, x: Value) -> Value:
    """The sum over ``x``'s minor axis, added left to right from 0."""
    minor, n = x.type.ndim - 1, x.type.shape[-1]

    def term(k: int) -> Value:
        return emit(builder, "slice", [x], indexer=along(x.type.shape, minor, Int(k)))

    first = term(0)
    zero = splat(builder, 0, first.type)
    # 0 + first, which XLA would fold to ``first``: they differ at -0, which 0 + -0 makes +0
    total = emit(builder, "select", [emit(builder, "eq", [first, zero]), zero, first])
    for k in range(1, n):
        total = emit(builder, "add", [total, term(k)])
    return total


@rule("dot")
def _dot(bt: Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    """As XLA's ``dot_general`` sees it: batch axes of both sides are batch dimensions, those
    of the left side alone stack its rows, those of the right side alone its columns. A
    batched left side against a fixed right side is then one 2-D dot, as ``jax.jit`` runs
    it; a blocked matmul's (i, j) points one dot of all row blocks by all column blocks."""
    keeps_bits(bt, op, ins)
    (a, a_layout), (b, b_layout) = ins
    both = sorted(axes(a_layout) & axes(b_layout))
    rows = sorted(axes(a_layout) - axes(b_layout))
    cols = sorted(axes(b_layout) - axes(a_layout))
    m, k = original(a.type, a_layout).shape
    n = original(b.type, b_layout).shape[1]
    a = bt.conform(builder, ins[0], (*both, *rows, None, None))
    b = bt.conform(builder, ins[1], (*both, None, *cols, None))
    outer = [bt.sizes[d] for d in both]
    n_rows, n_cols = math.prod(bt.sizes[d] for d in rows), math.prod(bt.sizes[d] for d in cols)
    a = emit(builder, "reshape", [a], shape=(*outer, n_rows * m, k))
    b = emit(builder, "reshape", [b], shape=(*outer, k, n_cols * n))
    if own_dot(a.type, b.type):
        # the left side transposed behind a barrier: XLA folds the transpose back into the dot,
        # whose left side is then column-major, a form YNNPACK does not take
        swap = (*range(len(outer)), len(outer) + 1, len(outer))
        a = emit(builder, "transpose", [a], permutation=swap)
        a = emit(builder, "optimization_barrier", [a])
        a = emit(builder, "transpose", [a], permutation=swap)
    (product,) = builder.create("dot", [a, b], op.attrs, (), op.loc).results
    shape = (*outer, *(bt.sizes[d] for d in rows), m, *(bt.sizes[d] for d in cols), n)
    layout = (*both, *rows, None, *cols, None)
    return [(emit(builder, "reshape", [product], shape=shape), layout)]
