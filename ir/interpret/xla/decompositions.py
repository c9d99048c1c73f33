"""Ops that upstream lowers as a formula of other ops (``chlo`` decompositions, jax's own), run
formula step by step with XLA:CPU's arithmetic, so the interpreter matches it.

Each step is an XLA op on the dtype (computed in float32, rounded to the dtype, FTZ/DAZ as
``numerics.float_math``). Where chlo widens a 16-bit operand to float32 for the whole formula
(``sinh``, ``cosh``, ``erf_inv``), so does this, rounding once. In float32, XLA's code
generator fuses a multiply into the add that consumes it (one FMA), and so does ``_mul_add``.

- ``expm1`` in float16: ``special.expm1``'s formula, each step in float16;
- ``exp2(x) = exp(x ln2)``;
  ``asin(x) = 2 atan2(x, 1 + sqrt((1 - x)(1 + x)))``;
- ``sinh``: ``(m + m / (m + 1)) / 2`` with ``m = expm1(x)`` for ``|x| < 1``, else
  ``exp(x - ln2) - exp(-ln2 - x)``; ``cosh(x) = exp(x - ln2) + exp(-ln2 - x)``;
- ``asinh(x) = sign(x) log1p(|x| + x**2 / (1 + sqrt(x**2 + 1)))``, or
  ``sign(x) (log|x| + ln2)`` from ``|x| >= 2**64``;
- ``erf_inv``: Giles' single-precision approximation: ``w = -log1p(-x**2)``, a degree-8
  polynomial in ``w - 2.5`` (``w < 5``) or ``sqrt(w) - 3``, times ``x``; ``+-inf`` at ``+-1``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from minipallas.ir.conversions import round_float
from minipallas.ir.interpret.xla import special, transcendental
from minipallas.ir.interpret.xla.numerics import F32, LOW_PRECISION, float_math, widen
from minipallas.ir.opset.meanings import ERF_INV_COEFFICIENTS

_LN2 = F32.type(np.log(2))


def _step(fn: Callable[..., Any], dtype: str, *xs: Any) -> Any:
    with np.errstate(all="ignore"):
        return float_math(fn, dtype, *xs)


def _const(value: float, dtype: str) -> Any:
    return round_float(np.float32(value), dtype) if dtype in LOW_PRECISION else F32.type(value)


def _mul_add(a: Any, b: Any, c: Any, dtype: str) -> Any:
    """``a * b + c``: one FMA in float32, two rounded steps in 16-bit floats."""
    if dtype == "float32":
        return _step(transcendental.fma, dtype, a, b, c)
    return _step(np.add, dtype, _step(np.multiply, dtype, a, b), c)


def expm1(x: Any, dtype: str) -> Any:
    """float16 runs ``special.expm1``'s formula with each step rounded to float16 (XLA's
    float16 code); the other dtypes the float32 algorithm, rounded once."""
    if dtype != "float16":
        return float_math(special.expm1, dtype, x, flushes=False)
    e = _step(transcendental.exp, dtype, x)
    half = _step(np.multiply, dtype, x, _const(0.5, dtype))
    one = _const(1, dtype)
    near = _step(
        np.multiply, dtype, _step(np.add, dtype, e, one), _step(transcendental.tanh, dtype, half)
    )
    with np.errstate(invalid="ignore"):
        far = np.abs(x) > _const(0.5, dtype)
    return np.where(half == 0, x, np.where(far, _step(np.subtract, dtype, e, one), near))


def exp2(x: Any, dtype: str) -> Any:
    return _step(transcendental.exp, dtype, _step(np.multiply, dtype, x, _const(_LN2, dtype)))


def asin(x: Any, dtype: str) -> Any:
    one = _const(1, dtype)
    square = _step(
        np.multiply, dtype, _step(np.subtract, dtype, one, x), _step(np.add, dtype, x, one)
    )
    root = _step(np.add, dtype, _step(np.sqrt, dtype, square), one)
    half = _step(transcendental.atan2, dtype, x, root)
    return _step(np.add, dtype, half, half)


def asinh(x: Any, dtype: str) -> Any:
    """bfloat16 steps each round to bfloat16; float16 ones run in float32 (XLA keeps float16's
    intermediates wider, so ``x**2`` does not overflow), rounded once."""
    if dtype == "float16":
        return round_float(asinh(widen(x, dtype), "float32"), dtype)
    one = _const(1, dtype)
    magnitude = np.abs(x)
    x2 = _step(np.multiply, dtype, x, x)
    root = _step(np.sqrt, dtype, _step(np.add, dtype, x2, one))
    near = _step(np.divide, dtype, x2, _step(np.add, dtype, root, one))
    small = _step(special.log1p, dtype, _step(np.add, dtype, magnitude, near))
    large = _step(np.add, dtype, _step(transcendental.log, dtype, magnitude), _const(_LN2, dtype))
    with np.errstate(invalid="ignore"):
        chosen = np.where(magnitude >= _const(2.0**64, dtype), large, small)
    sign = np.where(x == 0, x, np.sign(x))  # XLA's sign keeps -0.0
    return _step(np.multiply, dtype, sign, chosen)


def _in_float32(fn: Callable[[Any], Any]) -> Callable[[Any, str], Any]:
    """``fn`` (of float32 values, step by step) on a 16-bit operand widened, rounded once."""

    def apply(x: Any, dtype: str) -> Any:
        out = fn(widen(x, dtype))
        return round_float(out, dtype) if dtype in LOW_PRECISION else out

    apply.__doc__ = fn.__doc__
    return apply


def _halves(x: Any) -> tuple[Any, Any]:
    """``exp(x - ln2)`` and ``exp(-ln2 - x)``."""
    f = "float32"
    up = _step(transcendental.exp, f, _step(np.add, f, x, -_LN2))
    down = _step(transcendental.exp, f, _step(np.subtract, f, -_LN2, x))
    return up, down


@_in_float32
def sinh(x: Any) -> Any:
    f = "float32"
    m = _step(special.expm1, f, x)
    near = _step(np.add, f, m, _step(np.divide, f, m, _step(np.add, f, m, F32.type(1))))
    near = _step(np.multiply, f, near, F32.type(0.5))
    up, down = _halves(x)
    with np.errstate(invalid="ignore"):
        return np.where(np.abs(x) < 1, near, _step(np.subtract, f, up, down))


@_in_float32
def cosh(x: Any) -> Any:
    return _step(np.add, "float32", *_halves(x))


def erf_inv(x: Any, dtype: str) -> Any:
    """A float32 NaN comes back quieted, as XLA returns it; a 16-bit NaN, widened, gives
    log1p's all-ones NaN, as XLA's code for those dtypes does (both measured)."""
    out = _erf_inv(x, dtype)
    if dtype != "float32":
        return out
    return np.where(np.isnan(x), transcendental._quiet(x), out)


@_in_float32
def _erf_inv(x: Any) -> Any:
    f = "float32"
    w = -_step(special.log1p, f, _step(np.multiply, f, x, -x))
    central = w < 5
    t = np.where(
        central,
        _step(np.add, f, w, F32.type(-2.5)),
        _step(np.add, f, _step(np.sqrt, f, w), F32.type(-3)),
    )
    coefficient = [np.where(central, F32.type(a), F32.type(b)) for a, b in ERF_INV_COEFFICIENTS]
    p = coefficient[0]
    for c in coefficient[1:]:
        p = _mul_add(p, t, c, f)
    out = _step(np.multiply, f, p, x)
    return np.where(np.abs(x) == 1, _step(np.multiply, f, x, F32.type(np.inf)), out)
