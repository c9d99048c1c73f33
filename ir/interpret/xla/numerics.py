"""How XLA computes numbers, written with numpy, so the interpreter matches XLA bit for bit.

numpy and XLA (on CPU, the backend minipallas compiles for) differ in these places; each
function here does what XLA does (values read off XLA on CPU, jaxlib 0.10.2):

- bfloat16 and float16 math is computed in float32 and rounded once to the dtype.
- XLA on CPU runs float math with subnormals flushed to zero (FTZ/DAZ): arithmetic
  (``add sub mul div pow max min``, ``exp log sqrt rsqrt``, comparisons, reductions, ``dot``,
  accumulation, float32 -> bool) sees a subnormal operand as a zero of the same sign and
  turns a subnormal result into one. Data movement, ``neg``/``abs``, ``sin``/``cos``/``tanh``,
  ``select`` and the other conversions keep subnormals, as XLA's do; ``rem`` is ``fmod`` but
  a subnormal divisor counts as zero (giving NaN).
- Integer ``div`` and ``rem`` where C traps, and integer ``pow``: as ``ir/opset/meanings.py``
  says, for every path.
- Float ``max``/``min`` propagate NaN and order -0.0 below +0.0.
- ``convert`` float -> int truncates, saturates at the integer range and maps NaN to 0;
  number -> bool is ``x != 0``; bool -> number is 0 or 1; int -> int wraps. Conversions to a
  float dtype (and the rounding of bf16/f16 results) are ``ir/conversions.py``'s own code, so
  they do not change with numpy's or ml_dtypes' version.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.conversions import int_to_float, round_float
from minipallas.ir.opset.meanings import numpy_div_rem, numpy_pow

LOW_PRECISION = ("bfloat16", "float16")
F32 = np.dtype(np.float32)
_TINY = float(np.finfo(np.float32).tiny)  # the smallest normal float32


def widen(x: Any, dtype: str) -> Any:
    """bfloat16/float16 values as float32 (exact); other values unchanged."""
    return round_float(x, "float32") if dtype in LOW_PRECISION else x


def flush(x: Any) -> Any:
    """float32 subnormals replaced by a zero of the same sign (XLA's FTZ/DAZ)."""
    if np.ndim(x) == 0:
        f = float(x)
        return F32.type(math.copysign(0.0, f)) if 0 < abs(f) < _TINY else x
    magnitude = np.abs(x)
    tiny = (magnitude < _TINY) & (magnitude > 0)
    return np.where(tiny, np.copysign(F32.type(0), x), x) if tiny.any() else x


def float_math(fn: Callable[..., Any], dtype: str, *xs: Any, flushes: bool = True) -> Any:
    """``fn`` on float values of ``dtype``, computed in float32 and rounded once; with
    ``flushes``, subnormal operands and results are zeroed as XLA's arithmetic does."""
    low = dtype in LOW_PRECISION
    if low:
        xs = tuple(widen(x, dtype) for x in xs)
    if flushes:
        out = flush(fn(*(flush(x) for x in xs)))
    else:
        out = fn(*xs)
    return round_float(out, dtype) if low else out


def int_div(a: Any, b: Any, dtype: str) -> Any:
    np_dtype = dtypes.to_numpy(dtype)
    return numpy_div_rem("div", np.asarray(a, np_dtype), np.asarray(b, np_dtype))


def int_rem(a: Any, b: Any, dtype: str) -> Any:
    np_dtype = dtypes.to_numpy(dtype)
    return numpy_div_rem("rem", np.asarray(a, np_dtype), np.asarray(b, np_dtype))


def int_pow(a: Any, b: Any, dtype: str) -> Any:
    np_dtype = dtypes.to_numpy(dtype)
    return numpy_pow(np.asarray(a, np_dtype), np.asarray(b, np_dtype))


def float_max(a: Any, b: Any) -> Any:
    return np.where(a == b, np.where(np.signbit(a), b, a), np.maximum(a, b))


def float_min(a: Any, b: Any) -> Any:
    return np.where(a == b, np.where(np.signbit(a), a, b), np.minimum(a, b))


def float_rem(a: Any, b: Any) -> Any:
    """``fmod``, except that a subnormal divisor counts as zero (NaN); nothing is flushed."""
    return np.where(flush(b) == 0, F32.type(np.nan), np.fmod(a, b))


def add(a: Any, b: Any, dtype: str) -> Any:
    """``a + b`` in ``dtype``: integers wrap, floats as XLA's ``add`` (also used to accumulate)."""
    return float_math(np.add, dtype, a, b) if dtypes.is_float(dtype) else np.add(a, b)


def convert(x: Any, src: str, dst: str) -> Any:
    """``x`` (of dtype ``src``) as ``dst``, with XLA's conversion rules."""
    np_dst = dtypes.to_numpy(dst)
    if dst == "bool":
        return np.not_equal(flush(x) if src == "float32" else x, 0)
    if dtypes.is_float(src) and dtypes.is_int(dst):
        info = np.iinfo(np_dst)
        whole = np.trunc(np.asarray(x, np.float64))
        return np.where(np.isnan(whole), 0, np.clip(whole, info.min, info.max)).astype(np_dst)
    if dtypes.is_float(dst) and src != dst:
        return round_float(x, dst) if dtypes.is_float(src) else int_to_float(x, dst)
    return np.asarray(x).astype(np_dst)
