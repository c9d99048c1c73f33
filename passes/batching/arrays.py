"""Array ops: elementwise ops, shape ops, reductions and ``dot``.

Elementwise ops, ``transpose``, ``broadcast_in_dim`` and the reductions keep the batch axes
where they lie: they work on the original dimensions only, so the value is never moved for
them. ``reshape`` takes the leading layout (a reshape may merge any dimensions), and ``dot``
lays its operands out as XLA's ``dot_general`` wants them.
"""

from __future__ import annotations

import math

from minipallas.ir.builder import Builder
from minipallas.ir.core import Op
from minipallas.ir.opset.arrays import (
    ARITHMETIC,
    BITWISE,
    COMPARISONS,
    FLOAT_BINARY,
    SHIFTS,
    UNARY,
)
from minipallas.passes.batching.engine import (
    Batched,
    Batcher,
    axes,
    emit,
    keeps_bits,
    leading,
    leading_op,
    original,
    rule,
    slots_of,
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
    "reciprocal",
    "multiple_of",
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
    own = bt.policy.elementwise(bt, builder, op, operands, richest, batched) if bt.exact else None
    if own is None:
        own = builder.create(op.name, operands, op.attrs, (), op.loc).result
    return [(own, richest)]


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
    """Over the original dimensions where they lie; the batch axes stay put. In exact mode the
    policy may have its own form (XLA:CPU's: a small float sum written out in its per-point
    order)."""
    own = bt.policy.reduce(bt, builder, op, ins) if bt.exact else None
    if own is not None:
        return [own]
    keeps_bits(bt, op, ins)
    (x, layout), reduced = ins[0], set(op.attrs["axes"])
    slots = slots_of(layout)
    positions = tuple(slots[a] for a in sorted(reduced))
    out = tuple(d for k, d in enumerate(layout) if k not in positions)
    new = builder.create(op.name, [x], {**op.attrs, "axes": positions}, (), op.loc)
    return [(new.result, out)]


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
    a = bt.policy.dot_left(builder, a, b)
    (product,) = builder.create("dot", [a, b], op.attrs, (), op.loc).results
    shape = (*outer, *(bt.sizes[d] for d in rows), m, *(bt.sizes[d] for d in cols), n)
    layout = (*both, *rows, None, *cols, None)
    return [(emit(builder, "reshape", [product], shape=shape), layout)]
