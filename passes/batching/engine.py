"""The batching interpreter: walks a pure block and builds its batched counterpart.

``Batcher.block`` interprets one block with an environment from each old value to its
*batched* form: a value of the new program and its ``Layout``. An op none of whose operands
has batch axes is copied with its operands renamed; any other op goes to its rule in
``RULES``, which emits the batched ops and returns each result's batched form. A missing rule
is ``NotBatchable`` naming the op.

The rest of this file is what the rules share: moving batch axes (``conform`` into any
layout that holds the value's batch axes, ``to_leading`` into the leading one), the types
of values in a layout, and the refusals every family uses (a value that must be the same at
every point, a float reduction or dot that must keep its bits: ``exactness``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from minipallas.ir.builder import Builder, params
from minipallas.ir.core import Block, Function, Op, Value
from minipallas.ir.errors import PassError
from minipallas.ir.rules import RuleTable
from minipallas.ir.types import ArrayType, Type
from minipallas.passes.batching import exactness

Layout = tuple[int | None, ...]  # per dimension: the batch axis it runs along, or None
Batched = tuple[Value, Layout]  # a value of the new program and its layout


class NotBatchable(PassError):
    """The program has a construct without a batched form (the message says which)."""


Rule = Callable[["Batcher", Builder, Op, list[Batched]], list[Batched]]
RULES: RuleTable[Rule] = RuleTable("batching rule")
rule = RULES.register


def leading(sizes: Sequence[int], rank: int) -> Layout:
    """All batch axes first, in order, then the ``rank`` original dimensions."""
    return (*range(len(sizes)), *(None,) * rank)


def axes(layout: Layout) -> frozenset[int]:
    return frozenset(d for d in layout if d is not None)


class Batcher:
    """One batching of a program over a batch grid of shape ``sizes``; ``callees`` caches each
    callee's batched form per batching of its arguments. For exact mode (``exactness``):
    ``offloads``, whether XLA may hand part of the program to YNNPACK (then approximate
    elementwise ops must not cross its size threshold), and ``transposed``, the program's
    values that are results of a ``transpose``. ``gathers``: a dynamic index that differs
    between points becomes a gather or scatter (``indexed``) instead of ``NotBatchable``."""

    def __init__(
        self,
        sizes: tuple[int, ...],
        exact: bool,
        offloads: bool = True,
        transposed: frozenset[Value] = frozenset(),
        gathers: bool = False,
    ) -> None:
        self.sizes = sizes
        self.exact = exact
        self.offloads = offloads
        self.transposed = transposed
        self.gathers = gathers
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
                outs = [(r, (None,) * rank(r)) for r in copy.results]
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
        position, original_dims = {}, []
        for k, d in enumerate(target):
            if d is None:
                original_dims.append(k)
            else:
                position[d] = k
        body = iter(original_dims)
        where = [next(body) if d is None else position[d] for d in layout]
        order = sorted(range(len(where)), key=where.__getitem__)
        if order != list(range(len(where))):
            v = emit(builder, "transpose", [v], permutation=tuple(order))
            where = sorted(where)
        shape = self.type(original(v.type, [layout[k] for k in order]), target).shape
        if v.type.shape != shape:
            v = emit(builder, "broadcast_in_dim", [v], shape=shape, dims=tuple(where))
        return v

    def to_leading(self, builder: Builder, value: Batched) -> Value:
        return self.conform(builder, value, self.leading(rank_of(value)))

    def all_leading(self, builder: Builder, ins: Sequence[Batched]) -> list[Value]:
        return [self.to_leading(builder, b) for b in ins]

    def leading(self, rank: int, batched: bool = True) -> Layout:
        """The leading layout of a value of ``rank`` dims (no batch axes if not ``batched``)."""
        return leading(self.sizes, rank) if batched else (None,) * rank


def rank(v: Value) -> int:
    return v.type.ndim if isinstance(v.type, ArrayType) else 0


def rank_of(value: Batched) -> int:
    """The rank of the original value."""
    return sum(d is None for d in value[1])


def original(t: ArrayType, layout: Sequence[int | None]) -> ArrayType:
    """The original type of a value of type ``t`` in ``layout``."""
    return ArrayType(tuple(n for n, d in zip(t.shape, layout, strict=True) if d is None), t.dtype)


def slots_of(layout: Layout) -> list[int]:
    """Where each original dimension lies in ``layout``."""
    return [k for k, d in enumerate(layout) if d is None]


def emit(builder: Builder, name: str, operands: Sequence[Value], **attrs: object) -> Value:
    return builder.create(name, operands, attrs).result


def leading_op(
    bt: Batcher, builder: Builder, op: Op, operands: Sequence[Value], **changes: object
) -> list[Batched]:
    """``op`` on leading-layout operands with some attributes changed; results leading."""
    new = builder.create(op.name, operands, {**op.attrs, **changes}, op.regions, op.loc)
    return [(r, bt.leading(rank(old))) for r, old in zip(new.results, op.results, strict=True)]


def unbatched(op: Op, what: str, value: Batched) -> Value:
    """``value`` as it is, which must be the same at every point (else ``NotBatchable``)."""
    if axes(value[1]):
        raise NotBatchable(
            f"the {what} differs between batch points (that needs masking)",
            op=op.name,
            loc=op.loc,
        )
    return value[0]


def keeps_bits(bt: Batcher, op: Op, ins: Sequence[Batched]) -> None:
    """Refuses, when batching must be exact, a float reduction or dot that XLA:CPU would
    round differently at the batched shape than at one point's (``exactness``)."""
    if not bt.exact:
        return
    per_point = [original(v.type, lay) for v, lay in ins]
    why = exactness.keeps_bits(op, per_point, [v in bt.transposed for v in op.operands])
    if why is not None:
        raise NotBatchable(
            why,
            op=op.name,
            loc=op.loc,
            fix="exact=False (pallas_call's match_upstream=False) batches it, exact to rounding",
        )
