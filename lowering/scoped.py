"""The ``run_scoped`` rule of the targets that keep no refs of their own: StableHLO and Triton.

Discharge turns every scoped allocation into values, so a ``run_scoped`` that reaches one of
these emitters allocates nothing and is just a region: its body is emitted inline. One that
still allocates refs was not discharged, and the target has nowhere to put them. (Mosaic keeps
scratch refs in VMEM and has its own rule, a ``tpu.region``.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from minipallas.ir.core import Op
from minipallas.ir.errors import PassError
from minipallas.lowering.emitter import EmitterContext


def run_scoped(ctx: EmitterContext, op: Op, *args: Any) -> Sequence[Any]:
    """Inlines the body of an allocation-free ``run_scoped``; rejects one that allocates."""
    allocs = op.param_group("allocs")
    if allocs:
        raise PassError(
            f"still allocates {len(allocs)} ref(s); the {ctx.target} lowering has no mutable "
            "references",
            op=op.name,
            loc=op.loc,
            fix="discharge scoped allocations first (minipallas.lower and "
            "minipallas.lowering.gpu.lower_to_triton do)",
        )
    return ctx.lower_block(op.regions[0], args)
