"""StableHLO rules for ``reverse`` and ``pad``: ``stablehlo.reverse`` / ``stablehlo.pad``, whose
meaning (negative edge padding included) is the op's."""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir.core import Op
from minipallas.lowering.compat.jaxlib_shim import ir, stablehlo
from minipallas.lowering.stablehlo.context import LoweringContext, rule


@rule("reverse")
def reverse(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    return [stablehlo.ReverseOp(x, list(op.attrs["dims"])).result]


@rule("pad")
def pad(ctx: LoweringContext, op: Op, x: ir.Value, value: ir.Value) -> Sequence[ir.Value]:
    a = op.attrs
    return [stablehlo.PadOp(x, value, list(a["low"]), list(a["high"]), list(a["interior"])).result]
