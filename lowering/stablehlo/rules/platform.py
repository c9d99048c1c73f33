"""The StableHLO rule for ``platform_index``: the module is the CPU program, so the branch is
XLA's choice for ``cpu`` (the branch naming it, else the default one)."""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir.core import Op
from minipallas.ir.opset.platform import cpu_branch
from minipallas.lowering.compat.jaxlib_shim import ir
from minipallas.lowering.stablehlo import emit
from minipallas.lowering.stablehlo.context import LoweringContext, rule


@rule("platform_index")
def platform_index(ctx: LoweringContext, op: Op) -> Sequence[ir.Value]:
    return [emit.constant(cpu_branch(op), "int32")]
