"""Structural ops: ``reverse``, ``pad``, the cumulative ops, ``argmax`` / ``argmin``, ``sort``
and ``top_k``.

The first four work along original dimensions where they lie, so the batch axes stay put and
only the dimension numbers in their attributes move. ``sort`` and ``top_k`` take the leading
layout (``top_k`` works along the last dimension, which the leading layout keeps last).
"""

from __future__ import annotations

from minipallas.ir.builder import Builder
from minipallas.ir.core import Op
from minipallas.passes.batching.engine import (
    Batched,
    Batcher,
    leading_op,
    rule,
    slots_of,
    unbatched,
)


@rule("reverse")
def _reverse(bt: Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    (x, layout), slots = ins[0], slots_of(ins[0][1])
    dims = tuple(slots[d] for d in op.attrs["dims"])
    return [(builder.create("reverse", [x], {"dims": dims}, (), op.loc).result, layout)]


@rule("cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp")
def _cumulative(bt: Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    """Exact for floats too: XLA scans each line along the axis alike whatever the other
    dimensions (the rows-of-16 tree is built along the axis alone; checked bit for bit in
    tests/passes/test_batching_structural.py)."""
    (x, layout), slots = ins[0], slots_of(ins[0][1])
    attrs = {**op.attrs, "axis": slots[op.attrs["axis"]]}
    return [(builder.create(op.name, [x], attrs, (), op.loc).result, layout)]


@rule("argmax", "argmin")
def _argmax(bt: Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    """Comparisons only, so exact; the reduced dimension leaves the layout."""
    (x, layout), slots = ins[0], slots_of(ins[0][1])
    position = slots[op.attrs["axis"]]
    new = builder.create(op.name, [x], {**op.attrs, "axis": position}, (), op.loc)
    return [(new.result, layout[:position] + layout[position + 1 :])]


@rule("pad")
def _pad(bt: Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    """Batch axes get no padding; the padding value must be the same at every point (a
    ``pad`` takes one scalar)."""
    (x, layout), value = ins
    value = unbatched(op, "padding value", value)
    attrs = {}
    for what in ("low", "high", "interior"):
        amounts = iter(op.attrs[what])
        attrs[what] = tuple(next(amounts) if d is None else 0 for d in layout)
    return [(builder.create("pad", [x, value], attrs, (), op.loc).result, layout)]


@rule("sort")
def _sort(bt: Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    """Along its dimension, shifted past the leading batch axes."""
    dimension = op.attrs["dimension"] + len(bt.sizes)
    return leading_op(bt, builder, op, bt.all_leading(builder, ins), dimension=dimension)


@rule("top_k")
def _top_k(bt: Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    """Along the last dimension, which the leading layout keeps last."""
    return leading_op(bt, builder, op, bt.all_leading(builder, ins))
