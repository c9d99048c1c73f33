"""The cumulative ops and ``reduce_prod`` in Mosaic: upstream Pallas TPU has no rule for
``cumsum``, ``cumprod``, ``cummax``, ``cummin`` or ``reduce_prod`` ("Unimplemented primitive
in Pallas TPU lowering"), so minipallas rejects each, naming it and a way around it."""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir.core import Op
from minipallas.ir.opset.scans import CUMULATIVE
from minipallas.lowering.compat.jaxlib_shim import ir
from minipallas.lowering.tpu.context import LoweringContext, no_mosaic_rule, rule


@rule(*CUMULATIVE)
def cumulative(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    raise no_mosaic_rule(
        op,
        fix=f"compute the {op.name} outside the kernel, or accumulate it over a fori_loop "
        "of slices",
    )


@rule("reduce_prod")
def reduce_prod(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    raise no_mosaic_rule(
        op, fix="compute the product outside the kernel, or multiply slices in a fori_loop"
    )
