"""Upstream's TPU vector ops and ``platform_index`` on the Triton path: upstream Pallas's Triton
lowering has no rule for ``roll``, ``bitcast`` (``pltpu.bitcast``) or ``platform_index``
(``lax.platform_dependent``, a square ``jnp.diagonal``), so minipallas rejects them too."""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir.core import Op
from minipallas.lowering.gpu.context import LoweringContext, rule
from minipallas.lowering.gpu.emit import ir
from minipallas.lowering.gpu.unsupported import no_triton_rule

_FIX = {
    "roll": "roll with jnp.roll (slices and a concatenate) or through shifted loads",
    "packed_bitcast": "bitcast between dtypes of one width, or repack outside the kernel",
    "platform_index": "call the branch for the GPU directly (jnp.diagonal of a non-square or "
    "offset array has no platform_dependent)",
}


@rule(*_FIX)
def unsupported(ctx: LoweringContext, op: Op, *args: ir.Value) -> Sequence[ir.Value]:
    raise no_triton_rule(op, _FIX[op.name])
