"""Control flow: ``cond``, ``for``, ``while`` and ``call``, batched region by region.

Loop and call operands with batch axes enter in the leading layout, the others as they are, and
each region is batched for those layouts; a ``cond``'s branches take their operands as they lie.
A ``cond`` result batched in any branch is batched in all, in a branch's layout (``_joined``);
a loop carry the body makes batched enters batched too, found by iterating to a fixed point
(``_settle``); a callee is batched once per batching of its arguments.
A ``cond`` index that differs between points runs every branch and selects; a loop bound or
condition that differs is ``NotBatchable`` (that needs masking).
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir.builder import Builder
from minipallas.ir.core import Block, Function, Op, Value
from minipallas.ir.types import ArrayType
from minipallas.passes.batching import shared
from minipallas.passes.batching.engine import (
    Batched,
    Batcher,
    Layout,
    axes,
    emit,
    rank,
    rank_of,
    rule,
    splat,
    unbatched,
)


def _lead_or_not(bt: Batcher, builder: Builder, ins: Sequence[Batched]) -> list[Batched]:
    """Region operands: batched ones in the leading layout, the rest as they are."""
    return [(bt.to_leading(builder, b), bt.leading(rank_of(b))) if axes(b[1]) else b for b in ins]


@rule("cond")
def _cond(bt: Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    """Each branch batched as its arguments are; a result batched in any branch is batched
    (leading) in all, one that is a shared array's newest value is that in all."""
    roots = shared.result_roots(bt, op, op.regions, ins[1:])
    if axes(ins[0][1]) or (bt.mask is not None and any(r is not None for r in roots)):
        return _select_branches(bt, builder, op, ins, roots)
    index = ins[0][0]
    args = ins[1:]  # as they lie: each branch is batched for its parameters' layouts
    layouts = [lay for _, lay in args]
    arg_roots = [bt.roots.get(v) for v, _ in args]
    outs = [bt.block(branch, layouts, None, arg_roots, roots)[1] for branch in op.regions]
    targets = [_joined(bt, rank(r), [o[j] for o in outs]) for j, r in enumerate(op.results)]
    regions = tuple(bt.block(b, layouts, targets, arg_roots, roots)[0] for b in op.regions)
    new = builder.create("cond", [index, *(v for v, _ in args)], op.attrs, regions, op.loc)
    return _sharing(bt, new, targets, roots)


def _joined(bt: Batcher, rank: int, layouts: Sequence[Layout]) -> Layout:
    """The layout of a ``cond`` result the branches give in ``layouts``: unbatched if none
    batches it, else with every batch axis, as the first branch that has them all gives it
    (an accumulator's ``when`` keeps the layout it lies in), or leading."""
    if not any(axes(lay) for lay in layouts):
        return (None,) * rank
    whole = [lay for lay in layouts if len(axes(lay)) == len(bt.sizes)]
    return whole[0] if whole else bt.leading(rank)


def _select_branches(
    bt: Batcher, builder: Builder, op: Op, ins: list[Batched], roots: Sequence[int | None]
) -> list[Batched]:
    """A branch index that differs between points: every branch runs, inline (discharged
    branches are pure), then each point takes its own branch's results by ``select``: branch
    k where the index, clamped as ``cond`` clamps it, is k. A shared array is instead written
    by each branch in turn, masked to the points that take it (``shared``)."""
    index_type = ins[0][0].type.dtype
    last = len(op.regions) - 1
    index = bt.to_leading(builder, ins[0])
    index = emit(builder, "max", [index, _splat(bt, builder, 0, index_type)])
    index = emit(builder, "min", [index, _splat(bt, builder, last, index_type)])
    outer, takes, outs = bt.mask, [], []
    for k, branch in enumerate(op.regions):
        takes.append(emit(builder, "eq", [index, _splat(bt, builder, k, index_type)]))
        bt.mask = takes[-1] if outer is None else emit(builder, "and", [outer, takes[-1]])
        args = [b if bt.roots.get(b[0]) is None else (bt.latest[bt.roots[b[0]]], b[1])
                for b in ins[1:]]  # fmt: skip
        results = bt.inline(builder, branch, args)
        outs.append([r if root is None else bt.into_shared(builder, r, root)
                     for r, root in zip(results, roots, strict=True)])  # fmt: skip
    bt.mask = outer
    chosen = []
    batch_dims = tuple(range(len(bt.sizes)))
    for j, (result, root) in enumerate(zip(op.results, roots, strict=True)):
        if root is not None:
            chosen.append((bt.latest[root], (None,) * rank(result)))
            continue
        value = bt.to_leading(builder, outs[last][j])
        for k in reversed(range(last)):
            mine = bt.to_leading(builder, outs[k][j])
            taken = emit(builder, "broadcast_in_dim", [takes[k]], shape=mine.type.shape,
                         dims=batch_dims)  # fmt: skip
            value = emit(builder, "select", [taken, mine, value])
        chosen.append((value, bt.leading(rank(result))))
    return chosen


