"""``debug_print`` in a Mosaic TPU kernel is refused: upstream lowers it to ``tpu.log``, which
prints only scalars and only on hardware, so minipallas does not emit it."""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir.core import Op
from minipallas.lowering.compat.jaxlib_shim import ir
from minipallas.lowering.tpu.context import LoweringContext, rule, unsupported


@rule("debug_print")
def debug_print(ctx: LoweringContext, op: Op, *args: ir.Value) -> Sequence[ir.Value]:
    raise unsupported(
        op,
        "jax.debug.print in a kernel is not lowered to Mosaic TPU",
        "run the kernel with minipallas.interpret (or pallas_call(interpret=True)) to see "
        "its prints, or print the kernel's outputs outside it",
    )
