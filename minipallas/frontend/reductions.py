"""The reductions, scans and sorts of ``minipallas.numpy`` beyond sum/max/min.

Each is spelled as ``jax.numpy`` computes it, so results agree bit for bit: ``mean`` is a sum
divided by the (static) count in float32 for 16-bit floats, then converted back; ``var``
subtracts that mean, squares and divides by ``count - ddof`` (NaN when that is not positive);
``argmax``, ``cumsum`` and friends flatten first when no axis is given; bool scans count in
int32; ``argsort`` sorts an ``iota`` along with the keys.
"""

from __future__ import annotations

import math
from typing import Any

from minipallas.frontend import values as _v
from minipallas.frontend.promotion import canonical
from minipallas.frontend.scopes import emit, trace_error
from minipallas.frontend.values import TracedArray
from minipallas.ir import dtypes
from minipallas.ir.types import ArrayType


def _inexact(dtype: str) -> str:
    """The float dtype a mean of ``dtype`` has: floats keep theirs, the rest is float32."""
    return dtype if dtypes.is_float(dtype) else "float32"


def _wide(dtype: str) -> str:
    """16-bit floats compute in float32, as jnp's ``_upcast_f16``."""
    return "float32" if dtype in ("float16", "bfloat16") else dtype


def _count(x: TracedArray, axis: Any) -> int:
    return math.prod(x.shape[a] for a in _v.normalize_axes(axis, x.ndim))


def mean(a: Any, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> TracedArray:
    """The arithmetic mean over ``axis`` (all by default); integers give float32."""
    a = _v.asarray(a)
    out = _inexact(a.type.dtype) if dtype is None else canonical(dtype)
    wide = _wide(out) if dtypes.is_float(out) else out
    total = _v.reduction("reduce_sum", _v.astype(a, wide), axis, keepdims)
    quotient = _v.emit_array("div", _v.promote_operands(total, _const(_count(a, axis), wide)))
    return _v.astype(quotient, out)


def var(
    a: Any, axis: Any = None, dtype: Any = None, ddof: int = 0, keepdims: bool = False
) -> TracedArray:
    """The variance over ``axis``: the mean of squared deviations, divided by
    ``count - ddof``."""
    a = _v.asarray(a)
    out = _inexact(a.type.dtype) if dtype is None else canonical(dtype)
    wide = _wide(out)
    a = _v.astype(a, wide)
    centered = a - mean(a, axis, wide, keepdims=True)
    squares = _v.reduction("reduce_sum", centered * centered, axis, keepdims)
    normalizer = _const(_count(a, axis) - ddof, wide)
    result = _v.astype(_v.emit_array("div", _v.promote_operands(squares, normalizer)), out)
    if _count(a, axis) - ddof > 0:
        return result
    return _v.broadcast_to(_const(math.nan, out), result.shape)


def _const(value: float, dtype: str) -> TracedArray:
    return _v.constant(value, dtype)


def _arg(name: str, a: Any, axis: Any, keepdims: bool) -> TracedArray:
    a = _v.asarray(a)
    if axis is None:
        kept, flat = (1,) * a.ndim, _v.reshape(a, (-1,))
        axis = 0
    else:
        (axis,) = _v.normalize_axes(axis, a.ndim)
        kept, flat = a.shape[:axis] + (1,) + a.shape[axis + 1 :], a
    if flat.shape[axis] == 0:
        raise trace_error(f"{name} of an empty axis", op=name, fix="give an axis of size > 0")
    out = _v.emit_array(name, [flat], axis=axis, dtype="int32")
    return _v.reshape(out, kept) if keepdims else out


def argmax(a: Any, axis: Any = None, keepdims: bool = False) -> TracedArray:
    """The int32 index of the (first) largest element along ``axis`` (of all, flattened)."""
    return _arg("argmax", a, axis, keepdims)


def argmin(a: Any, axis: Any = None, keepdims: bool = False) -> TracedArray:
    """The int32 index of the (first) smallest element along ``axis`` (of all, flattened)."""
    return _arg("argmin", a, axis, keepdims)


def _scan(name: str, a: Any, axis: Any, dtype: Any) -> TracedArray:
    a = _v.asarray(a)
    if axis is None:
        a, axis = _v.reshape(a, (-1,)), 0
    (axis,) = _v.normalize_axes(axis, a.ndim)
    if dtype is not None:
        out = canonical(dtype)
        if out == "bool":
            raise trace_error(f"{name} into bool is not supported", op=name, fix="drop dtype=")
    else:
        out = "int32" if a.type.dtype == "bool" else a.type.dtype
    return _v.emit_array(name, [_v.astype(a, out)], axis=axis, reverse=False)


def cumsum(a: Any, axis: Any = None, dtype: Any = None) -> TracedArray:
    """Running sums along ``axis`` (of the flattened array by default); bools count in int32."""
    return _scan("cumsum", a, axis, dtype)


def cumprod(a: Any, axis: Any = None, dtype: Any = None) -> TracedArray:
    """Running products along ``axis`` (of the flattened array by default)."""
    return _scan("cumprod", a, axis, dtype)


def prod(a: Any, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> TracedArray:
    """The product over ``axis``; bools and narrow ints multiply as 32-bit, as in jnp.prod."""
    return _v.reduction("reduce_prod", _v.asarray(a, dtype), axis, keepdims)


def _sorted(a: Any, axis: int, with_indices: bool) -> tuple[TracedArray, ...]:
    a = _v.asarray(a)
    (axis,) = _v.normalize_axes(axis, a.ndim)
    operands = [a]
    if with_indices:
        t = ArrayType(a.shape, "int32")
        operands.append(_v.emit_array("iota", [], type=t, dimension=axis))
    return emit(TracedArray, "sort", operands, {"dimension": axis, "num_keys": 1})


def sort(a: Any, axis: int = -1) -> TracedArray:
    """``a`` sorted ascending along ``axis`` (NaNs last, ``-0.0`` before ``0.0``)."""
    return _sorted(a, axis, with_indices=False)[0]


def argsort(a: Any, axis: int = -1) -> TracedArray:
    """The int32 indices that sort ``a`` along ``axis``, stable."""
    return _sorted(a, axis, with_indices=True)[1]
