"""StableHLO rules for ``sort``, ``top_k``, ``argmax`` and ``argmin``, each the module upstream
emits for the jnp/lax function, so XLA computes the same bits:

- ``sort``: ``stablehlo.sort`` (stable) whose comparator is ``jnp.sort``'s: a float key has its
  zeros replaced by +0 (a ``FLOAT`` comparison, so subnormals count as zero on XLA:CPU) and its
  NaNs by one NaN, then keys compare ``TOTALORDER`` less-than, lexicographically;
- ``top_k``: ``chlo.top_k`` along the last dim;
- ``argmax`` / ``argmin``: a two-operand ``stablehlo.reduce`` over (values, iota) whose body
  keeps the accumulator when it is NaN or beats the element, and on equal values the lower
  index (``lax.argmax``'s reducer).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.core import Op
from minipallas.lowering.compat.jaxlib_shim import chlo, ir, stablehlo
from minipallas.lowering.stablehlo import emit
from minipallas.lowering.stablehlo.context import LoweringContext, rule


def _scalar(dtype: str) -> ir.Type:
    return ir.RankedTensorType.get([], emit.element_type(dtype))


def _sort_key(x: ir.Value, dtype: str) -> ir.Value:
    if not dtypes.is_float(dtype):
        return x
    zero = emit.select(emit.compare(x, emit.like(0, x), "EQ"), emit.like(0, x), x)
    return emit.select(emit.compare(x, x, "NE"), emit.like(np.nan, x), zero)


def _total(a: ir.Value, b: ir.Value, direction: str, dtype: str) -> ir.Value:
    """``a <direction> b``, floats in XLA's total order (``lt_to`` / ``eq_to`` upstream)."""
    kind = "TOTALORDER" if dtypes.is_float(dtype) else emit.compare_type(dtype)
    return stablehlo.CompareOp(
        a,
        b,
        stablehlo.ComparisonDirectionAttr.get(direction),
        compare_type=stablehlo.ComparisonTypeAttr.get(kind),
    ).result


@rule("sort")
def sort(ctx: LoweringContext, op: Op, *xs: ir.Value) -> Sequence[ir.Value]:
    kinds = [v.type.dtype for v in op.operands]
    sort_op = stablehlo.SortOp(
        [x.type for x in xs], list(xs), dimension=op.attrs["dimension"], is_stable=True
    )
    body = sort_op.comparator.blocks.append(*(_scalar(d) for d in kinds for _ in (0, 1)))
    with ir.InsertionPoint(body):
        less = None
        for k in reversed(range(op.attrs["num_keys"])):
            a, b = (_sort_key(body.arguments[2 * k + j], kinds[k]) for j in (0, 1))
            here = _total(a, b, "LT", kinds[k])
            if less is not None:
                tie = stablehlo.AndOp(_total(a, b, "EQ", kinds[k]), less).result
                here = stablehlo.OrOp(here, tie).result
            less = here
        stablehlo.ReturnOp([less])
    return list(sort_op.results)


@rule("top_k")
def top_k(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    return list(chlo.TopKOp(x, op.attrs["k"]).results)


@rule("argmax", "argmin")
def argmax(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    source, index = op.operands[0].type, op.result.type.dtype
    axis, is_max = op.attrs["axis"], op.name == "argmax"
    if source.dtype == "bool":
        start: object = not is_max
    elif dtypes.is_float(source.dtype):
        start = -np.inf if is_max else np.inf
    else:
        info = np.iinfo(dtypes.to_numpy(source.dtype))
        start = info.min if is_max else info.max
    iota = stablehlo.IotaOp(
        ir.RankedTensorType.get(list(source.shape), emit.element_type(index)), axis
    ).result
    result_types = [
        ir.RankedTensorType.get(list(op.result.type.shape), emit.element_type(d))
        for d in (source.dtype, index)
    ]
    reduce_op = stablehlo.ReduceOp(
        result_types,
        [x, iota],
        [emit.constant(start, source.dtype), emit.constant(0, index)],
        [axis],
    )
    body = reduce_op.body.blocks.append(
        _scalar(source.dtype), _scalar(index), _scalar(source.dtype), _scalar(index)
    )
    with ir.InsertionPoint(body):
        acc, acc_i, val, val_i = body.arguments
        keep = emit.compare(acc, val, "GT" if is_max else "LT")
        if dtypes.is_float(source.dtype):
            keep = stablehlo.OrOp(keep, emit.compare(acc, acc, "NE")).result
        tie = stablehlo.AndOp(emit.compare(acc, val, "EQ"), emit.compare(acc_i, val_i, "LT"))
        keep_index = stablehlo.OrOp(keep, tie.result).result
        stablehlo.ReturnOp([emit.select(keep, acc, val), emit.select(keep_index, acc_i, val_i)])
    return [reduce_op.results[1]]
