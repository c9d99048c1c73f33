"""The exact elementwise ops, as XLA defines them: rounding to integers, ``nextafter``, shifts
and bit counts.

- ``round`` rounds half away from zero (``round_even``, numpy's ``rint``, half to even); both
  keep the sign of a zero result and pass infinities and NaN through.
- ``nextafter(x, y)``: the float next to ``x`` toward ``y`` (chlo's formula on the bits): NaN
  if either is NaN (the positive quiet NaN), ``y`` if ``x == y``, the smallest subnormal with
  ``y``'s sign from a zero (its bits tested, so a subnormal is no zero here). ``x == y`` is
  a float comparison, under DAZ for float32.
- Shifts read the amount as unsigned: from the bit width on, every bit is shifted out
  (``shift_right_arithmetic`` leaves copies of the sign bit).
- ``population_count`` counts set bits, ``clz`` leading zero bits (the width for 0).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.interpret.xla.numerics import flush, widen


def round_away(x: Any) -> np.ndarray:
    """Half away from zero; the sign of a zero result kept."""
    whole = np.trunc(x)
    with np.errstate(invalid="ignore"):
        up = np.abs(x - whole) >= 0.5
    return np.copysign(np.where(up, whole + np.sign(x), whole), x)


_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32}


def nextafter(x: Any, y: Any, dtype: str) -> np.ndarray:
    np_dtype = dtypes.to_numpy(dtype)
    x, y = np.asarray(x, np_dtype), np.asarray(y, np_dtype)
    unsigned = _UNSIGNED[np_dtype.itemsize]
    bits = x.view(unsigned)
    wide_x, wide_y = widen(x, dtype), widen(y, dtype)
    with np.errstate(invalid="ignore"):
        away = (wide_x < wide_y) == (wide_x > 0)  # away from zero: the magnitude grows
        either_nan = np.isnan(wide_x) | np.isnan(wide_y)
    step = np.where(away, unsigned(1), unsigned(-1 & (2 ** (8 * np_dtype.itemsize) - 1)))
    moved = (bits + step).view(np_dtype)
    sign = unsigned(1 << (8 * np_dtype.itemsize - 1))
    tiniest = ((y.view(unsigned) & sign) | unsigned(1)).view(np_dtype)
    out = np.where(wide_x == 0, tiniest, moved)
    out = np.where(flush(wide_x) == flush(wide_y), y, out)
    return np.where(either_nan, np.asarray(np.nan, np_dtype), out)  # the positive quiet NaN


def _width(dtype: str) -> int:
    return 8 * dtypes.itemsize(dtype)


def _amount(y: Any, dtype: str) -> np.ndarray:
    return np.asarray(y, dtypes.to_numpy(dtype)).view(_UNSIGNED[dtypes.itemsize(dtype)])


def shift_left(x: Any, y: Any, dtype: str) -> np.ndarray:
    amount = _amount(y, dtype)
    inside = amount < _width(dtype)
    shifted = np.left_shift(x, np.where(inside, amount, 0).astype(x.dtype))
    return np.where(inside, shifted, np.zeros_like(x))


def shift_right_logical(x: Any, y: Any, dtype: str) -> np.ndarray:
    amount = _amount(y, dtype)
    inside = amount < _width(dtype)
    raw = np.asarray(x).view(amount.dtype)
    shifted = np.right_shift(raw, np.where(inside, amount, 0).astype(amount.dtype))
    return np.where(inside, shifted, 0).astype(amount.dtype).view(np.asarray(x).dtype)


def shift_right_arithmetic(x: Any, y: Any, dtype: str) -> np.ndarray:
    amount = _amount(y, dtype)
    width = _width(dtype)
    signed = np.asarray(x).view(np.dtype(f"int{width}"))
    clamped = np.minimum(amount, width - 1).astype(signed.dtype)
    return np.right_shift(signed, clamped).view(np.asarray(x).dtype)


def population_count(x: Any, dtype: str) -> np.ndarray:
    raw = np.asarray(x).view(_UNSIGNED[dtypes.itemsize(dtype)])
    count = np.zeros(raw.shape, np.int64)
    for i in range(_width(dtype)):
        count += (raw >> i) & 1
    return count.astype(np.asarray(x).dtype)


def clz(x: Any, dtype: str) -> np.ndarray:
    raw = np.asarray(x).view(_UNSIGNED[dtypes.itemsize(dtype)]).astype(np.int64)
    width = _width(dtype)
    leading = np.full(raw.shape, width, np.int64)
    for i in range(width):  # the highest set bit decides: later (higher) bits overwrite
        leading = np.where((raw >> i) & 1 == 1, width - 1 - i, leading)
    return leading.astype(np.asarray(x).dtype)
