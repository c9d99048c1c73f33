"""Number conversions, computed bit by bit by minipallas's own code to XLA:CPU's semantics.

numpy and ml_dtypes cast with rules of their own that change between versions (ml_dtypes 0.7
rounds int32 -> bfloat16 once; 0.5 rounded it through float32, as XLA does). The interpreter,
constants and random inputs must not move with them, so every conversion that can round is
computed here, with IEEE-exact float64 steps only (``frexp``, ``ldexp``, ``rint``, scaling by
powers of two), and the last step re-encodes a value the target holds exactly. What XLA does
(measured against ``compile`` at jaxlib 0.10.2, exhaustively on bf16/f16 bit patterns;
``tests/ir/test_conversions.py``):

- float -> narrower float rounds once to nearest, ties to even, overflowing to infinity;
  subnormals of the target are kept (a conversion does not flush). A NaN keeps its sign and
  becomes quiet; to bfloat16 its payload is dropped (``0x7fc0``), to float16/float32 its top
  bits are kept, and bfloat16 -> float32 keeps every bit (signalling NaNs too).
- int -> float goes through float32: rounded once to float32, then to the target, so
  int32 -> bfloat16 can round twice (``2**24 + 2**16 + 1`` becomes ``2**24``, not
  ``2**24 + 2**17``).
- A Python or float64 value becomes a float dtype by rounding once from its exact value.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from minipallas.ir import dtypes

# (explicit mantissa bits, smallest normal exponent, largest exponent) of each float dtype
_FORMATS = {"float32": (23, -126, 127), "bfloat16": (7, -126, 127), "float16": (10, -14, 15)}
_SIGNIFICAND_BITS = {name: fmt[0] for name, fmt in _FORMATS.items()}


def round_float(x: Any, dst: str) -> np.ndarray:
    """Float values (any numpy float dtype, or Python numbers) rounded once to float dtype
    ``dst``; NaNs as ``_quiet_nan`` says, except that bfloat16 -> float32 keeps every bit."""
    source = np.asarray(x)
    if source.dtype == dtypes.to_numpy(dst):
        return source  # nothing to round; NaN payloads stay
    if source.dtype == dtypes.to_numpy("bfloat16"):  # widened by its bits: exact
        source = (source.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        if dst == "float32":
            return source  # NaNs too keep every bit
    elif source.dtype.kind != "f":
        source = source.astype(np.float64)  # Python ints and bools: exact below 2**53
    with np.errstate(invalid="ignore"):  # a signalling NaN widens (to a NaN) too
        exact = source.astype(np.float64)  # float16/32/64 widen to float64 exactly
    nan = np.isnan(exact)
    out = _encode(np.where(nan, 0.0, _round_value(exact, *_FORMATS[dst])), dst)
    if nan.any():
        out = np.where(nan, _quiet_nan(source, dst), out)
    return out


def _round_value(x: np.ndarray, mantissa: int, emin: int, emax: int) -> np.ndarray:
    """``x`` (float64) to the nearest value with ``mantissa`` fraction bits and exponents in
    ``[emin, emax]`` (subnormals below ``emin``), ties to even; beyond the largest, infinity."""
    _, e = np.frexp(x)  # x = m * 2**e with 0.5 <= |m| < 1, so floor(log2 |x|) = e - 1
    quantum = np.ldexp(1.0, np.maximum(e - 1, emin) - mantissa)
    with np.errstate(invalid="ignore"):
        rounded = np.rint(x / quantum) * quantum  # scaling by a power of two is exact
    largest = (2.0 - 2.0**-mantissa) * 2.0**emax
    return np.where(np.abs(rounded) > largest, np.copysign(np.inf, x), rounded)


def _encode(value: np.ndarray, dst: str) -> np.ndarray:
    """A float64 array whose values ``dst`` holds exactly, as ``dst`` (no rounding happens)."""
    if dst == "bfloat16":
        bits = value.astype(np.float32).view(np.uint32) >> 16  # exact: the low half is zero
        return bits.astype(np.uint16).view(dtypes.to_numpy(dst))
    return value.astype(dtypes.to_numpy(dst))


def _float_bits(x: np.ndarray) -> tuple[np.ndarray, int]:
    """The bits of a float array (as uint64) and its significand width."""
    name = dtypes.canonicalize(x.dtype) if x.dtype != np.float64 else "float64"
    width = {"float64": 52, **_SIGNIFICAND_BITS}[name]
    unsigned = {8: np.uint64, 4: np.uint32, 2: np.uint16}[x.dtype.itemsize]
    return x.view(unsigned).astype(np.uint64), width


def _quiet_nan(source: np.ndarray, dst: str) -> np.ndarray:
    """For NaN elements of ``source``: ``dst``'s quiet NaN of the same sign, as XLA converts
    them: to bfloat16 the payload is dropped; to float16 and float32 its top bits are kept."""
    bits, width = _float_bits(source)
    total = source.dtype.itemsize * 8
    sign = bits >> np.uint64(total - 1)
    payload = bits & np.uint64((1 << width) - 1) if dst != "bfloat16" else np.uint64(0)
    out_width = _SIGNIFICAND_BITS[dst]
    out_total = dtypes.itemsize(dst) * 8
    exponent_ones = ((1 << (out_total - 1 - out_width)) - 1) << out_width
    if width >= out_width:
        kept = payload >> np.uint64(width - out_width)
    else:
        kept = payload << np.uint64(out_width - width)
    quiet = np.uint64(1 << (out_width - 1))
    word = (sign << np.uint64(out_total - 1)) | np.uint64(exponent_ones) | kept | quiet
    unsigned = {4: np.uint32, 2: np.uint16}[dtypes.itemsize(dst)]
    return word.astype(unsigned).view(dtypes.to_numpy(dst))


def to_dtype(value: Any, dst: str) -> np.ndarray:
    """A constant (Python scalars, nested lists or numpy arrays of any dtype) as ``dst``: floats
    rounded once from their exact value, integers wrapped, anything -> bool as ``!= 0``."""
    array = np.asarray(value)
    if dtypes.is_float(dst):
        return round_float(array, dst)
    if dst == "bool":  # by value: a bool array's byte may be any nonzero value (``Literal``)
        return (array.view(np.uint8) if array.dtype == np.bool_ else array) != 0
    return array.astype(dtypes.to_numpy(dst))


def canonical_bools(array: np.ndarray) -> np.ndarray:
    """A bool array whose bytes are all 0 or 1: ``array`` itself when they are, else a copy.

    numpy lets a bool hold any byte (``view(bool)`` of 0xFF), equal to True but other bits;
    XLA passes such bytes through moves and mis-orders them in ``argmax``. Every way into a
    program (the interpreter, a compiled program) reads bools by value through this."""
    raw = array.view(np.uint8)
    return array if not raw.size or raw.max() <= 1 else raw != 0


def int_to_float(x: Any, dst: str) -> np.ndarray:
    """Integers (or bools) as float dtype ``dst`` the way XLA converts them: rounded to
    float32 first, then to ``dst``."""
    return round_float(round_float(np.asarray(x).astype(np.float64), "float32"), dst)
