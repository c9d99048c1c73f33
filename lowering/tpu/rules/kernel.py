"""Mosaic rules for the kernel-context ops: the grid position comes from the kernel's arguments.

A Mosaic kernel function takes its grid indices as its first ``i32`` arguments, so
``program_id`` on axis ``a`` is argument ``a``; ``num_programs`` is the grid's static size (upstream
emits ``tpu.iteration_bound``, which canonicalization folds to the same constant), or, along a
dynamic axis, ``tpu.iteration_bound`` itself.
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir.core import Op
from minipallas.lowering.compat.jaxlib_shim import ir, tpu
from minipallas.lowering.tpu import emit
from minipallas.lowering.tpu.context import LoweringContext, rule, unsupported


def _axis(ctx: LoweringContext, op: Op) -> int:
    axis = op.attrs["axis"]
    if axis >= len(ctx.grid):
        raise unsupported(
            op,
            f"asks for grid axis {axis}, but the kernel's grid {ctx.grid} has {len(ctx.grid)} axes",
            fix="pass a grid with that many axes to pallas_call",
        )
    return axis


@rule("program_id")
def program_id(ctx: LoweringContext, op: Op) -> Sequence[ir.Value]:
    return [ctx.grid_indices[_axis(ctx, op)]]


@rule("num_programs")
def num_programs(ctx: LoweringContext, op: Op) -> Sequence[ir.Value]:
    axis = _axis(ctx, op)
    if ctx.grid[axis] is None:
        return [tpu.iteration_bound(axis)]
    return [emit.i32(ctx.grid[axis])]
