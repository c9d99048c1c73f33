"""Control flow over discharged refs: loops carry them, branches return them, calls discharge
their callee.

- ``for``: a ref the body writes (or accumulates into) becomes an extra carry, appended after
  the original ones, and the loop's extra results are its final values; a ref the body only
  reads is passed as an array const.
- ``while``: the same, with the carries visible to the condition too, so a condition that reads
  a ref the body writes sees every iteration's value (sequential semantics). A condition that
  writes a ref is handled by running its discharged ops at the start of the body and once
  after the loop, which replays its writes in the order the original loop makes them.
- ``cond``: a ref that some branch writes becomes an extra result (each branch yields its final
  value); a ref only read is passed as an array argument.
- ``call``: the callee is discharged once per pattern of discharged arguments and called with
  arrays; its extra results are the refs' new values. Arguments that alias one buffer in
  different shapes cannot be separate parameters, so such a call is inlined instead.

In every case refs that are not discharged pass through unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from minipallas.ir.core import Block, Op, Value
from minipallas.ir.errors import PassError
from minipallas.passes.discharge.engine import DischargeScope, rule, written
from minipallas.passes.discharge.regions import (
    RefGroup,
    Section,
    finish,
    group_refs,
    params_by_operand,
    positions,
    written_operands,
)
from minipallas.passes.discharge.views import Access


@rule("for", always=True)
def _for(scope: DischargeScope, op: Op) -> Sequence[Value]:
    (body,) = op.regions
    const_pos = positions(op, "consts")
    groups, dyn = group_refs(scope, op.operands, const_pos, written(scope.ctx.effects.op(op)))
    params = params_by_operand(op, 0)
    inner = scope.child()
    (old_index,) = op.param_group("index")
    index = Value(old_index.type)
    inner.bind(old_index, index)

    consts = Section(scope, inner)
    consts.forward_all(op, 0, const_pos)
    dyn_map = consts.add_dyn(dyn)
    for group in groups:
        if not group.written:
            consts.add_group(group, dyn_map, params)
    carries = Section(scope, inner)
    for old, init in zip(op.param_group("inits"), op.group("inits"), strict=True):
        carries.forward(old, init)
    carried = [g for g in groups if g.written]
    roots = [carries.add_group(g, dyn_map, params) for g in carried]

    inner.run(body.ops)
    yields = [inner.value(r) for r in body.results] + [root.value for root in roots]
    block = Block((index, *consts.params, *carries.params), inner.ops, tuple(yields))
    bounds = [scope.value(v) for v in (*op.group("lower"), *op.group("upper"))]
    new = scope.emit_op(
        "for",
        [*bounds, *consts.operands, *carries.operands],
        op.loc,
        [block],
        num_consts=len(consts.operands),
    )
    return finish(scope, new, len(op.results), carried)


@rule("while", always=True)
def _while(scope: DischargeScope, op: Op) -> Sequence[Value]:
    """A ``while`` over discharged refs becomes a ``while`` over arrays, in four steps.

    1. Group the discharged refs among the consts by buffer (``_Loop.of``). A group that the
       condition or the body writes becomes an extra carry, after the original carries, seen
       by both regions: a condition that reads a ref the body writes sees each iteration's
       value, as the original loop does. A group neither writes is an array const of each
       region that reads it.
    2. The new condition (``_new_condition``): the original's ops on its consts and on every
       carry. It yields only its predicate, so whatever it writes is dropped there.
    3. The new body (``_new_body``). When the condition writes a discharged ref, its writes
       must still happen, in order: the body first *replays* the condition's ops on the
       carries (the evaluation that let this iteration run), then runs its own.
    4. After the loop, the carried groups' final values go back to their refs (``finish``), and
       a replayed condition runs once more for the evaluation that ended the loop
       (``_replay_final_condition``).
    """
    loop = _Loop.of(scope, op)
    replay = _replays_condition(loop)
    cond_block, cond_consts = _new_condition(loop)
    body_block, body = _new_body(loop, replay)
    new = scope.emit_op(
        "while",
        [*cond_consts, *body.consts.operands, *body.carries.operands],
        op.loc,
        [cond_block, body_block],
        cond_nconsts=len(cond_consts),
        body_nconsts=len(body.consts.operands),
    )
    results = finish(scope, new, len(loop.inits), loop.carried)
    if replay:
        _replay_final_condition(loop, results)
    return results


@dataclass(eq=False)
class _Loop:
    """A ``while`` being discharged, and what its regions do to the refs among its operands.

    ``cond_consts`` and ``body_consts`` are the operand positions of the condition's and the
    body's consts (the initial carries follow). ``groups`` are the discharged refs among the
    consts, one per buffer (``group_refs``), with ``dyn`` the dynamic indices of their views;
    ``carried`` are the groups the condition or the body writes, ``cond_writes`` the const
    positions whose refs the condition writes.
    """

    scope: DischargeScope
    op: Op
    cond_consts: range
    body_consts: range
    cond_writes: set[int]
    groups: list[RefGroup]
    dyn: list[Value]
    carried: list[RefGroup]

    @classmethod
    def of(cls, scope: DischargeScope, op: Op) -> _Loop:
        cond_consts, body_consts = positions(op, "cond_consts"), positions(op, "body_consts")
        cond_writes = written_operands(scope, op, 0)
        writes = cond_writes | written_operands(scope, op, 1)
        consts = positions(op, "cond_consts", "body_consts")
        groups, dyn = group_refs(scope, op.operands, consts, writes)
        carried = [g for g in groups if g.written]
        return cls(scope, op, cond_consts, body_consts, cond_writes, groups, dyn, carried)

    @property
    def inits(self) -> Sequence[Value]:
        """The original carries' initial values."""
        return self.op.group("inits")


