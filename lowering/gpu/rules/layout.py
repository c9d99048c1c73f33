"""``reverse`` and ``pad`` on the Triton path: upstream Pallas's Triton lowering has a rule for
neither (``rev``, ``pad``), and Triton has no op that reverses or shifts a register tensor, so
minipallas rejects both."""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir.core import Op
from minipallas.lowering.gpu.context import LoweringContext, rule
from minipallas.lowering.gpu.emit import ir
from minipallas.lowering.gpu.unsupported import no_triton_rule


@rule("reverse")
def reverse(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    raise no_triton_rule(
        op, "flip the array outside the kernel, or load the block through reversed indices"
    )


@rule("pad")
def pad(ctx: LoweringContext, op: Op, x: ir.Value, value: ir.Value) -> Sequence[ir.Value]:
    raise no_triton_rule(
        op,
        "pad outside the kernel, or load a larger block whose masked-off elements read as "
        "the padding value (jnp.where on an iota)",
    )
