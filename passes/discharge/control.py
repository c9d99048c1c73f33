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

from collections.abc import Sequence

from minipallas.errors import PassError
from minipallas.ir.core import Block, Op, Value
from minipallas.passes.discharge.engine import DischargeScope, rule, written
from minipallas.passes.discharge.regions import (
    Section,
    finish,
    group_refs,
    params_by_operand,
    written_operands,
)
from minipallas.passes.discharge.views import Access


@rule("for", always=True)
def _for(scope: DischargeScope, op: Op) -> Sequence[Value]:
    (body,) = op.regions
    n_consts = op.attrs["num_consts"]
    const_pos = range(2, 2 + n_consts)
    groups, dyn = group_refs(scope, op.operands, const_pos, written(scope.ctx.effects.op(op)))
    params = params_by_operand(op, 0)
    inner = scope.child()
    index = Value(body.params[0].type)
    inner.bind(body.params[0], index)

    consts = Section(scope, inner)
    consts.forward_all(op, 0, const_pos)
    dyn_map = consts.add_dyn(dyn)
    for group in groups:
        if not group.written:
            consts.add_group(group, dyn_map, params)
    carries = Section(scope, inner)
    for old, init in zip(body.params[1 + n_consts :], op.operands[2 + n_consts :], strict=True):
        carries.forward(old, init)
    carried = [g for g in groups if g.written]
    roots = [carries.add_group(g, dyn_map, params) for g in carried]

    inner.run(body.ops)
    yields = [inner.value(r) for r in body.results] + [root.value for root in roots]
    block = Block((index, *consts.params, *carries.params), inner.ops, tuple(yields))
    bounds = [scope.value(v) for v in op.operands[:2]]
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
    cond, body = op.regions
    nc, nb = op.attrs["cond_nconsts"], op.attrs["body_nconsts"]
    cond_writes = written_operands(scope, op, 0)
    groups, dyn = group_refs(
        scope, op.operands, range(nc + nb), cond_writes | written_operands(scope, op, 1)
    )
    cond_params, body_params = params_by_operand(op, 0), params_by_operand(op, 1)
    replay = any(pos in cond_writes for g in groups for pos in g.members)
    if replay and any(not scope.is_discharged(op.operands[pos]) for pos in cond_writes):
        raise PassError(
            "this while condition writes both a discharged ref and a kept one; "
            "its writes cannot be replayed in the body",
            op="while",
            loc=op.loc,
            fix="move the condition's writes into the body",
        )
    carried = [g for g in groups if g.written]
    n_carry = len(op.operands) - nc - nb

    # The condition: its consts, then the original carries and the carried refs.
    ci = scope.child()
    c_consts = Section(scope, ci)
    c_consts.forward_all(op, 0, range(nc))
    c_dyn = c_consts.add_dyn(dyn)
    for g in groups:
        if not g.written and any(pos < nc for pos in g.members):
            c_consts.add_group(g, c_dyn, cond_params)
    c_carries = Section(scope, ci)
    for k in range(n_carry):
        c_carries.forward(cond.params[nc + k], op.operands[nc + nb + k])
    for g in carried:
        c_carries.add_group(g, c_dyn, cond_params)
    ci.run(cond.ops)
    cond_block = Block((*c_consts.params, *c_carries.params), ci.ops, (ci.value(cond.results[0]),))

    # The body, which first replays the condition's writes when it has any.
    bi = scope.child()
    seen = {**body_params, **cond_params} if replay else body_params
    b_consts = Section(scope, bi)
    if replay:
        b_consts.forward_all(op, 0, range(nc))
    b_consts.forward_all(op, 1, range(nc, nc + nb))
    b_dyn = b_consts.add_dyn(dyn)
    for g in groups:
        if not g.written and any(pos in seen for pos in g.members):
            b_consts.add_group(g, b_dyn, seen)
    b_carries = Section(scope, bi)
    for k in range(n_carry):
        b_carries.forward(body.params[nb + k], op.operands[nc + nb + k])
    roots = [b_carries.add_group(g, b_dyn, seen) for g in carried]
    if replay:
        for k in range(n_carry):
            bi.alias(cond.params[nc + k], body.params[nb + k])
        bi.run(cond.ops)
    bi.run(body.ops)
    yields = [bi.value(r) for r in body.results] + [root.value for root in roots]
    body_block = Block((*b_consts.params, *b_carries.params), bi.ops, tuple(yields))

    new = scope.emit_op(
        "while",
        [*c_consts.operands, *b_consts.operands, *b_carries.operands],
        op.loc,
        [cond_block, body_block],
        cond_nconsts=len(c_consts.operands),
        body_nconsts=len(b_consts.operands),
    )
    results = finish(scope, new, n_carry, carried)
    if replay:  # the last evaluation of the condition, the one that ended the loop
        for k in range(n_carry):
            scope.bind(cond.params[nc + k], results[k])
        scope.inline(Block(cond.params[:nc], cond.ops, ()), op.operands[:nc])
    return results


@rule("cond", always=True)
def _cond(scope: DischargeScope, op: Op) -> Sequence[Value]:
    positions = range(1, len(op.operands))
    groups, dyn = group_refs(scope, op.operands, positions, written(scope.ctx.effects.op(op)))
    carried = [g for g in groups if g.written]
    blocks, args = [], []
    for r, branch in enumerate(op.regions):
        inner = scope.child()
        section = Section(scope, inner)
        section.forward_all(op, r, positions)
        dyn_map = section.add_dyn(dyn)
        params = params_by_operand(op, r)
        roots = {id(g): section.add_group(g, dyn_map, params) for g in groups}
        inner.run(branch.ops)
        yields = [inner.value(v) for v in branch.results]
        yields += [roots[id(g)].value for g in carried]
        blocks.append(Block(tuple(section.params), inner.ops, tuple(yields)))
        args = section.operands
    new = scope.emit_op("cond", [scope.value(op.operands[0]), *args], op.loc, blocks)
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
