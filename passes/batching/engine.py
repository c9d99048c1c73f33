"""The batching interpreter: walks a pure block and builds its batched counterpart.

``Batcher.block`` interprets one block with an environment from each old value to its
*batched* form: a value of the new program and its ``Layout``. An op none of whose operands
has batch axes is copied with its operands renamed; any other op goes to its rule in
``RULES``, which emits the batched ops and returns each result's batched form. A missing rule
is ``NotBatchable`` naming the op.

*Shared* arrays (``shared``) are the exception to "one value per point": one unbatched array
that every point writes at its own positions. A write into one goes to its rule in
``SHARED_WRITES`` whatever its operands, and so does a control op that carries one (``cond``,
``for``, ``while``, ``call``), since what it writes inside must stay shared.

The rest of this file is what the rules share: moving batch axes (``conform`` into any
layout that holds the value's batch axes, ``to_leading`` into the leading one), the types
of values in a layout, and the refusals every family uses (a value that must be the same at
every point, a float reduction or dot that must keep its bits: the ``policy``'s answer).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from minipallas.ir.builder import Builder, params
from minipallas.ir.core import Block, Function, Op, Value
from minipallas.ir.errors import PassError
from minipallas.ir.literal import Literal
from minipallas.ir.rules import RuleTable
from minipallas.ir.types import ArrayType, Type
from minipallas.passes.batching.policy import GENERIC, Policy, Reader

Layout = tuple[int | None, ...]  # per dimension: the batch axis it runs along, or None
Batched = tuple[Value, Layout]  # a value of the new program and its layout


class NotBatchable(PassError):
    """The program has a construct without a batched form (the message says which)."""


Rule = Callable[["Batcher", Builder, Op, list[Batched]], list[Batched]]
RULES: RuleTable[Rule] = RuleTable("batching rule")
rule = RULES.register
SHARED_WRITES: RuleTable[Rule] = RuleTable("shared-array write rule")
CARRIERS = frozenset({"cond", "for", "while", "call"})  # ops that can write a shared operand


def leading(sizes: Sequence[int], rank: int) -> Layout:
    """All batch axes first, in order, then the ``rank`` original dimensions."""
    return (*range(len(sizes)), *(None,) * rank)


def axes(layout: Layout) -> frozenset[int]:
    return frozenset(d for d in layout if d is not None)


class Batcher:
    """One batching of a program over a batch grid of shape ``sizes``; ``callees`` caches each
    callee's batched form per batching of its arguments. ``policy`` answers for the backend
    (``policy``: which float reductions and dots keep their bits in exact mode, its own forms
    of ops); ``facts`` is what it found in the program before the walk (``Policy.start``).
    ``gathers``: a dynamic index that differs between points becomes a gather or scatter
    (``indexed``) instead of ``NotBatchable``.

    For shared arrays (``shared``): ``roots`` maps each shared value of the new program to its
    array's number, ``latest`` each array to its newest value in the block being built, and
    ``mask`` (``bool[*sizes]``, or None for all) says which points' writes happen: inside a
    ``cond`` whose branch differs between points, only those that take the branch."""

    def __init__(
        self,
        sizes: tuple[int, ...],
        exact: bool,
        policy: Policy = GENERIC,
        facts: Any = None,
        gathers: bool = False,
    ) -> None:
        self.sizes = sizes
        self.exact = exact
        self.policy = policy
        self.facts = facts
        self.gathers = gathers
        self.callees: dict[tuple, tuple[Function, tuple[Layout, ...]]] = {}
        self.roots: dict[Value, int] = {}
        self.latest: dict[int, Value] = {}
        self.mask: Value | None = None
        self.breaks = 0  # ops the policy split so far (``Policy.past``)

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
        roots: Sequence[int | None] = (),
        result_roots: Sequence[int | None] = (),
    ) -> tuple[Block, tuple[Layout, ...]]:
        """``block`` with its parameters in ``layouts``, and its results in ``targets`` (None:
        as they come). ``roots``: the shared array each parameter is, if any; ``result_roots``:
        the one each result must be. Returns the block and its results' layouts."""
        roots = tuple(roots) or (None,) * len(block.params)
        if self.mask is not None and any(r is not None for r in roots):
            raise NotBatchable(
                "a loop or call writes a shared array under a condition that differs between "
                "batch points (only a cond's branches are masked)"
            )
        new_params = params(
            [self.type(p.type, lay) for p, lay in zip(block.params, layouts, strict=True)]
        )
        env: dict[Value, Batched] = {
            old: (new, lay) for old, new, lay in zip(block.params, new_params, layouts, strict=True)
        }
        outer = self.latest, self.mask
        self.latest, self.mask = {}, None
        for p, root in zip(new_params, roots, strict=True):
            if root is not None:
                self.share(p, root)
        builder = Builder(PassError)
        self.walk(builder, block.ops, env)
        results = [env[v] for v in block.results]
        if result_roots:
            results = [
                r if root is None else self.into_shared(builder, r, root)
                for r, root in zip(results, result_roots, strict=True)
            ]
        if targets is not None:
            results = [
                r if t is None else (self.conform(builder, r, t), t)
                for r, t in zip(results, targets, strict=True)
            ]
        self.latest, self.mask = outer
        return builder.block(new_params, [v for v, _ in results]), tuple(lay for _, lay in results)

    def inline(self, builder: Builder, block: Block, ins: Sequence[Batched]) -> list[Batched]:
        """``block``'s ops batched into ``builder`` with its parameters bound to ``ins``."""
        env = dict(zip(block.params, ins, strict=True))
        self.walk(builder, block.ops, env)
        return [env[v] for v in block.results]

    def walk(self, builder: Builder, ops: Sequence[Op], env: dict[Value, Batched]) -> None:
        """Each op batched in turn; past a break (``breaks`` grew: an op the policy split), ops
        read the values made before it as the policy's ``past`` gives them."""
        made: dict[Value, Op] = {}
        past: Reader | None = None
        for op in ops:
            if past is None:
                ins = [env[v] for v in op.operands]
            else:
                ins = [past.read(self, builder, v) for v in op.operands]
            breaks = self.breaks
            env.update(zip(op.results, self.op(builder, op, ins), strict=True))
            if self.breaks != breaks:
                past = self.policy.past(made, env, frozenset(env) - set(op.results))
            made.update((r, op) for r in op.results)

    def op(self, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
        """``op`` on batched operands ``ins``: its rule, or a copy when none has batch axes."""
        shares = any(v in self.roots for v, _ in ins)
        if shares and op.name in SHARED_WRITES and ins[0][0] in self.roots:
            return SHARED_WRITES[op.name](self, builder, op, ins)
        if any(axes(lay) for _, lay in ins) or (shares and op.name in CARRIERS):
            rule = RULES.get(op.name)
            if rule is None:
                raise NotBatchable("no batching rule for this op", op=op.name, loc=op.loc)
            return rule(self, builder, op, ins)
        copy = builder.add(op.renamed(tuple(v for v, _ in ins)))
        return [(r, (None,) * rank(r)) for r in copy.results]

    # ----- shared arrays -----

    def share(self, value: Value, root: int) -> None:
        """``value`` is now the newest value of shared array ``root``."""
        self.roots[value] = root
        self.latest[root] = value

    def current(self, op: Op, value: Value) -> int | None:
        """The shared array ``value`` is (None if none), which ``op`` may write only through
        its newest value: an older one holds only some of the points' writes."""
        root = self.roots.get(value)
        if root is not None and self.latest.get(root) is not value:
            raise NotBatchable(
                "an older value of a shared array is written or passed on",
                op=op.name,
                loc=op.loc,
            )
        return root

    def into_shared(self, builder: Builder, value: Batched, root: int) -> Batched:
        """``value`` as the newest value of shared array ``root``: itself if it is that; an
        array the same at every point replaces it whole (where any point runs, under a mask);
        one that differs between points has no shared form."""
        v, layout = value
        if self.roots.get(v) == root and self.latest.get(root) is v:
            return value
        if v in self.roots or axes(layout):
            raise NotBatchable(
                "each batch point would hold its own copy of a shared array (it is replaced "
                "whole, or comes from an op with no shared form)"
            )
        if self.mask is not None:
            anywhere = emit(builder, "reduce_max", [emit(builder, "convert", [self.mask],
                            dtype="int32")], axes=tuple(range(len(self.sizes))))  # fmt: skip
            zero = emit(builder, "constant", [], value=Literal.of(0, "int32"))
            ran = emit(builder, "ne", [anywhere, zero])
            ran = emit(builder, "broadcast_in_dim", [ran], shape=v.type.shape, dims=())
            v = emit(builder, "select", [ran, v, self.latest[root]])
        self.share(v, root)
        return v, layout

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


def splat(builder: Builder, value: int, t: ArrayType) -> Value:
    """An array of type ``t`` holding ``value`` everywhere."""
    scalar = emit(builder, "constant", [], value=Literal.of(value, t.dtype))
    return emit(builder, "broadcast_in_dim", [scalar], shape=t.shape, dims=())


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
    round differently at the batched shape than at one point's (the policy's answer)."""
    if not bt.exact:
        return
    per_point = [original(v.type, lay) for v, lay in ins]
    columns = 1
    if op.name == "dot":  # the right side's batch axes the left side lacks
        columns = math.prod(bt.sizes[d] for d in axes(ins[1][1]) - axes(ins[0][1]))
    why = bt.policy.keeps_bits(bt, op, per_point, columns)
    if why is not None:
        raise NotBatchable(
            why,
            op=op.name,
            loc=op.loc,
            fix="exact=False (pallas_call's match_upstream=False) batches it, exact to rounding",
        )
