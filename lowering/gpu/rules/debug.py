"""``debug_print`` in a Triton kernel is refused (upstream emits ``tt.print``; minipallas does
not)."""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir.core import Op
from minipallas.ir.errors import PassError
from minipallas.lowering.compat.jaxlib_shim import ir
from minipallas.lowering.gpu.context import LoweringContext, rule


@rule("debug_print")
def debug_print(ctx: LoweringContext, op: Op, *args: ir.Value) -> Sequence[ir.Value]:
    raise PassError(
        "jax.debug.print in a kernel is not lowered to Triton",
        op=op.name,
        loc=op.loc,
        fix="run the kernel with minipallas.interpret (or pallas_call(interpret=True)) to see "
        "its prints, or print the kernel's outputs outside it",
    )