class _NewRegion:
    """One region of the new ``while``: a fresh scope whose parameters are two sections.

    The consts: the operands at ``forwarded``'s (region index, positions) that are not
    discharged, the views' dynamic indices, then each group no region writes that one of the
    old parameters in ``sees`` (operand position -> old parameter) receives. The carries: the
    original ones, received by the old parameters ``carry_params``, then every carried group,
    whose root in this region is in ``roots``.
    """

    def __init__(
        self,
        loop: _Loop,
        forwarded: Sequence[tuple[int, range]],
        sees: Mapping[int, Value],
        carry_params: Sequence[Value],
    ) -> None:
        self.scope = loop.scope.child()
        self.consts = Section(loop.scope, self.scope)
        for region_index, where in forwarded:
            self.consts.forward_all(loop.op, region_index, where)
        dyn_map = self.consts.add_dyn(loop.dyn)
        for group in loop.groups:
            if not group.written and any(pos in sees for pos in group.members):
                self.consts.add_group(group, dyn_map, sees)
        self.carries = Section(loop.scope, self.scope)
        for param, init in zip(carry_params, loop.inits, strict=True):
            self.carries.forward(param, init)
        self.roots = [self.carries.add_group(g, dyn_map, sees) for g in loop.carried]

    def block(self, yields: Sequence[Value]) -> Block:
        return Block((*self.consts.params, *self.carries.params), self.scope.ops, tuple(yields))


def _replays_condition(loop: _Loop) -> bool:
    """Whether the condition writes a discharged ref, so that its ops are replayed in the body
    and after the loop. Its writes to a kept ref would then happen twice (the kept ref's ops
    stay in the new condition too), so a condition writing both kinds is refused."""
    replay = any(pos in loop.cond_writes for g in loop.groups for pos in g.members)
    operands = loop.op.operands
    if replay and any(not loop.scope.is_discharged(operands[pos]) for pos in loop.cond_writes):
        raise PassError(
            "this while condition writes both a discharged ref and a kept one; "
            "its writes cannot be replayed in the body",
            op="while",
            loc=loop.op.loc,
            fix="move the condition's writes into the body",
        )
    return replay


