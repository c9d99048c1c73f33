"""Control flow: ``cond``, ``for``, ``while`` and ``call``, batched region by region.

Region operands with batch axes enter in the leading layout, the others as they are, and each
region is batched for those layouts. A ``cond`` result batched in any branch is batched
(leading) in all; a loop carry the body makes batched enters batched too, found by iterating
to a fixed point (``_settle``); a callee is batched once per batching of its arguments.
A ``cond`` index that differs between points runs every branch and selects; a loop bound or
condition that differs is ``NotBatchable`` (that needs masking).
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir.builder import Builder
from minipallas.ir.core import Block, Function, Op, Value
from minipallas.ir.literal import Literal
from minipallas.passes.batching.engine import (
    Batched,
    Batcher,
    Layout,
    axes,
    emit,
    rank,
    rank_of,
    rule,
    unbatched,
)


def _lead_or_not(bt: Batcher, builder: Builder, ins: Sequence[Batched]) -> list[Batched]:
    """Region operands: batched ones in the leading layout, the rest as they are."""
    return [(bt.to_leading(builder, b), bt.leading(rank_of(b))) if axes(b[1]) else b for b in ins]


@rule("cond")
def _cond(bt: Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    """Each branch batched as its arguments are; a result batched in any branch is batched
    (leading) in all."""
    if axes(ins[0][1]):
        return _select_branches(bt, builder, op, ins)
    index = ins[0][0]
    args = _lead_or_not(bt, builder, ins[1:])
    layouts = [lay for _, lay in args]
    batched = [False] * len(op.results)
    for branch in op.regions:
        _, out = bt.block(branch, layouts)
        batched = [b or bool(axes(lay)) for b, lay in zip(batched, out, strict=True)]
    targets = [bt.leading(rank(r), b) for r, b in zip(op.results, batched, strict=True)]
    regions = tuple(bt.block(branch, layouts, targets)[0] for branch in op.regions)
    new = builder.create("cond", [index, *(v for v, _ in args)], op.attrs, regions, op.loc)
    return list(zip(new.results, targets, strict=True))


def _select_branches(bt: Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    """A branch index that differs between points: every branch runs (discharged branches
    are pure, and each alone is a one-branch ``cond``), then each point takes its own branch's
    results, by ``select``: branch k where the index is at most k, clamped as ``cond`` is."""
    args = _lead_or_not(bt, builder, ins[1:])
    layouts = [lay for _, lay in args]
    targets = [bt.leading(rank(r)) for r in op.results]
    index_type = ins[0][0].type
    zero = emit(builder, "constant", [], value=Literal.of(0, index_type.dtype))
    outs = []
    for branch in op.regions:
        block, _ = bt.block(branch, layouts, targets)
        one = builder.create("cond", [zero, *(v for v, _ in args)], op.attrs, (block,), op.loc)
        outs.append(one.results)
    chosen = list(outs[-1])
    k_axes = tuple(range(len(bt.sizes)))
    for k in reversed(range(len(op.regions) - 1)):
        bound = emit(builder, "constant", [], value=Literal.of(k, index_type.dtype))
        bound = bt.conform(builder, (bound, ()), ins[0][1])
        taken = bt.to_leading(builder, (emit(builder, "le", [ins[0][0], bound]), ins[0][1]))
        chosen = [
            emit(
                builder,
                "select",
                [
                    emit(builder, "broadcast_in_dim", [taken], shape=r.type.shape, dims=k_axes),
                    r,
                    c,
                ],
            )
            for r, c in zip(outs[k], chosen, strict=True)
        ]
    return list(zip(chosen, targets, strict=True))


def _settle(
    bt: Batcher, body: Block, fixed: Sequence[Layout], inits: Sequence[Batched]
) -> tuple[Block, list[bool]]:
    """The loop body batched at the fixed point of its carries' batching: a carry the body
    makes batched must enter batched too. Batched carries are leading."""
    carries = [bool(axes(lay)) for _, lay in inits]
    while True:
        layouts = [
            bt.leading(rank(p), c) for p, c in zip(body.params[len(fixed) :], carries, strict=True)
        ]
        block, out = bt.block(
            body,
            [*fixed, *layouts],
            [lay if c else None for lay, c in zip(layouts, carries, strict=True)],
        )
        grown = [c or bool(axes(lay)) for c, lay in zip(carries, out, strict=True)]
        if grown == carries:
            return block, carries
        carries = grown


def _entering(
    bt: Batcher, builder: Builder, inits: Sequence[Batched], carries: Sequence[bool]
) -> list[Value]:
    return [bt.to_leading(builder, b) if c else b[0] for b, c in zip(inits, carries, strict=True)]


def _carried(bt: Batcher, op: Op, new: Op, carries: Sequence[bool]) -> list[Batched]:
    return [
        (r, bt.leading(rank(old), c))
        for r, old, c in zip(new.results, op.results, carries, strict=True)
    ]


@rule("for")
def _for(bt: Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    lower = unbatched(op, "lower bound", ins[0])
    upper = unbatched(op, "upper bound", ins[1])
    n_consts = op.attrs["num_consts"]
    consts = _lead_or_not(bt, builder, ins[2 : 2 + n_consts])
    inits = ins[2 + n_consts :]
    fixed = [(), *(lay for _, lay in consts)]
    (body,) = op.regions
    block, carries = _settle(bt, body, fixed, inits)
    operands = [lower, upper, *(v for v, _ in consts), *_entering(bt, builder, inits, carries)]
    new = builder.create("for", operands, op.attrs, (block,), op.loc)
    return _carried(bt, op, new, carries)


@rule("while")
def _while(bt: Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    """The body settled first (its carries' batching fixes the condition's parameters), then
    the condition, whose result must be the same at every point."""
    n_cond, n_body = op.attrs["cond_nconsts"], op.attrs["body_nconsts"]
    cond_consts = _lead_or_not(bt, builder, ins[:n_cond])
    body_consts = _lead_or_not(bt, builder, ins[n_cond : n_cond + n_body])
    inits = ins[n_cond + n_body :]
    cond_region, body_region = op.regions
    body, carries = _settle(bt, body_region, [lay for _, lay in body_consts], inits)
    carry_layouts = [
        bt.leading(rank(p), c) for p, c in zip(body_region.params[n_body:], carries, strict=True)
    ]
    cond, (stop,) = bt.block(cond_region, [*(lay for _, lay in cond_consts), *carry_layouts])
    unbatched(op, "loop condition", (cond.results[0], stop))
    operands = [
        *(v for v, _ in cond_consts),
        *(v for v, _ in body_consts),
        *_entering(bt, builder, inits, carries),
    ]
    new = builder.create("while", operands, op.attrs, (cond, body), op.loc)
    return _carried(bt, op, new, carries)


@rule("call")
def _call(bt: Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    """The callee batched once per batching of its arguments, its results as they come."""
    callee: Function = op.attrs["callee"]
    args = _lead_or_not(bt, builder, ins)
    key = (id(callee), tuple(lay for _, lay in args))
    if key not in bt.callees:
        body, out = bt.block(callee.body, key[1])
        bt.callees[key] = (Function(f"{callee.name}_batched", body), out)
    fn, out = bt.callees[key]
    new = builder.create("call", [v for v, _ in args], {**op.attrs, "callee": fn}, (), op.loc)
    return list(zip(new.results, out, strict=True))
