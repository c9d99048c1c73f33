"""``run_scoped``: scoped allocations become values that start ``uninitialized``.

Once its allocations are values, a ``run_scoped`` means nothing beyond scoping, so the usual
case inlines it: each allocation's root starts as an ``uninitialized`` op (its contents are the
fill value upstream uses: NaN, the integer minimum, False; semaphores start at zero), the
body's params for outer operands are bound to what those operands stand for outside (refs
closed over from outer scopes keep their handles, so the body's writes land in the enclosing
roots directly), and the body's ops are discharged right into the enclosing block.

When the ``discharge_scoped`` option keeps some allocations as refs (e.g. scratch that must stay
in memory), the op stays: kept allocations stay its body's ref parameters, discharged ones start
``uninitialized`` inside the body, and discharged outer refs enter as arrays, those it writes
leaving as extra results (like a one-branch ``cond``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.core import Block, Op, Value
from minipallas.ir.literal import Literal
from minipallas.ir.types import is_semaphore
from minipallas.passes.discharge.engine import DischargeScope, Handle, Root, rule, written
from minipallas.passes.discharge.regions import Section, finish, group_refs, params_by_operand


def _allocate(scope: DischargeScope, param: Value, op: Op) -> None:
    """Binds a scoped allocation to a fresh root holding an ``uninitialized`` value (semaphores:
    zeros, the count they start from)."""
    t = param.type.value_type
    if is_semaphore(param.type):
        zeros = np.zeros(t.shape, dtypes.to_numpy(t.dtype))
        start = scope.emit("constant", [], op.loc, value=Literal.of(zeros, t.dtype))
    else:
        start = scope.emit("uninitialized", [], op.loc, type=t)
    scope.bind(param, Handle(Root(start, param.type)))


@rule("run_scoped", always=True)
def _run_scoped(scope: DischargeScope, op: Op) -> Sequence[Value]:
    (body,) = op.regions
    allocs = op.param_group("allocs")
    keep = [not scope.ctx.discharge_scoped(p.type) for p in allocs]
    if not any(keep):
        for param in allocs:
            _allocate(scope, param, op)
        return scope.inline(Block(op.param_group("args"), body.ops, body.results), op.operands)

    positions = range(len(op.operands))
    groups, dyn = group_refs(scope, op.operands, positions, written(scope.ctx.effects.op(op)))
    inner = scope.child()
    kept_params = []
    for param, kept in zip(allocs, keep, strict=True):
        if kept:
            new = Value(param.type)
            inner.bind(param, new)
            kept_params.append(new)
        else:
            _allocate(inner, param, op)
    section = Section(scope, inner)
    section.forward_all(op, 0, positions)
    dyn_map = section.add_dyn(dyn)
    params = params_by_operand(op, 0)
    roots = {id(g): section.add_group(g, dyn_map, params) for g in groups}
    carried = [g for g in groups if g.written]
    inner.run(body.ops)
    yields = [inner.value(v) for v in body.results] + [roots[id(g)].value for g in carried]
    block = Block((*kept_params, *section.params), inner.ops, tuple(yields))
    new = scope.emit_op("run_scoped", section.operands, op.loc, [block], **op.attrs)
    return finish(scope, new, len(op.results), carried)