def _new_condition(loop: _Loop) -> tuple[Block, list[Value]]:
    """The new condition block, and the consts the new loop passes it."""
    cond = loop.op.regions[0]
    carry_params = loop.op.param_group("inits", region=0)
    new = _NewRegion(loop, [(0, loop.cond_consts)], params_by_operand(loop.op, 0), carry_params)
    new.scope.run(cond.ops)
    return new.block([new.scope.value(cond.results[0])]), new.consts.operands


def _new_body(loop: _Loop, replay: bool) -> tuple[Block, _NewRegion]:
    """The new body block, and its region (whose sections the new loop's operands follow).

    A replayed condition needs the condition's consts in the body too, and its carry
    parameters stand for the body's."""
    cond, body = loop.op.regions
    forwarded = [(1, loop.body_consts)]
    sees = params_by_operand(loop.op, 1)
    if replay:
        forwarded.insert(0, (0, loop.cond_consts))
        sees = {**sees, **params_by_operand(loop.op, 0)}
    carry_params = loop.op.param_group("inits", region=1)
    new = _NewRegion(loop, forwarded, sees, carry_params)
    if replay:
        cond_carries = loop.op.param_group("inits", region=0)
        for cond_param, body_param in zip(cond_carries, carry_params, strict=True):
            new.scope.alias(cond_param, body_param)
        new.scope.run(cond.ops)
    new.scope.run(body.ops)
    yields = [new.scope.value(r) for r in body.results] + [root.value for root in new.roots]
    return new.block(yields), new


def _replay_final_condition(loop: _Loop, results: Sequence[Value]) -> None:
    """The condition's ops once more, after the loop, on the original carries' final values:
    the writes of the evaluation that ended the loop."""
    scope, op = loop.scope, loop.op
    for param, final in zip(op.param_group("inits", region=0), results, strict=True):
        scope.bind(param, final)
    consts = Block(op.param_group("cond_consts", region=0), op.regions[0].ops, ())
    scope.inline(consts, op.group("cond_consts"))


@rule("cond", always=True)
def _cond(scope: DischargeScope, op: Op) -> Sequence[Value]:
    args_at = positions(op, "args")
    groups, dyn = group_refs(scope, op.operands, args_at, written(scope.ctx.effects.op(op)))
    carried = [g for g in groups if g.written]
    blocks, args = [], []
    for r, branch in enumerate(op.regions):
        inner = scope.child()
        section = Section(scope, inner)
        section.forward_all(op, r, args_at)
        dyn_map = section.add_dyn(dyn)
        params = params_by_operand(op, r)
        roots = {id(g): section.add_group(g, dyn_map, params) for g in groups}
        inner.run(branch.ops)
        yields = [inner.value(v) for v in branch.results]
        yields += [roots[id(g)].value for g in carried]
        blocks.append(Block(tuple(section.params), inner.ops, tuple(yields)))
        args = section.operands
    (index,) = op.group("index")
    new = scope.emit_op("cond", [scope.value(index), *args], op.loc, blocks)
    return finish(scope, new, len(op.results), carried)


@rule("call", always=True)
def _call(scope: DischargeScope, op: Op) -> Sequence[Value]:
    callee = op.attrs["callee"]
    handles = [scope.handles.get(v) for v in op.operands]
    present = [h for h in handles if h is not None]
    if len({id(h.root) for h in present}) < len(present):
        return scope.inline(callee.body, op.operands)
    mask = tuple(h is not None for h in handles)
    target = scope.ctx.callee(callee, mask)
    args = [
        scope.value(v) if h is None else Access(scope, h, op.loc).value()
        for v, h in zip(op.operands, handles, strict=True)
    ]
    new = scope.emit_op("call", args, op.loc, callee=target)
    finals = iter(new.results[len(op.results) :])
    writes = written(scope.ctx.effects.function(callee))
    for pos, h in enumerate(handles):
        if h is not None:
            final = next(finals)
            if pos in writes:
                Access(scope, h, op.loc).write(final)
    return list(new.results[: len(op.results)])
