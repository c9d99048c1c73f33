"""StableHLO rules for the kernel-context ops, which only mean something inside a grid.

``program_id`` and ``num_programs`` name a position in a kernel's grid. A plain function lowered
on its own has no grid, so they are rejected here; the kernel path (``pallas_call``) binds
them to its grid indices first (``passes.kernel.bind_grid``), so a kernel never reaches these
rules.
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir.core import Op
from minipallas.ir.errors import PassError
from minipallas.lowering.compat.jaxlib_shim import ir
from minipallas.lowering.stablehlo.context import LoweringContext, rule


@rule("program_id", "num_programs")
def grid_query(ctx: LoweringContext, op: Op) -> Sequence[ir.Value]:
    raise PassError(
        f"axis {op.attrs['axis']} of a grid, but this function is lowered outside any kernel",
        op=op.name,
        loc=op.loc,
        fix="call it inside a kernel run by minipallas.pallas_call, which provides the grid",
    )


@rule("axis_index", "barrier")
def together(ctx: LoweringContext, op: Op) -> Sequence[ir.Value]:
    raise PassError(
        "programs that run together (named axes, barriers) run only in minipallas's "
        "multi-program interpreter",
        op=op.name,
        loc=op.loc,
        fix="interpret(fn, ..., grid=..., grid_names=..., collectives='simulate')",
    )
