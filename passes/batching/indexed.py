"""Windows: ``slice`` / ``dynamic_slice`` / ``gather`` read one, ``dynamic_update_slice`` /
``scatter`` / ``scatter_add`` write one.

A read without integer-array indices takes the batch axes whole where they lie; every other
window takes them whole in front, on leading-layout operands. That needs every dynamic index to
be the same at every point. One that differs (each program of a collective group writing its
own row of a shared buffer) needs ``jax.vmap``'s answer, taken when the batcher has
``gathers``: every dimension of the window becomes an integer array of positions, the batch
point's own along the batch axes and its clamped start plus the window's offsets along the
others, so the read is one ``gather`` and the write one ``scatter`` with no duplicate
positions. The starts are clamped first, as ``dynamic_slice`` clamps them, so the arrays never
leave the array and the bits are the unbatched ones.
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir import indexing
from minipallas.ir.builder import Builder
from minipallas.ir.core import Op, Value
from minipallas.ir.indexing import Array, Dyn, Int, Slice
from minipallas.ir.types import ArrayType
from minipallas.passes.batching.engine import (
    Batched,
    Batcher,
    NotBatchable,
    axes,
    emit,
    leading_op,
    rule,
    splat,
)


def _differs(bt: Batcher, op: Op, dyn: Sequence[Batched]) -> bool:
    """Whether a dynamic index differs between points; refused unless it can be gathered."""
    if not any(axes(lay) for _, lay in dyn):
        return False
    if bt.gathers and not indexing.has_arrays(op.attrs["indexer"]):
        return True
    raise NotBatchable(
        "a dynamic index differs between batch points (that needs a gather: "
        "batch(..., gathers=True))",
        op=op.name,
        loc=op.loc,
    )


@rule("slice", "dynamic_slice", "gather")
def _read(bt: Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    """Without integer arrays, the batch axes are sliced whole where they lie, and the window
    keeps them in place; with them, numpy's placement of the array dimensions could move a
    batch axis, so the batch axes are taken in front."""
    if _differs(bt, op, ins[1:]):
        x = bt.to_leading(builder, ins[0]) if axes(ins[0][1]) else ins[0][0]
        positions, indexer = window_positions(bt, builder, op, ins[1:], bool(axes(ins[0][1])))
        new = builder.create("gather", [x, *positions], {"indexer": indexer}, (), op.loc)
        return [(new.result, bt.leading(op.result.type.ndim))]
    (x, layout), dyn = ins[0], [v for v, _ in ins[1:]]
    indexer = op.attrs["indexer"]
    if not indexing.has_arrays(indexer):
        entries = iter(indexer)
        spread = tuple(next(entries) if d is None else Slice(0, bt.sizes[d], 1) for d in layout)
        kept = iter(not isinstance(e, indexing.Int) for e in indexer)
        out = tuple(d for d in layout if d is not None or next(kept))
        new = builder.create(op.name, [x, *dyn], {"indexer": spread}, (), op.loc)
        return [(new.result, out)]
    x = bt.to_leading(builder, ins[0])
    return leading_op(bt, builder, op, [x, *dyn], indexer=_in_front(bt, op, indexer, dyn))


@rule("dynamic_update_slice", "scatter", "scatter_add")
def _write(bt: Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    x, update = bt.all_leading(builder, [ins[0], ins[-1]])
    if _differs(bt, op, ins[1:-1]):
        positions, indexer = window_positions(bt, builder, op, ins[1:-1], batched=True)
        new = builder.create("scatter", [x, *positions, update], {"indexer": indexer}, (), op.loc)
        return [(new.result, bt.leading(op.result.type.ndim))]
    dyn = [v for v, _ in ins[1:-1]]
    indexer = _in_front(bt, op, op.attrs["indexer"], dyn)
    return leading_op(bt, builder, op, [x, *dyn, update], indexer=indexer)


def _in_front(bt: Batcher, op: Op, indexer: tuple, dyn: Sequence[Value]) -> tuple:
    """``indexer`` with the batch axes taken whole in front, if its window keeps them there."""
    spread = (*(Slice(0, n, 1) for n in bt.sizes), *indexer)
    window = indexing.result_shape(indexer, [v.type for v in dyn])
    if indexing.result_shape(spread, [v.type for v in dyn]) != (*bt.sizes, *window):
        raise NotBatchable(
            "an integer-array index would move the batch axes", op=op.name, loc=op.loc
        )
    return spread


# ----- a dynamic index that differs between points: positions as integer arrays -----


def window_positions(
    bt: Batcher, builder: Builder, op: Op, dyn: Sequence[Batched], batched: bool
) -> tuple[list[Value], tuple]:
    """The gather or scatter form of ``op``'s window at every batch point: its int32 index
    operands and the indexer that holds them. An array per dimension of the operand (its batch
    axes first if ``batched``), each of shape ``(*sizes, *window)`` but for the trailing
    dimensions kept whole (below): the batch point's index along a batch axis, the clamped
    start plus the offset along a window dimension, the clamped position at an ``Int``.

    Trailing slices after the first dimension whose start is the same at every point stay
    slices, their clamped starts extra index operands: a window of whole rows is copied as
    rows, not element by element."""
    indexer, shape = op.attrs["indexer"], op.operands[0].type.shape

    def kept_whole(e: object) -> bool:
        return isinstance(e, Slice) and (
            not isinstance(e.start, Dyn) or not axes(dyn[e.start.pos][1])
        )

    split = max([1, *(k + 1 for k, e in enumerate(indexer) if not kept_whole(e))])
    n_batch = len(bt.sizes)
    window = tuple(e.size for e in indexer[:split] if isinstance(e, Slice))
    full = ArrayType((*bt.sizes, *window), "int32")
    positions = [emit(builder, "iota", [], type=full, dimension=k) for k in range(n_batch)]
    positions = positions if batched else []
    offset_dim = n_batch
    kept = []
    for entry, dim in zip(indexer[:split], shape, strict=False):
        span = 1 if isinstance(entry, Int) else (entry.size - 1) * entry.stride + 1
        start = entry.index if isinstance(entry, Int) else entry.start
        first = _clamped_start(bt, builder, start, dyn, dim - span, bt.sizes)
        batch_dims = tuple(range(n_batch))
        at = emit(builder, "broadcast_in_dim", [first], shape=full.shape, dims=batch_dims)
        if isinstance(entry, Slice):
            offsets = emit(builder, "iota", [], type=full, dimension=offset_dim)
            if entry.stride != 1:
                offsets = emit(builder, "mul", [offsets, splat(builder, entry.stride, full)])
            at = emit(builder, "add", [at, offsets])
            offset_dim += 1
        positions.append(at)
    arrays = tuple(Array(Dyn(k)) for k in range(len(positions)))
    for entry, dim in zip(indexer[split:], shape[split:], strict=True):
        last = dim - (entry.size - 1) * entry.stride - 1
        start = entry.start
        if isinstance(start, Dyn):
            positions.append(_clamped_start(bt, builder, start, dyn, last, ()))
            start = Dyn(len(positions) - 1)
        else:
            start = min(max(start, 0), last)
        kept.append(Slice(start, entry.size, entry.stride))
    return positions, (*arrays, *kept)


def _clamped_start(
    bt: Batcher,
    builder: Builder,
    start: int | Dyn,
    dyn: Sequence[Batched],
    last: int,
    shape: tuple[int, ...],
) -> Value:
    """The start clamped into ``[0, last]`` as ``dynamic_slice`` clamps it, as int32 of
    ``shape``: ``sizes`` (every batch point's), or ``()`` for one the same at every point."""
    points = ArrayType(shape, "int32")
    if not isinstance(start, Dyn):
        return splat(builder, min(max(start, 0), last), points)
    index = bt.to_leading(builder, dyn[start.pos]) if shape else dyn[start.pos][0]
    own = ArrayType(shape, index.type.dtype)  # clamped in its own dtype, then converted
    low = emit(builder, "max", [index, splat(builder, 0, own)])
    clamped = emit(builder, "min", [low, splat(builder, last, own)])
    return clamped if own == points else emit(builder, "convert", [clamped], dtype="int32")
