"""``ir/opset/meanings.py``: integer division's and power's meanings, checked against their
definitions in Python integers over every pair of 8-bit operands (and division's 32-bit edges)."""

import numpy as np
import pytest

from minipallas.ir.opset.meanings import numpy_div_rem, numpy_pow


def _defined(name: str, x: int, y: int, dtype: np.dtype) -> int:
    """XLA's answer in Python integers, wrapped into ``dtype``."""
    if y == 0:
        value = -1 if name == "div" else x
    else:
        q = abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)  # toward zero
        value = q if name == "div" else x - q * y
    bits = 8 * dtype.itemsize
    value %= 1 << bits
    if dtype.kind == "i" and value >= 1 << (bits - 1):
        value -= 1 << bits  # INT_MIN / -1 wraps back to INT_MIN
    return value


@pytest.mark.parametrize("name", ["div", "rem"])
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_every_8_bit_pair_is_as_defined(name: str, dtype: str) -> None:
    info = np.iinfo(dtype)
    values = np.arange(info.min, info.max + 1)
    x, y = (a.ravel() for a in np.meshgrid(values, values))
    got = numpy_div_rem(name, x.astype(dtype), y.astype(dtype))
    want = [_defined(name, int(a), int(b), np.dtype(dtype)) for a, b in zip(x, y, strict=True)]
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, np.array(want, dtype))


@pytest.mark.parametrize("name", ["div", "rem"])
@pytest.mark.parametrize("dtype", ["int32", "uint32"])
def test_32_bit_edges_are_as_defined(name: str, dtype: str) -> None:
    info = np.iinfo(dtype)
    negative = {-1, -2, -7} if info.min < 0 else set()
    edges = sorted({info.min, info.min + 1, 0, 1, 2, 3, 7, info.max - 1, info.max} | negative)
    x, y = (a.ravel() for a in np.meshgrid(edges, edges))
    got = numpy_div_rem(name, x.astype(dtype), y.astype(dtype))
    want = [_defined(name, int(a), int(b), np.dtype(dtype)) for a, b in zip(x, y, strict=True)]
    np.testing.assert_array_equal(got, np.array(want, dtype))


def _power(x: int, y: int, dtype: np.dtype) -> int:
    """XLA's integer power in Python integers: the exponent's low 6 bits, wrapped into
    ``dtype``; an exponent negative when its bits read as signed gives 1 for base 1, else 0."""
    bits = 8 * dtype.itemsize
    if y % (1 << bits) >= 1 << (bits - 1):
        return 1 if x == 1 else 0
    value = pow(x, y & 63, 1 << bits)
    if dtype.kind == "i" and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_every_8_bit_power_is_as_defined(dtype: str) -> None:
    info = np.iinfo(dtype)
    values = np.arange(info.min, info.max + 1)
    x, y = (a.ravel() for a in np.meshgrid(values, values))
    got = numpy_pow(x.astype(dtype), y.astype(dtype))
    want = [_power(int(a), int(b), np.dtype(dtype)) for a, b in zip(x, y, strict=True)]
    np.testing.assert_array_equal(got, np.array(want, dtype))
