"""Triton rules for the kernel-context ops: ``program_id`` is the launch id of its axis, or the
loop index of an axis each program iterates (``module``, ``grid.Schedule``); ``num_programs``
is a constant (the grid is static)."""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir.core import Op
from minipallas.ir.errors import PassError
from minipallas.lowering.gpu import emit
from minipallas.lowering.gpu.context import LoweringContext, rule
from minipallas.lowering.gpu.emit import ir


@rule("program_id")
def program_id(ctx: LoweringContext, op: Op) -> Sequence[ir.Value]:
    return [emit.i32(ctx.program_ids[_axis(ctx, op)])]


@rule("num_programs")
def num_programs(ctx: LoweringContext, op: Op) -> Sequence[ir.Value]:
    return [emit.i32(ctx.grid[_axis(ctx, op)])]


def _axis(ctx: LoweringContext, op: Op) -> int:
    axis = op.attrs["axis"]
    if not 0 <= axis < len(ctx.grid):
        raise PassError(
            f"asks for grid axis {axis}, but the kernel's grid {ctx.grid} has {len(ctx.grid)}",
            op=op.name,
            loc=op.loc,
            fix="use an axis of the grid given to pallas_call",
        )
    return axis