def _splat(bt: Batcher, builder: Builder, value: int, dtype: str) -> Value:
    return splat(builder, value, ArrayType(bt.sizes, dtype))


def _sharing(
    bt: Batcher, new: Op, layouts: Sequence[Layout], roots: Sequence[int | None]
) -> list[Batched]:
    """``new``'s results, each the newest value of the shared array ``roots`` names."""
    for r, root in zip(new.results, roots, strict=True):
        if root is not None:
            bt.share(r, root)
    return list(zip(new.results, layouts, strict=True))


def _settle(
    bt: Batcher,
    body: Block,
    carry_params: Sequence[Value],
    fixed: Sequence[Layout],
    inits: Sequence[Batched],
    roots: Sequence[int | None],
) -> tuple[Block, list[bool]]:
    """The loop body batched at the fixed point of its carries' batching: a carry the body
    makes batched must enter batched too. Batched carries are leading; a shared carry stays
    shared (``roots``). ``fixed`` are the layouts of the parameters before ``carry_params``."""
    carries = [bool(axes(lay)) for _, lay in inits]
    while True:
        layouts = [bt.leading(rank(p), c) for p, c in zip(carry_params, carries, strict=True)]
        block, out = bt.block(
            body,
            [*fixed, *layouts],
            [lay if c else None for lay, c in zip(layouts, carries, strict=True)],
            [*(None for _ in fixed), *roots],
            roots,
        )
        grown = [c or bool(axes(lay)) for c, lay in zip(carries, out, strict=True)]
        if grown == carries:
            return block, carries
        carries = grown


def _entering(
    bt: Batcher, builder: Builder, inits: Sequence[Batched], carries: Sequence[bool]
) -> list[Value]:
    return [bt.to_leading(builder, b) if c else b[0] for b, c in zip(inits, carries, strict=True)]


def _carried(
    bt: Batcher, op: Op, new: Op, carries: Sequence[bool], roots: Sequence[int | None]
) -> list[Batched]:
    layouts = [bt.leading(rank(old), c) for old, c in zip(op.results, carries, strict=True)]
    return _sharing(bt, new, layouts, roots)


@rule("for")
def _for(bt: Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    where = op.slices()
    (lower,), (upper,) = ins[where["lower"]], ins[where["upper"]]
    lower, upper = unbatched(op, "lower bound", lower), unbatched(op, "upper bound", upper)
    consts = _lead_or_not(bt, builder, ins[where["consts"]])
    inits = ins[where["inits"]]
    fixed = [(), *(lay for _, lay in consts)]  # the index, then the consts
    (body,) = op.regions
    roots = [bt.current(op, v) for v, _ in inits]
    block, carries = _settle(bt, body, op.param_group("inits"), fixed, inits, roots)
    operands = [lower, upper, *(v for v, _ in consts), *_entering(bt, builder, inits, carries)]
    new = builder.create("for", operands, op.attrs, (block,), op.loc)
    return _carried(bt, op, new, carries, roots)


@rule("while")
def _while(bt: Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    """The body settled first (its carries' batching fixes the condition's parameters), then
    the condition, whose result must be the same at every point."""
    where = op.slices()
    cond_consts = _lead_or_not(bt, builder, ins[where["cond_consts"]])
    body_consts = _lead_or_not(bt, builder, ins[where["body_consts"]])
    inits = ins[where["inits"]]
    cond_region, body_region = op.regions
    roots = [bt.current(op, v) for v, _ in inits]
    carry_params = op.param_group("inits", region=1)
    fixed = [lay for _, lay in body_consts]
    body, carries = _settle(bt, body_region, carry_params, fixed, inits, roots)
    carry_layouts = [bt.leading(rank(p), c) for p, c in zip(carry_params, carries, strict=True)]
    cond, (stop,) = bt.block(cond_region, [*(lay for _, lay in cond_consts), *carry_layouts])
    unbatched(op, "loop condition", (cond.results[0], stop))
    operands = [
        *(v for v, _ in cond_consts),
        *(v for v, _ in body_consts),
        *_entering(bt, builder, inits, carries),
    ]
    new = builder.create("while", operands, op.attrs, (cond, body), op.loc)
    return _carried(bt, op, new, carries, roots)


@rule("call")
def _call(bt: Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    """The callee batched once per batching of its arguments (and of which are shared), its
    results as they come."""
    callee: Function = op.attrs["callee"]
    roots = shared.result_roots(bt, op, [callee.body], ins)
    args = _lead_or_not(bt, builder, ins)
    arg_roots = tuple(bt.roots.get(v) for v, _ in args)
    key = (id(callee), tuple(lay for _, lay in args), arg_roots)
    if key not in bt.callees:
        body, out = bt.block(callee.body, key[1], None, arg_roots, roots)
        bt.callees[key] = (Function(f"{callee.name}_batched", body), out)
    fn, out = bt.callees[key]
    new = builder.create("call", [v for v, _ in args], {**op.attrs, "callee": fn}, (), op.loc)
    return _sharing(bt, new, out, roots)
