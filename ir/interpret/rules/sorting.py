"""Rules for ``sort``, ``top_k``, ``argmax`` and ``argmin``: positions chosen by comparisons,
so exact once the comparisons are XLA's.

- ``sort`` compares as ``jnp.sort``'s comparator does on XLA:CPU: a float key is first flushed
  (XLA's comparisons treat subnormals as zero, so they tie with +-0), zeros are one key and
  every NaN one key above +inf; a stable lexicographic sort (``numpy.lexsort``) follows.
- ``top_k`` compares the bits in XLA's total order (no flushing), descending, ties by index.
- ``argmax`` / ``argmin`` compare flushed values; numpy's ``argmax`` / ``argmin`` already give
  the first NaN, else the first extreme (+0 and -0 equal), which is XLA's rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.core import Op
from minipallas.ir.interpret.engine import Interpreter, rule
from minipallas.ir.interpret.xla.numerics import flush, widen


def _sort_keys(x: np.ndarray, dtype: str) -> list[np.ndarray]:
    """The keys ``jnp.sort`` orders ``x`` by, most significant first."""
    if not dtypes.is_float(dtype):
        return [x]
    value = flush(widen(x, dtype))
    nan = np.isnan(value)
    return [nan, np.where(nan, 0, value) + np.float32(0)]  # + 0 makes -0 into +0


@rule("sort")
def sort(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    dim, n = op.attrs["dimension"], op.attrs["num_keys"]
    xs = [np.moveaxis(np.asarray(a), dim, -1) for a in args]
    kinds = [v.type.dtype for v in op.operands[:n]]
    keys = [k for x, d in zip(xs[:n], kinds, strict=True) for k in _sort_keys(x, d)]
    order = np.lexsort(keys[::-1], axis=-1) if xs[0].size else np.zeros(xs[0].shape, np.intp)
    return tuple(np.moveaxis(np.take_along_axis(x, order, axis=-1), -1, dim) for x in xs)


def total_order(x: np.ndarray, dtype: str) -> np.ndarray:
    """Integers in int64 ordered as XLA's total order orders ``x``: for floats, the bits read
    as a signed integer, the magnitude bits of negative ones flipped."""
    if not dtypes.is_float(dtype):
        return np.asarray(x, np.int64)
    width = dtypes.itemsize(dtype)
    bits = np.asarray(x).view(f"int{8 * width}").astype(np.int64)
    return np.where(bits < 0, bits ^ ((1 << (8 * width - 1)) - 1), bits)


@rule("top_k")
def top_k(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    x, k = np.asarray(args[0]), op.attrs["k"]
    order = np.argsort(-total_order(x, op.operands[0].type.dtype), axis=-1, kind="stable")
    index = order[..., :k]
    return (np.take_along_axis(x, index, axis=-1), index.astype(np.int32))


@rule("argmax", "argmin")
def argmax(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    dtype, axis = op.operands[0].type.dtype, op.attrs["axis"]
    x = np.asarray(args[0])
    if dtypes.is_float(dtype):
        x = flush(widen(x, dtype))
    out_dtype = dtypes.to_numpy(op.result.type.dtype)
    if x.shape[axis] == 0:
        return (np.zeros(op.result.type.shape, out_dtype),)
    pick = np.argmax if op.name == "argmax" else np.argmin
    return (pick(x, axis=axis).astype(out_dtype),)
