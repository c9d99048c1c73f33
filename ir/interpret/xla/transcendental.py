"""XLA:CPU's elementwise float math, step by step in float32, so the interpreter matches it.

numpy's ``exp``/``log``/``tanh`` are not what XLA runs: XLA:CPU (jaxlib 0.10.2, x86-64) replaces
them with its own range reduction and polynomials, emitted as LLVM IR and compiled with FMA
contraction, under FTZ/DAZ. Each function below does the same float32 operations in the same
order (read off XLA's optimized IR and the machine code it becomes), so results agree bit for
bit:

- ``exp``: clamp to [-87.8, 88.8]; ``n = floor(x log2(e) + 1/2)`` clamped to [-127, 127];
  ``r = x - n ln2`` in two parts; a degree-7 polynomial in Horner form; times ``2**n`` built
  from the exponent bits.
- ``log``: Cephes' algorithm as Eigen writes it: mantissa in [sqrt(1/2), sqrt(2)), three
  interleaved polynomials in ``x**3``, ``ln2`` added in two parts; zero gives -inf, +inf gives
  +inf and anything else outside the domain (negatives, NaN) the NaN with every bit set.
- ``tanh``: Eigen's rational approximation: ``x`` clamped to +-7.9988, an odd degree-13
  polynomial over an even degree-6 one; ``x`` itself below 4e-4, +-1 from 20 on.
- ``rsqrt``: the CPU's ``rsqrtss`` estimate refined by one Newton step. The estimate is a
  vendor's undocumented table, so it is modelled (``_rsqrt_estimate``) and rsqrt is within 2
  ulps of XLA, not bit for bit (5% of float32 values differ; bfloat16/float16 none).
- ``sin``, ``cos``, ``pow``: XLA:CPU calls the C library's ``sinf``/``cosf``/``powf`` (its
  code has them as external symbols, bound to the process's libm), so these call the same
  functions through ctypes. So do ``tan`` (``tanf``), ``atan`` (``atanf``; float32 ``atan``
  on arrays of some lengths is within 5 ulps: XLA:CPU's vectorized atan is not glibc's),
  ``cbrt`` (``cbrtf``, with the value glibc gives every subnormal under DAZ) and ``atan2``
  (``atan2f``, modelling what DAZ makes of a subnormal divisor). ``erf``, ``expm1``,
  ``log1p`` are in ``special``, formulas of these ops (``asin``, ``sinh``, ``asinh``,
  ``erf_inv``, ...) in ``decompositions``.

XLA:CPU's ``exp`` and ``log`` on a one-dimensional array of fewer than 16 elements whose
length modulo 8 is 3, 5, 6 or 7 may call libm's ``expf``/``logf`` for the last elements,
depending on what the op is fused with; those elements can differ by up to 5 ulps (exp) or
1 ulp (log; its NaNs keep their bits there, not all ones, and subnormals are not flushed).

Every multiply-add XLA contracts into an FMA is ``fma`` here (exact: the float64 sum rounded to
odd, then to float32), and every step flushes subnormal results, as the CPU does under
FTZ/DAZ. Plain float32 numpy operations are IEEE's, so they match the other steps.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from minipallas.ir.interpret.xla.numerics import F32, flush

# The most float32 ulps each op's interpreter value may differ from XLA:CPU's (measured; see the
# docstring and bench/numerics/transcendental_exactness.py). Ops not listed are bit for bit. The
# numerics envelope (difftest) lets a compiled value stray this far from the interpreter's.
ULP_BOUND: dict[str, int] = {
    "exp": 5,  # short 1-D tails through libm's expf
    "log": 1,  # short 1-D tails through libm's logf
    "rsqrt": 2,  # the modelled rsqrtss estimate
    # float32 arrays of some lengths (not a multiple of 8, or under 64 elements) run XLA's
    # vectorized atan, not libm's atanf, in some lanes; bfloat16/float16 are bit for bit
    "atan": 5,
    # float32: the same lengths (log1p's libm tails); float16: XLA's float16 rounding
    "asinh": 1,
}


def _const(bits: int) -> np.float32:
    """The float32 constant with these bits (XLA's IR spells its constants as bits)."""
    return np.uint32(bits).view(np.float32)


def _f32(x: Any) -> np.ndarray:
    return np.asarray(x, dtype=F32)


def fma(a: Any, b: Any, c: Any) -> np.ndarray:
    """``a * b + c`` rounded once to float32, with FTZ.

    The product of two float32 values is exact in float64; the float64 sum is made
    round-to-odd (its error, from TwoSum, nudges an even last bit), and rounding a
    round-to-odd float64 to float32 is the correctly rounded result."""
    with np.errstate(invalid="ignore", over="ignore"):  # signalling NaNs widen quietly
        a64, b64, c64 = (_f32(v).astype(np.float64) for v in (a, b, c))
        p = a64 * b64
        s = p + c64
        z = s - p
        err = (p - (s - z)) + (c64 - z)
        bits = s.view(np.int64)
        nudge = (err != 0) & (bits & 1 == 0) & np.isfinite(s)
        if nudge.any():
            step = np.where(np.signbit(err) == np.signbit(s), 1, -1)
            s = np.where(nudge, (bits + step).view(np.float64), s)
        return flush(s.astype(F32))


def _mul(a: Any, b: Any) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        return flush(_f32(a) * _f32(b))


def _add(a: Any, b: Any) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        return flush(_f32(a) + _f32(b))


def _horner(x: np.ndarray, first: np.float32, coefficients: tuple[int, ...]) -> np.ndarray:
    """``(...(first * x + c0) * x + c1)...``, one FMA per coefficient (given as bits)."""
    acc = first
    for c in coefficients:
        acc = fma(acc, x, _const(c))
    return acc


_EXP_POLY = (0x3AB743CE, 0x3C088908, 0x3D2AA9C1, 0x3E2AAAAA, 0x3F000000)


def exp(x: Any) -> np.ndarray:
    """XLA:CPU's float32 ``exp``."""
    x = _f32(x)
    x = np.where(x < F32.type(-87.8), F32.type(-87.8), x)
    x = np.where(x > F32.type(88.8), F32.type(88.8), x)
    n = np.floor(fma(x, _const(0x3FB8AA3B), F32.type(0.5)))
    n = np.clip(n, F32.type(-127), F32.type(127))  # NaN stays NaN
    r = fma(n, -_const(0x3F318000), x)  # the constant negated: a NaN keeps its sign
    r = fma(n, -_const(0xB95E8083), r)
    p = _horner(r, _const(0x39506967), _EXP_POLY)
    q = _add(fma(p, _mul(r, r), r), F32.type(1))
    whole = np.where(np.isnan(n), 0, n).astype(np.int32)  # NaN lanes: a scale of 1
    scale = ((whole + 127) << 23).view(np.float32)
    return _mul(q, flush(scale))


_LOG_NEG_INF, _LOG_POS_INF, _ALL_ONES = 0xFF800000, 0x7F800000, 0xFFFFFFFF


def log(x: Any) -> np.ndarray:
    """XLA:CPU's float32 ``log`` (its special values bit for bit, NaNs included)."""
    x = _f32(x)
    with np.errstate(invalid="ignore"):
        invalid = ~(x > 0)  # negatives, zeros and NaN
    zero, inf = x == 0, x == np.inf
    clamped = np.where(x > _const(0x00800000), x, _const(0x00800000))  # NaN: smallest normal
    bits = clamped.view(np.uint32)
    e = _add((bits >> 23).astype(np.int32) - 127, F32.type(1))
    mantissa = ((bits & np.uint32(0x807FFFFF)) | np.uint32(0x3F000000)).view(np.float32)
    low = mantissa < _const(0x3F3504F3)
    m = _add(_add(mantissa, F32.type(-1)), np.where(low, mantissa, F32.type(0)))
    e = _add(e, np.where(low, F32.type(-1), F32.type(0)))
    m2 = _mul(m, m)
    m3 = _mul(m2, m)
    y0 = _horner(m, _const(0x3D9021BB), (0xBDEBD1B8, 0x3DEF251A))
    y1 = _horner(m, _const(0xBDFE5D4F), (0x3E11E9BF, 0xBE2AAE50))
    y2 = _horner(m, _const(0x3E4CCEAC), (0xBE7FFFFC, 0x3EAAAAAA))
    y = fma(fma(fma(y0, m3, y1), m3, y2), m3, _mul(e, _const(0xB95E8083)))
    y = fma(e, _const(0x3F318000), _add(fma(m2, F32.type(-0.5), m), y))
    out = np.where(invalid, np.uint32(_ALL_ONES), y.view(np.uint32))
    out = np.where(zero, np.uint32(_LOG_NEG_INF), np.where(inf, np.uint32(_LOG_POS_INF), out))
    return out.view(np.float32)


_TANH_ODD = (0x2A61337E, 0xAEBD37FF, 0x335C0041, 0x3779434A, 0x3A270DED, 0x3BA059DC)
_TANH_EVEN = (0x38F895D6, 0x3B14AA05, 0x3BA059DD)


def tanh(x: Any) -> np.ndarray:
    """XLA:CPU's float32 ``tanh`` (Eigen's fast rational approximation)."""
    x = _f32(x)
    bound = _const(0x40FFF644)
    clamped = np.where(x < -bound, -bound, np.where(x > bound, bound, x))
    x2 = _mul(clamped, clamped)
    p = _mul(clamped, _horner(x2, _const(0xA59F25C0), _TANH_ODD))
    q = _horner(x2, _const(0x35A0D3D8), _TANH_EVEN)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = flush(p / q)
    magnitude = np.abs(x)
    out = np.where(magnitude < F32.type(4e-4), x, ratio)
    return np.where(magnitude >= F32.type(20), np.copysign(F32.type(1), x), out)


def _rsqrt_estimate(x: np.ndarray) -> np.ndarray:
    """A stand-in for the CPU's ``rsqrtss`` (12 significant bits): ``1/sqrt`` a quarter of the
    way into the input's 12-bit interval, rounded to 12 bits. The real table is the vendor's
    and undocumented (on AMD Zen, 8192 entries indexed by the exponent's parity and the top 12
    mantissa bits; Intel's differ), so rsqrt is the one op here that is not bit-exact."""
    interval = (x.view(np.uint32) & np.uint32(0xFFFFF800)).view(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        interval = interval.astype(np.float64)
        mantissa, exponent = np.frexp(1 / np.sqrt(interval * (1 + 2.0**-14)))
    return np.ldexp(np.rint(mantissa * 2**13) / 2**13, exponent).astype(F32)


def rsqrt(x: Any) -> np.ndarray:
    """XLA:CPU's float32 ``rsqrt``: one Newton step from the hardware estimate, for positive
    normal ``x``; the estimate itself elsewhere (+-inf at zeros, 0 at +inf, NaN below zero).
    Within 2 ulps of XLA (the estimate is modelled, see ``_rsqrt_estimate``)."""
    x = _f32(x)
    y = _rsqrt_estimate(x)
    step = fma(_mul(y, F32.type(-0.5)), fma(_mul(x, y), y, F32.type(-1)), y)
    with np.errstate(invalid="ignore"):
        normal = x > 0
        special = np.where(
            x < 0,
            _const(0xFFC00000),
            np.where(x == 0, np.copysign(F32.type(np.inf), x), F32.type(0)),
        )
    out = np.where(normal & np.isfinite(x), step, special)
    return np.where(np.isnan(x), _quiet(x), out)


def _signalling(x: np.ndarray) -> np.ndarray:
    return np.isnan(x) & (x.view(np.uint32) & np.uint32(0x00400000) == 0)


def _quiet(x: np.ndarray) -> np.ndarray:
    """NaNs made quiet, as any float32 instruction passes them on (sign and payload kept)."""
    return (x.view(np.uint32) | np.uint32(0x00400000)).view(np.float32)


@functools.cache
def _libm(name: str, arity: int) -> Callable[..., Any]:
    """The C library's float function ``name``, elementwise over numpy arrays."""
    function = getattr(ctypes.CDLL(ctypes.util.find_library("m")), name)
    function.restype, function.argtypes = ctypes.c_float, [ctypes.c_float] * arity
    elementwise = np.frompyfunc(function, arity, 1)

    def apply(*xs: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):  # libm raises the flags; numpy would warn of them
            return np.asarray(elementwise(*xs), dtype=F32)

    return apply


def sin(x: Any) -> np.ndarray:
    """XLA:CPU calls the C library's ``sinf``; so does this."""
    return _libm("sinf", 1)(_f32(x))


def cos(x: Any) -> np.ndarray:
    """XLA:CPU calls the C library's ``cosf``; so does this."""
    return _libm("cosf", 1)(_f32(x))


def tan(x: Any) -> np.ndarray:
    """XLA:CPU calls the C library's ``tanf``; so does this."""
    return _libm("tanf", 1)(_f32(x))


def atan(x: Any) -> np.ndarray:
    """XLA:CPU folds chlo's ``atan2(x, 1)`` into a call of the C library's ``atanf``."""
    return _libm("atanf", 1)(_f32(x))


def _subnormal(x: np.ndarray) -> np.ndarray:
    magnitude = np.abs(x)
    return (magnitude > 0) & (magnitude < _const(0x00800000))


# glibc's cbrtf of any subnormal under DAZ: its scaling of the operand by 2**k gives zero
_CBRT_OF_SUBNORMAL = 0xA6214518


def cbrt(x: Any) -> np.ndarray:
    """XLA:CPU calls the C library's ``cbrtf`` under DAZ; so does this, with the one value
    DAZ makes of every subnormal operand."""
    x = _f32(x)
    return np.where(_subnormal(x), _const(_CBRT_OF_SUBNORMAL), _libm("cbrtf", 1)(x))


def atan2(y: Any, x: Any) -> np.ndarray:
    """XLA:CPU calls the C library's ``atan2f`` under FTZ/DAZ: ``y`` counts as flushed, the
    result is flushed, except ``atan2(y, 1)``, which glibc answers with ``atanf(y)`` (so a
    subnormal ``y`` comes back as it is). A subnormal ``x`` keeps its bits for glibc's tests,
    but its quotients are zero: the result is +-pi/2 (rounded up for ``x > 0``, down for
    ``x < 0``), or NaN (negative for ``y < 0 < x``) if ``y`` is subnormal too."""
    y, x = _f32(y), _f32(x)
    out = flush(_libm("atan2f", 2)(flush(y), x))
    out = np.where(x == 1, atan(y), out)  # glibc's atan2f(y, 1) is atanf(y): y kept as it is
    tiny = _subnormal(x) & np.isfinite(y) & (y != 0)
    if not tiny.any():
        return out
    half_pi = np.where(x > 0, _const(0x3FC90FDB), _const(0x3FC90FDA))
    nan = np.where(np.signbit(y) & (x > 0), _const(0xFFC00000), _const(0x7FC00000))
    near_axis = np.where(_subnormal(y), nan, np.copysign(half_pi, y))
    return np.where(tiny, near_axis, out)


def pow(x: Any, y: Any) -> np.ndarray:  # noqa: A001 - the op's name
    """XLA:CPU calls the C library's ``powf`` on the operands as they are, under FTZ/DAZ.

    A subnormal result is flushed. A subnormal base is the one place DAZ reaches inside
    glibc's ``powf``: it normalizes such a base by multiplying it by ``2**23``, which DAZ turns
    into zero, and goes on as if the base were ``2**-150``; so here the magnitude is
    ``2**(-150 y)`` (rounded once) and the sign, or NaN, is ``powf(+-1, y)``'s."""
    x, y = _f32(x), _f32(y)
    out = flush(_libm("powf", 2)(x, y))
    # ctypes passes a signalling NaN on quieted, and powf gives 1 for x**0 and 1**y unless
    # that operand signals; then the quieted NaN
    out = np.where(_signalling(x) & (y == 0), _quiet(x), out)
    out = np.where(_signalling(y) & (x == 1), _quiet(y), out)
    magnitude = np.abs(x)
    daz = (magnitude > 0) & (magnitude < _const(0x00800000)) & np.isfinite(y) & (y != 0)
    if not daz.any():
        return out
    with np.errstate(over="ignore", invalid="ignore"):
        scaled = flush(np.exp2(-150 * y[daz].astype(np.float64)).astype(F32))
        sign = _libm("powf", 2)(np.copysign(F32.type(1), x[daz]), y[daz])
        out[daz] = np.where(np.isnan(sign), sign, np.copysign(scaled, sign))
    return out
