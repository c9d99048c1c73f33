"""StableHLO rules for scoped allocation, as it looks after discharge.

- ``uninitialized`` becomes a defined constant, ``dtypes.fill_value``: NaN for floats, the
  minimum for integers, False for bool (what the reference interpreter and upstream discharge
  give fresh scratch).
- ``run_scoped`` is the rule shared with Triton (``lowering/scoped.py``): one left with no
  allocations is inlined, one that still allocates refs is rejected.
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir import dtypes
from minipallas.ir.core import Op
from minipallas.lowering import scoped
from minipallas.lowering.compat.jaxlib_shim import ir
from minipallas.lowering.stablehlo import emit
from minipallas.lowering.stablehlo.context import LoweringContext, rule

rule("run_scoped")(scoped.run_scoped)


@rule("uninitialized")
def uninitialized(ctx: LoweringContext, op: Op) -> Sequence[ir.Value]:
    t = op.attrs["type"]
    return [emit.constant(dtypes.fill_value(t.dtype), t.dtype, t.shape)]
