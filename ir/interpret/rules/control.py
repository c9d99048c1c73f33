"""Rules for control flow: ``for``, ``while``, ``cond`` and ``call``.

Regions are closed, so each rule binds region parameters from its own operands (refs pass
through as the same ``Ref`` objects: a body's writes are the caller's) and runs the region.
Execution is sequential: a ``while`` condition sees the body's writes from the previous trip.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from minipallas.ir.core import Op
from minipallas.ir.interpret.engine import Interpreter, rule
from minipallas.ir.interpret.grid_steps import role_of


@rule("for")
def for_(interp: Interpreter, op: Op, args: Sequence[Any]) -> list:
    """``i`` runs from ``lower`` to ``upper - 1`` (no trips when ``upper <= lower``)."""
    (body,) = op.regions
    lower, upper = args[0], args[1]
    where = op.slices()
    consts, carries = list(args[where["consts"]]), list(args[where["inits"]])
    index_type = lower.dtype.type
    for i in range(int(lower), int(upper)):
        carries = interp.run(body, [index_type(i), *consts, *carries])
    return carries


@rule("while")
def while_(interp: Interpreter, op: Op, args: Sequence[Any]) -> list:
    cond, body = op.regions
    where = op.slices()
    cond_consts, body_consts = list(args[where["cond_consts"]]), list(args[where["body_consts"]])
    carries = list(args[where["inits"]])
    while bool(interp.run(cond, [*cond_consts, *carries])[0]):
        carries = interp.run(body, [*body_consts, *carries])
    return carries


@rule("cond")
def cond(interp: Interpreter, op: Op, args: Sequence[Any]) -> list:
    """The branch index is clamped into ``[0, N-1]``, as ``lax.switch`` does."""
    index = min(max(int(args[0]), 0), len(op.regions) - 1)
    return interp.run(op.regions[index], args[1:])


@rule("call")
def call(interp: Interpreter, op: Op, args: Sequence[Any]) -> list:
    """A function a kernel's loop program marked runs by its role (``grid_steps``)."""
    callee = op.attrs["callee"]
    role = role_of(callee)
    if role is None:
        return interp.run(callee.body, args)
    return role.run(interp, op, callee, args)
