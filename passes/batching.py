"""Batching: a pure function applied over new batch axes (``jax.vmap`` for minipallas IR).

``batch(fn, layouts, sizes)`` returns a function computing ``fn`` at every point of a batch
grid of shape ``sizes``, all at once. This is how the CPU path runs the independent points of
a kernel's grid as one program (``minipallas.kernels.vectorized_grid``), so that XLA sees whole
arrays instead of a loop over blocks.

Every value of the new program has a *layout*: one entry per dimension, the batch axis it runs
along (an int), or None for a dimension of the original value, in order. A value without batch
axes is the same at every point and keeps its type. The layouts of the parameters are the
caller's choice: the kernel path passes blocks in the order they lie in memory (for an array
cut into ``(8, 128)`` blocks along batch axes 0 and 1, layout ``(0, None, 1, None)``), so that
no data moves to make them; results come back in whatever layout their ops produced.

The walk follows the program once, op by op:

1. an op whose operands have no batch axes is copied as it is;
2. elementwise ops keep the layout of their richest operand (the others are transposed and
   broadcast to it, which XLA fuses into the op): an elementwise kernel runs on its arrays as
   they lie; ``transpose`` permutes only the original dimensions, ``broadcast_in_dim`` and
   reductions add or remove only original dimensions, and windows without integer-array
   indices slice the batch axes whole, all keeping the batch axes in place; so do
   ``reverse``, ``pad``, the cumulative ops and ``argmax`` / ``argmin``, which work along
   original dimensions where they lie;
3. every other op takes its batched operands in the *leading* layout (all batch axes first,
   in order; ``leading``) and shifts its dimensions past them; regions are batched with
   leading layouts, loops until their carries' batching settles; callees once per batching of
   their arguments.

A ``cond`` whose index differs between points runs every branch and selects each point's
results. Some programs have no batched form here: a float reduction or dot (XLA would round it
differently at the batched shape, see ``_exact_in_any_order``); a dynamic index, loop bound or
loop condition that differs between batch points (that needs a gather, or masking); refs
(batch only discharged programs). ``NotBatchable`` says which op; callers fall back to running
the points one at a time. Like every pass, ``batch`` builds new IR and never edits ``fn``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from minipallas.errors import PassError
from minipallas.ir import dtypes, indexing
from minipallas.ir.builder import Builder, params
from minipallas.ir.core import Block, Function, Op, Value
from minipallas.ir.indexing import Slice
from minipallas.ir.literal import Literal
from minipallas.ir.opset.arrays import (
    ARITHMETIC,
    BITWISE,
    COMPARISONS,
    FLOAT_BINARY,
    SHIFTS,
    UNARY,
)
from minipallas.ir.rules import RuleTable
from minipallas.ir.types import ArrayType, Type
from minipallas.passes.registry import BOOL, INTS, Option, register

Layout = tuple[int | None, ...]  # per dimension: the batch axis it runs along, or None
Batched = tuple[Value, Layout]  # a value of the new program and its layout


class NotBatchable(PassError):
    """The program has a construct without a batched form (the message says which)."""


Rule = Callable[["_Batcher", Builder, Op, list[Batched]], list[Batched]]
RULES: RuleTable[Rule] = RuleTable("batching rule")


def batch(
    fn: Function,
    layouts: Sequence[Layout],
    sizes: Sequence[int],
    results: Sequence[Layout | None] | None = None,
    exact: bool = True,
) -> tuple[Function, tuple[Layout, ...]]:
    """``fn`` at every point of a batch grid of shape ``sizes``, its parameters given in
    ``layouts``; results are given in the layouts ``results`` asks for (None: as they come),
    which must hold all their batch axes. Returns the function and its results' layouts.

    ``exact=False`` batches float reductions and dots too: each point's result is then
    what XLA computes at the batched shape, equal to the unbatched program's only to rounding.
    """
    if len(layouts) != len(fn.params):
        raise PassError(f"batch: {len(layouts)} layouts for {len(fn.params)} parameters")
    body, out = _Batcher(tuple(sizes), exact).block(fn.body, layouts, results)
    return Function(f"{fn.name}_batched", body), out


@register(
    "batch",
    Option("sizes", INTS, "the batch grid's shape; its axes go in front of every parameter"),
    Option("exact", BOOL, "false also batches float reductions and dots (equal up to rounding)"),
    doc="the program at every point of a batch grid, every parameter batched (jax.vmap)",
)
def batch_pass(fn: Function, *, sizes: tuple[int, ...], exact: bool = True) -> Function:
    """The pipeline's ``batch{sizes=4x2}``: every parameter batched, batch axes in front
    (``exact=false`` as ``batch``'s ``exact=False``)."""
    layouts = [
        leading(sizes, p.type.ndim if isinstance(p.type, ArrayType) else 0) for p in fn.params
    ]
    return batch(fn, layouts, sizes, exact=exact)[0]


def leading(sizes: Sequence[int], rank: int) -> Layout:
    """All batch axes first, in order, then the ``rank`` original dimensions."""
    return (*range(len(sizes)), *(None,) * rank)


def axes(layout: Layout) -> frozenset[int]:
    return frozenset(d for d in layout if d is not None)


class _Batcher:
    def __init__(self, sizes: tuple[int, ...], exact: bool) -> None:
        self.sizes = sizes
        self.exact = exact
        self.callees: dict[tuple[int, tuple[Layout, ...]], tuple[Function, tuple[Layout, ...]]] = {}

    def type(self, t: Type, layout: Layout) -> Type:
        """The type of a value of original type ``t`` held in ``layout``."""
        if not axes(layout):
            return t
        if not isinstance(t, ArrayType):
            raise NotBatchable(f"refs cannot be batched (got {t}); discharge the program first")
        shape = iter(t.shape)
        return ArrayType(
            tuple(next(shape) if d is None else self.sizes[d] for d in layout), t.dtype
        )

    def block(
        self,
        block: Block,
        layouts: Sequence[Layout],
        targets: Sequence[Layout | None] | None = None,
    ) -> tuple[Block, tuple[Layout, ...]]:
        """``block`` with its parameters in ``layouts``, and its results in ``targets`` (None:
        as they come). Returns the block and its results' layouts."""
        new_params = params(
            [self.type(p.type, lay) for p, lay in zip(block.params, layouts, strict=True)]
        )
        env: dict[Value, Batched] = {
            old: (new, lay) for old, new, lay in zip(block.params, new_params, layouts, strict=True)
        }
        builder = Builder(PassError)
        for op in block.ops:
            ins = [env[v] for v in op.operands]
            if any(axes(lay) for _, lay in ins):
                rule = RULES.get(op.name)
                if rule is None:
                    raise NotBatchable("no batching rule for this op", op=op.name, loc=op.loc)
                outs = rule(self, builder, op, ins)
            else:
                copy = builder.add(op.renamed(tuple(v for v, _ in ins)))
                outs = [(r, (None,) * _rank(r)) for r in copy.results]
            env.update(zip(op.results, outs, strict=True))
        results = [env[v] for v in block.results]
        if targets is not None:
            results = [
                r if t is None else (self.conform(builder, r, t), t)
                for r, t in zip(results, targets, strict=True)
            ]
        return builder.block(new_params, [v for v, _ in results]), tuple(lay for _, lay in results)

    # ----- moving batch axes -----

    def conform(self, builder: Builder, value: Batched, target: Layout) -> Value:
        """``value`` in layout ``target``, whose batch axes include the value's: a transpose
        into the target's order, then a broadcast along the axes it lacks."""
        v, layout = value
        if layout == target:
            return v
        if not axes(layout) <= axes(target):
            raise PassError(f"batch: a value in layout {layout} cannot be given in {target}")
        position, original = {}, []
        for k, d in enumerate(target):
            if d is None:
                original.append(k)
            else:
                position[d] = k
        body = iter(original)
        where = [next(body) if d is None else position[d] for d in layout]
        order = sorted(range(len(where)), key=where.__getitem__)
        if order != list(range(len(where))):
            v = _emit(builder, "transpose", [v], permutation=tuple(order))
            where = sorted(where)
        shape = self.type(_original(v.type, [layout[k] for k in order]), target).shape
        if v.type.shape != shape:
            v = _emit(builder, "broadcast_in_dim", [v], shape=shape, dims=tuple(where))
        return v

    def to_leading(self, builder: Builder, value: Batched) -> Value:
        return self.conform(builder, value, self.leading(_rank_of(value)))

    def all_leading(self, builder: Builder, ins: Sequence[Batched]) -> list[Value]:
        return [self.to_leading(builder, b) for b in ins]

    def leading(self, rank: int, batched: bool = True) -> Layout:
        """The leading layout of a value of ``rank`` dims (no batch axes if not ``batched``)."""
        return leading(self.sizes, rank) if batched else (None,) * rank


def _rank(v: Value) -> int:
    return v.type.ndim if isinstance(v.type, ArrayType) else 0


def _rank_of(value: Batched) -> int:
    """The rank of the original value."""
    return sum(d is None for d in value[1])


def _original(t: ArrayType, layout: Sequence[int | None]) -> ArrayType:
    """The original type of a value of type ``t`` in ``layout``."""
    return ArrayType(tuple(n for n, d in zip(t.shape, layout, strict=True) if d is None), t.dtype)


def _emit(builder: Builder, name: str, operands: Sequence[Value], **attrs: object) -> Value:
    return builder.create(name, operands, attrs).result


def _leading_op(
    bt: _Batcher, builder: Builder, op: Op, operands: Sequence[Value], **changes: object
) -> list[Batched]:
    """``op`` on leading-layout operands with some attributes changed; results leading."""
    new = builder.create(op.name, operands, {**op.attrs, **changes}, op.regions, op.loc)
    return [(r, bt.leading(_rank(old))) for r, old in zip(new.results, op.results, strict=True)]


def _shifted(bt: _Batcher, dims: Sequence[int]) -> tuple[int, ...]:
    return tuple(d + len(bt.sizes) for d in dims)


# ----- elementwise ops keep the layout -----


@RULES.register(
    *ARITHMETIC,
    *FLOAT_BINARY,
    *BITWISE,
    *SHIFTS,
    *COMPARISONS,
    *UNARY,
    "select",
    "convert",
    "bitcast",
)
def _elementwise(bt: _Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    """In the layout of the operand with the most batch axes when it has all the others'
    (else all leading); the other operands are moved to it."""
    richest = max((lay for _, lay in ins), key=lambda lay: len(axes(lay)))
    if not all(axes(lay) <= axes(richest) for _, lay in ins):
        richest = leading(bt.sizes, len(richest) - len(axes(richest)))
    operands = [bt.conform(builder, b, richest) for b in ins]
    new = builder.create(op.name, operands, op.attrs, (), op.loc)
    return [(new.result, richest)]


@RULES.register("transpose")
def _transpose(bt: _Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    """The original dimensions permuted among their own positions; batch axes stay put."""
    (x, layout), perm = ins[0], op.attrs["permutation"]
    slots = [k for k, d in enumerate(layout) if d is None]
    full = list(range(len(layout)))
    for slot, p in zip(slots, perm, strict=True):
        full[slot] = slots[p]
    new = builder.create("transpose", [x], {"permutation": tuple(full)}, (), op.loc)
    return [(new.result, layout)]


# ----- other shape ops and reductions take leading layouts -----


@RULES.register("broadcast_in_dim")
def _broadcast_in_dim(bt: _Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    """Each batch axis stays just before the dimension its next original dimension goes to
    (or last), so the broadcast is one ``broadcast_in_dim`` of the value as it lies."""
    (x, layout), shape, dims = ins[0], op.attrs["shape"], op.attrs["dims"]
    before: dict[int, list[int]] = {}  # result dim -> the batch axes placed just before it
    pending: list[int] = []
    body = iter(dims)
    for d in layout:
        if d is None:
            before.setdefault(next(body), []).extend(pending)
            pending = []
        else:
            pending.append(d)
    out: list[int | None] = []
    for r in range(len(shape)):
        out += [*before.get(r, []), None]
    result = (*out, *pending)
    position = {d: k for k, d in enumerate(result) if d is not None}
    slots = [k for k, d in enumerate(result) if d is None]
    body = iter(dims)
    where = tuple(slots[next(body)] if d is None else position[d] for d in layout)
    new_shape = bt.type(op.result.type, result).shape
    new = builder.create("broadcast_in_dim", [x], {"shape": new_shape, "dims": where}, (), op.loc)
    return [(new.result, result)]


@RULES.register("reshape")
def _reshape(bt: _Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    shape = (*bt.sizes, *op.attrs["shape"])
    return _leading_op(bt, builder, op, bt.all_leading(builder, ins), shape=shape)


@RULES.register("reduce_sum", "reduce_max", "reduce_min", "reduce_prod")
def _reduce(bt: _Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    """Over the original dimensions where they lie; the batch axes stay put."""
    _exact_in_any_order(bt, op)
    (x, layout), reduced = ins[0], set(op.attrs["axes"])
    slots = _slots(layout)
    positions = tuple(slots[a] for a in sorted(reduced))
    out = tuple(d for k, d in enumerate(layout) if k not in positions)
    new = builder.create(op.name, [x], {**op.attrs, "axes": positions}, (), op.loc)
    return [(new.result, out)]


def _slots(layout: Layout) -> list[int]:
    """Where each original dimension lies in ``layout``."""
    return [k for k, d in enumerate(layout) if d is None]


# ----- structural ops: along original dimensions where they lie -----


@RULES.register("reverse")
def _reverse(bt: _Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    (x, layout), slots = ins[0], _slots(ins[0][1])
    dims = tuple(slots[d] for d in op.attrs["dims"])
    return [(builder.create("reverse", [x], {"dims": dims}, (), op.loc).result, layout)]


@RULES.register("cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp")
def _cumulative(bt: _Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    """Exact for floats too: XLA scans each line along the axis alike whatever the other
    dimensions (the rows-of-16 tree is built along the axis alone; checked bit for bit in
    tests/passes/test_batching_structural.py)."""
    (x, layout), slots = ins[0], _slots(ins[0][1])
    attrs = {**op.attrs, "axis": slots[op.attrs["axis"]]}
    return [(builder.create(op.name, [x], attrs, (), op.loc).result, layout)]


@RULES.register("argmax", "argmin")
def _argmax(bt: _Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    """Comparisons only, so exact; the reduced dimension leaves the layout."""
    (x, layout), slots = ins[0], _slots(ins[0][1])
    position = slots[op.attrs["axis"]]
    new = builder.create(op.name, [x], {**op.attrs, "axis": position}, (), op.loc)
    return [(new.result, layout[:position] + layout[position + 1 :])]


@RULES.register("pad")
def _pad(bt: _Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    """Batch axes get no padding; the padding value must be the same at every point (a
    ``pad`` takes one scalar)."""
    (x, layout), value = ins
    value = _unbatched(op, "padding value", value)
    attrs = {}
    for what in ("low", "high", "interior"):
        amounts = iter(op.attrs[what])
        attrs[what] = tuple(next(amounts) if d is None else 0 for d in layout)
    return [(builder.create("pad", [x, value], attrs, (), op.loc).result, layout)]


@RULES.register("sort")
def _sort(bt: _Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    (dimension,) = _shifted(bt, [op.attrs["dimension"]])
    return _leading_op(bt, builder, op, bt.all_leading(builder, ins), dimension=dimension)


@RULES.register("top_k")
def _top_k(bt: _Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    """Along the last dimension, which the leading layout keeps last."""
    return _leading_op(bt, builder, op, bt.all_leading(builder, ins))


@RULES.register("dot")
def _dot(bt: _Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    """As XLA's ``dot_general`` sees it: batch axes of both sides are batch dimensions, those
    of the left side alone stack its rows, those of the right side alone its columns. A
    batched left side against a fixed right side is then one 2-D dot, as ``jax.jit`` runs
    it; a blocked matmul's (i, j) points one dot of all row blocks by all column blocks."""
    _exact_in_any_order(bt, op)
    (a, a_layout), (b, b_layout) = ins
    both = sorted(axes(a_layout) & axes(b_layout))
    rows = sorted(axes(a_layout) - axes(b_layout))
    cols = sorted(axes(b_layout) - axes(a_layout))
    m, k = _original(a.type, a_layout).shape
    n = _original(b.type, b_layout).shape[1]
    a = bt.conform(builder, ins[0], (*both, *rows, None, None))
    b = bt.conform(builder, ins[1], (*both, None, *cols, None))
    outer = [bt.sizes[d] for d in both]
    n_rows, n_cols = math.prod(bt.sizes[d] for d in rows), math.prod(bt.sizes[d] for d in cols)
    a = _emit(builder, "reshape", [a], shape=(*outer, n_rows * m, k))
    b = _emit(builder, "reshape", [b], shape=(*outer, k, n_cols * n))
    (product,) = builder.create("dot", [a, b], op.attrs, (), op.loc).results
    shape = (*outer, *(bt.sizes[d] for d in rows), m, *(bt.sizes[d] for d in cols), n)
    layout = (*both, *rows, None, *cols, None)
    return [(_emit(builder, "reshape", [product], shape=shape), layout)]


def _exact_in_any_order(bt: _Batcher, op: Op) -> None:
    """Refuses float reductions and dots when batching must be exact: how XLA:CPU orders
    their additions depends on the operand's shape (a (16, 128) row sum and a batched
    (4, 16, 128) one round differently; so do some batched dots), XLA may hand a reduction
    and the elementwise ops feeding it to YNNPACK, whose ``exp`` rounds differently from its
    own, and a max over +0 and -0 depends on the order too. Integer ones give the same bits in
    any order."""
    if bt.exact and dtypes.is_float(op.result.type.dtype):
        raise NotBatchable(
            "a float reduction or dot would round differently at the batched shape",
            op=op.name,
            loc=op.loc,
            fix="exact=False (pallas_call's match_upstream=False) batches it, exact to rounding",
        )


# ----- windows -----


def _same_everywhere(op: Op, dyn: Sequence[Batched]) -> None:
    if any(axes(lay) for _, lay in dyn):
        raise NotBatchable(
            "a dynamic index differs between batch points (that needs a gather)",
            op=op.name,
            loc=op.loc,
        )


@RULES.register("slice", "dynamic_slice", "gather")
def _read(bt: _Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
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
    return _leading_op(bt, builder, op, [x, *dyn], indexer=_in_front(bt, op, indexer, dyn))


@RULES.register("dynamic_update_slice", "scatter", "scatter_add")
def _write(bt: _Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    _same_everywhere(op, ins[1:-1])
    dyn = [v for v, _ in ins[1:-1]]
    x, update = bt.all_leading(builder, [ins[0], ins[-1]])
    indexer = _in_front(bt, op, op.attrs["indexer"], dyn)
    return _leading_op(bt, builder, op, [x, *dyn, update], indexer=indexer)


def _in_front(bt: _Batcher, op: Op, indexer: tuple, dyn: Sequence[Value]) -> tuple:
    """``indexer`` with the batch axes taken whole in front, if its window keeps them there."""
    spread = (*(Slice(0, n, 1) for n in bt.sizes), *indexer)
    window = indexing.result_shape(indexer, [v.type for v in dyn])
    if indexing.result_shape(spread, [v.type for v in dyn]) != (*bt.sizes, *window):
        raise NotBatchable(
            "an integer-array index would move the batch axes", op=op.name, loc=op.loc
        )
    return spread


# ----- control flow -----


def _unbatched(op: Op, what: str, value: Batched) -> Value:
    if axes(value[1]):
        raise NotBatchable(
            f"the {what} differs between batch points (that needs masking)",
            op=op.name,
            loc=op.loc,
        )
    return value[0]


def _lead_or_not(bt: _Batcher, builder: Builder, ins: Sequence[Batched]) -> list[Batched]:
    """Region operands: batched ones in the leading layout, the rest as they are."""
    return [(bt.to_leading(builder, b), bt.leading(_rank_of(b))) if axes(b[1]) else b for b in ins]


@RULES.register("cond")
def _cond(bt: _Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
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
    targets = [bt.leading(_rank(r), b) for r, b in zip(op.results, batched, strict=True)]
    regions = tuple(bt.block(branch, layouts, targets)[0] for branch in op.regions)
    new = builder.create("cond", [index, *(v for v, _ in args)], op.attrs, regions, op.loc)
    return list(zip(new.results, targets, strict=True))


def _select_branches(bt: _Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    """A branch index that differs between points: every branch runs (discharged branches
    are pure, and each alone is a one-branch ``cond``), then each point takes its own branch's
    results, by ``select``: branch k where the index is at most k, clamped as ``cond`` is."""
    args = _lead_or_not(bt, builder, ins[1:])
    layouts = [lay for _, lay in args]
    targets = [bt.leading(_rank(r)) for r in op.results]
    index_type = ins[0][0].type
    zero = _emit(builder, "constant", [], value=Literal.of(0, index_type.dtype))
    outs = []
    for branch in op.regions:
        block, _ = bt.block(branch, layouts, targets)
        one = builder.create("cond", [zero, *(v for v, _ in args)], op.attrs, (block,), op.loc)
        outs.append(one.results)
    chosen = list(outs[-1])
    k_axes = tuple(range(len(bt.sizes)))
    for k in reversed(range(len(op.regions) - 1)):
        bound = _emit(builder, "constant", [], value=Literal.of(k, index_type.dtype))
        bound = bt.conform(builder, (bound, ()), ins[0][1])
        taken = bt.to_leading(builder, (_emit(builder, "le", [ins[0][0], bound]), ins[0][1]))
        chosen = [
            _emit(
                builder,
                "select",
                [
                    _emit(builder, "broadcast_in_dim", [taken], shape=r.type.shape, dims=k_axes),
                    r,
                    c,
                ],
            )
            for r, c in zip(outs[k], chosen, strict=True)
        ]
    return list(zip(chosen, targets, strict=True))


def _settle(
    bt: _Batcher, body: Block, fixed: Sequence[Layout], inits: Sequence[Batched]
) -> tuple[Block, list[bool]]:
    """The loop body batched at the fixed point of its carries' batching: a carry the body
    makes batched must enter batched too. Batched carries are leading."""
    carries = [bool(axes(lay)) for _, lay in inits]
    while True:
        layouts = [
            bt.leading(_rank(p), c) for p, c in zip(body.params[len(fixed) :], carries, strict=True)
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
    bt: _Batcher, builder: Builder, inits: Sequence[Batched], carries: Sequence[bool]
) -> list[Value]:
    return [bt.to_leading(builder, b) if c else b[0] for b, c in zip(inits, carries, strict=True)]


def _carried(bt: _Batcher, op: Op, new: Op, carries: Sequence[bool]) -> list[Batched]:
    return [
        (r, bt.leading(_rank(old), c))
        for r, old, c in zip(new.results, op.results, carries, strict=True)
    ]


@RULES.register("for")
def _for(bt: _Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    lower = _unbatched(op, "lower bound", ins[0])
    upper = _unbatched(op, "upper bound", ins[1])
    n_consts = op.attrs["num_consts"]
    consts = _lead_or_not(bt, builder, ins[2 : 2 + n_consts])
    inits = ins[2 + n_consts :]
    fixed = [(), *(lay for _, lay in consts)]
    (body,) = op.regions
    block, carries = _settle(bt, body, fixed, inits)
    operands = [lower, upper, *(v for v, _ in consts), *_entering(bt, builder, inits, carries)]
    new = builder.create("for", operands, op.attrs, (block,), op.loc)
    return _carried(bt, op, new, carries)


@RULES.register("while")
def _while(bt: _Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    nc, nb = op.attrs["cond_nconsts"], op.attrs["body_nconsts"]
    cond_consts = _lead_or_not(bt, builder, ins[:nc])
    body_consts = _lead_or_not(bt, builder, ins[nc : nc + nb])
    inits = ins[nc + nb :]
    cond_region, body_region = op.regions
    body, carries = _settle(bt, body_region, [lay for _, lay in body_consts], inits)
    carry_layouts = [
        bt.leading(_rank(p), c) for p, c in zip(body_region.params[nb:], carries, strict=True)
    ]
    cond, (stop,) = bt.block(cond_region, [*(lay for _, lay in cond_consts), *carry_layouts])
    _unbatched(op, "loop condition", (cond.results[0], stop))
    operands = [
        *(v for v, _ in cond_consts),
        *(v for v, _ in body_consts),
        *_entering(bt, builder, inits, carries),
    ]
    new = builder.create("while", operands, op.attrs, (cond, body), op.loc)
    return _carried(bt, op, new, carries)


@RULES.register("call")
def _call(bt: _Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
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
