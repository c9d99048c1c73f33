"""StableHLO rules for scoped allocation, as it looks after discharge.

- ``uninitialized`` becomes a defined constant: NaN for floats, the minimum for integers,
  False for bool (what the reference interpreter and upstream discharge give fresh scratch).
- a ``run_scoped`` left with no allocations is just a region: its body is inlined. One that
  still allocates refs was not discharged and is rejected.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.core import Op
from minipallas.ir.errors import PassError
from minipallas.lowering.jaxlib_shim import ir
from minipallas.lowering.stablehlo import emit
from minipallas.lowering.stablehlo.context import LoweringContext, rule


def uninitialized_value(dtype: str) -> object:
    """The value fresh scratch of ``dtype`` holds."""
    if dtypes.is_float(dtype):
        return np.nan
    if dtype == "bool":
        return False
    return np.iinfo(dtypes.to_numpy(dtype)).min


@rule("uninitialized")
def uninitialized(ctx: LoweringContext, op: Op) -> Sequence[ir.Value]:
    t = op.attrs["type"]
    return [emit.constant(uninitialized_value(t.dtype), t.dtype, t.shape)]


@rule("run_scoped")
def run_scoped(ctx: LoweringContext, op: Op, *args: ir.Value) -> Sequence[ir.Value]:
    (body,) = op.regions
    n_alloc = len(body.params) - len(args)
    if n_alloc:
        raise PassError(
            f"still allocates {n_alloc} ref(s); StableHLO has no mutable references",
            op=op.name,
            loc=op.loc,
            fix="discharge the function first (minipallas.lower does)",
        )
    return ctx.lower_block(body, args)
