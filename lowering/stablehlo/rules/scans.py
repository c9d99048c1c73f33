"""StableHLO rules for the cumulative ops and ``reduce_prod``, emitted as upstream lowers
``lax.cumsum`` & co. on CPU: a ``reduce_window`` as long as the axis, padded by its length
minus one before (after, reversed) the data; XLA:CPU rewrites it into the tree the interpreter
models (``ir.interpret.rules.scans``), so the bits are XLA's; ``cumlogsumexp``'s body is upstream's
``logaddexp``. ``reduce_prod`` is a ``stablehlo.reduce``
with a ``multiply`` body, in the operand's dtype as upstream emits it (floats match the
interpreter to rounding).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from minipallas.ir.core import Op
from minipallas.ir.interpret.rules.scans import identity
from minipallas.lowering.compat.jaxlib_shim import ir, stablehlo
from minipallas.lowering.stablehlo import emit
from minipallas.lowering.stablehlo.context import LoweringContext, rule

_COMBINE = {
    "cumsum": stablehlo.AddOp,
    "cumprod": stablehlo.MulOp,
    "cummax": stablehlo.MaxOp,
    "cummin": stablehlo.MinOp,
    "reduce_prod": stablehlo.MulOp,
}


def combine_body(region_op: ir.Operation, dtype: str, combine: type) -> None:
    """Fills ``region_op``'s body with ``combine`` of two ``dtype`` scalars."""
    scalar = ir.RankedTensorType.get([], emit.element_type(dtype))
    body = region_op.body.blocks.append(scalar, scalar)
    with ir.InsertionPoint(body):
        stablehlo.ReturnOp([combine(*body.arguments).result])


def logaddexp_body(region_op: ir.Operation, dtype: str) -> None:
    """Fills ``region_op``'s body with upstream's ``logaddexp`` of two ``dtype`` scalars:
    ``a - b`` NaN ? ``a + b`` : ``max(a, b) + log1p(exp(-|a - b|))``."""
    scalar = ir.RankedTensorType.get([], emit.element_type(dtype))
    body = region_op.body.blocks.append(scalar, scalar)
    with ir.InsertionPoint(body):
        a, b = body.arguments
        d = stablehlo.SubtractOp(a, b).result
        tail = stablehlo.Log1pOp(
            stablehlo.ExpOp(stablehlo.NegOp(stablehlo.AbsOp(d).result).result).result
        ).result
        finite = stablehlo.AddOp(stablehlo.MaxOp(a, b).result, tail).result
        total = emit.select(emit.compare(d, d, "NE"), stablehlo.AddOp(a, b).result, finite)
        stablehlo.ReturnOp([total])


@rule("cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp")
def cumulative(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    t, axis = op.result.type, op.attrs["axis"]
    n = t.shape[axis]
    window = [n if d == axis else 1 for d in range(t.ndim)]
    padding = np.zeros((t.ndim, 2), np.int64)
    padding[axis] = (0, n - 1) if op.attrs["reverse"] else (n - 1, 0)
    window_op = stablehlo.ReduceWindowOp(
        [emit.tensor_type(t)],
        [x],
        [emit.constant(identity(op.name, t.dtype), t.dtype)],
        window,
        window_strides=[1] * t.ndim,
        padding=ir.DenseIntElementsAttr.get(padding),
    )
    if op.name == "cumlogsumexp":
        logaddexp_body(window_op, t.dtype)
    else:
        combine_body(window_op, t.dtype, _COMBINE[op.name])
    return [window_op.result]


@rule("reduce_prod")
def reduce_prod(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    dtype = op.result.type.dtype
    reduce_op = stablehlo.ReduceOp(
        [emit.tensor_type(op.result.type)],
        [x],
        [emit.constant(identity("reduce_prod", dtype), dtype)],
        op.attrs["axes"],
    )
    combine_body(reduce_op, dtype, stablehlo.MulOp)
    return [reduce_op.result]
