"""``ir/conversions.py`` against XLA's ``convert`` (through ``minipallas.compile``), bit for bit:
every bfloat16 and float16 bit pattern, float32 values at and around every rounding boundary of
both, NaN payloads, and integers where float32 and bfloat16 roundings meet."""

import ml_dtypes
import numpy as np
import pytest

import minipallas as mp
from minipallas.ir import conversions, dtypes

U16 = np.arange(2**16, dtype=np.uint16)
HI = U16.astype(np.uint32)


def _f32_boundaries() -> np.ndarray:
    """Float32 bits just below, at and just above each bf16 and f16 rounding boundary."""
    bf16 = [(HI << 16) | low for low in (0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF)]
    f16 = [(HI << 13) | low for low in (0x0001, 0x0FFF, 0x1000, 0x1001)]
    small = np.arange(2**16, dtype=np.uint32)  # float32 subnormals and the smallest normals
    return np.concatenate([*bf16, *f16, small, small | 0x80000000]).view(np.float32)


def _int32_edges() -> np.ndarray:
    rng = np.random.default_rng(0)
    high = np.arange(-(2**15), 2**15, dtype=np.int64) << 16
    ties = [(high | low).astype(np.int32) for low in (0x0001, 0x8000, 0x8001)]
    limits = np.array([2**31 - 1, -(2**31), 2**24 + 1, 2**24 + 2**16 + 1], np.int32)
    return np.concatenate([*ties, limits, rng.integers(-(2**31), 2**31, 100_000).astype(np.int32)])


INPUTS = {
    "bfloat16": U16.view(ml_dtypes.bfloat16),
    "float16": U16.view(np.float16),
    "float32": _f32_boundaries(),
    "int32": _int32_edges(),
    "uint32": np.concatenate([_int32_edges().view(np.uint32), np.uint32([2**32 - 1])]),
    "int8": np.arange(-128, 128).astype(np.int8),
    "bool": np.array([True, False]),
}
CASES = [(src, dst) for src in INPUTS for dst in ("float32", "bfloat16", "float16") if src != dst]


def _convert_program(src: str, dst: str, n: int) -> mp.Function:
    short = dtypes.SHORT
    return mp.parse(
        f"func @f(%x: {short[src]}[{n}]) -> ({short[dst]}[{n}]) {{\n"
        f"  %y = convert %x : {short[dst]}[{n}]\n  return %y\n}}"
    )


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view({2: np.uint16, 4: np.uint32}[a.dtype.itemsize])


@pytest.mark.parametrize(("src", "dst"), CASES, ids=[f"{s}->{d}" for s, d in CASES])
def test_conversion_is_xlas_bit_for_bit(src, dst):
    x = INPUTS[src]
    fn = _convert_program(src, dst, x.size)
    np.testing.assert_array_equal(_bits(mp.interpret(fn, x)[0]), _bits(mp.compile(fn)(x)[0]))


def test_int_to_bfloat16_rounds_through_float32():
    x = np.int32([2**24 + 2**16 + 1])  # float32: 2**24 + 2**16, a bf16 tie, so 2**24
    assert conversions.int_to_float(x, "bfloat16").astype(np.float64)[0] == 2.0**24
    assert float(conversions.to_dtype(float(x[0]), "bfloat16")) == 2**24 + 2**17  # once


def test_python_floats_round_once_ties_to_even_and_overflow_to_inf():
    values = [1 + 2**-8, 1 + 3 * 2**-8, 65520.0, 65519.0, 2.0**-25, 2.0**-24 * 1.5, -0.0, 1e300]
    f16 = conversions.to_dtype(values, "float16")
    expected = [1 + 2**-8, 1 + 3 * 2**-8, np.inf, 65504.0, 0.0, 2.0**-23, -0.0, np.inf]
    assert [float(v) for v in f16.astype(np.float64)] == expected
    assert np.signbit(f16[6])
    bf16 = conversions.to_dtype(values[:2], "bfloat16").astype(np.float64)
    assert list(bf16) == [1.0, 1 + 2**-6]


def test_nans_keep_sign_and_become_quiet():
    signalling = np.uint32([0x7F800001, 0xFF812345]).view(np.float32)
    np.testing.assert_array_equal(
        _bits(conversions.round_float(signalling, "bfloat16")), np.uint16([0x7FC0, 0xFFC0])
    )
    np.testing.assert_array_equal(
        _bits(conversions.round_float(signalling, "float16")), np.uint16([0x7E00, 0xFE09])
    )
    kept = np.uint16([0x7F81]).view(ml_dtypes.bfloat16)  # bf16 -> f32 keeps every bit
    np.testing.assert_array_equal(
        _bits(conversions.round_float(kept, "float32")), np.uint32([0x7F810000])
    )


def test_a_value_already_of_the_dtype_is_untouched():
    payload = np.uint16([0x7D01]).view(np.float16)  # a signalling NaN
    assert _bits(conversions.to_dtype(payload, "float16"))[0] == 0x7D01
