"""Windows: ``slice`` / ``dynamic_slice`` / ``gather`` read one, ``dynamic_update_slice`` /
``scatter`` / ``scatter_add`` write one.

Every dynamic index must be the same at every point (one that differs needs a gather, which
has no rule here). A read without integer-array indices takes the batch axes whole where they
lie; every other window takes them whole in front, on leading-layout operands.
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir import indexing
from minipallas.ir.builder import Builder
from minipallas.ir.core import Op, Value
from minipallas.ir.indexing import Slice
from minipallas.passes.batching.engine import (
    Batched,
    Batcher,
    NotBatchable,
    axes,
    leading_op,
    rule,
)


def _same_everywhere(op: Op, dyn: Sequence[Batched]) -> None:
    if any(axes(lay) for _, lay in dyn):
        raise NotBatchable(
            "a dynamic index differs between batch points (that needs a gather)",
            op=op.name,
            loc=op.loc,
        )


@rule("slice", "dynamic_slice", "gather")
def _read(bt: Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    """Without integer arrays, the batch axes are sliced whole where they lie, and the window
    keeps them in place; with them, numpy's placement of the array dimensions could move a
    batch axis, so the batch axes are taken in front."""
    _same_everywhere(op, ins[1:])
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
    _same_everywhere(op, ins[1:-1])
    dyn = [v for v, _ in ins[1:-1]]
    x, update = bt.all_leading(builder, [ins[0], ins[-1]])
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
