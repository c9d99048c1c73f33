"""Pure array ops in the interpreter, each against an independent numpy or Python computation.

Expected values for XLA-specific corners (integer division by zero, integer pow, signed zeros in
max/min, saturating conversions) were read off XLA on CPU (jaxlib 0.10.2) and are written out.
"""

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from interp_build import arr, assert_same, build, run_op

from minipallas import InterpretError, interpret

BF16 = ml_dtypes.bfloat16
I32_MIN, I32_MAX = -(2**31), 2**31 - 1


def wrap(values, dtype):
    """Python ints reduced modulo 2**bits into ``dtype`` (two's complement)."""
    info = np.iinfo(dtype)
    span = 2 ** (8 * np.dtype(dtype).itemsize)
    return np.array([(v - info.min) % span + info.min for v in values], dtype)


# ---- integer arithmetic ----


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.uint32])
@pytest.mark.parametrize(
    "name, fn",
    [("add", lambda a, b: a + b), ("sub", lambda a, b: a - b), ("mul", lambda a, b: a * b)],
)
def test_integer_arithmetic_wraps(dtype, name, fn):
    info = np.iinfo(dtype)
    a = [info.max, info.min, 7, info.max, 3]
    b = [1, info.max if info.min == 0 else -1, 9, info.max, 0]
    out = run_op(name, np.array(a, dtype), np.array(b, dtype))
    assert_same(out, wrap([fn(x, y) for x, y in zip(a, b, strict=True)], dtype))


def test_int32_div_and_rem_follow_xla():
    a = np.array([7, -7, 7, -7, 5, I32_MIN, I32_MIN, 3, 0, -5], np.int32)
    b = np.array([2, 2, -2, -2, 0, -1, 0, 0, 5, 7], np.int32)
    assert_same(run_op("div", a, b), np.array([3, -3, -3, 3, -1, I32_MIN, -1, -1, 0, 0], np.int32))
    assert_same(run_op("rem", a, b), np.array([1, -1, 1, -1, 5, 0, I32_MIN, 3, 0, -5], np.int32))


def test_unsigned_and_int8_division_corners():
    assert_same(
        run_op("div", np.array([7, 5], np.uint32), np.array([2, 0], np.uint32)),
        np.array([3, 2**32 - 1], np.uint32),
    )
    assert_same(
        run_op("rem", np.array([7, 5], np.uint32), np.array([2, 0], np.uint32)),
        np.array([1, 5], np.uint32),
    )
    assert_same(
        run_op("div", np.array([-128, -128], np.int8), np.array([-1, 0], np.int8)),
        np.array([-128, -1], np.int8),
    )
    assert_same(
        run_op("rem", np.array([-128, -128], np.int8), np.array([-1, 0], np.int8)),
        np.array([0, -128], np.int8),
    )


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(I32_MIN, I32_MAX), st.integers(I32_MIN, I32_MAX)),
        min_size=1,
        max_size=8,
    )
)
def test_int_division_truncates_toward_zero(pairs):
    a = np.array([p[0] for p in pairs], np.int32)
    b = np.array([p[1] for p in pairs], np.int32)

    def q(x, y):
        return (
            -1 if y == 0 else int(math.copysign(abs(x) // abs(y), 1 if (x < 0) == (y < 0) else -1))
        )

    def r(x, y):
        return x if y == 0 else x - q(x, y) * y

    assert_same(run_op("div", a, b), wrap([q(x, y) for x, y in pairs], np.int32))
    assert_same(run_op("rem", a, b), wrap([r(x, y) for x, y in pairs], np.int32))


def test_integer_pow_is_xlas_six_squarings():
    base = np.array([2, 3, -1, 1, 2, 0, -2, 3, -3, 5, 0, -1], np.int32)
    exp = np.array([10, 64, 65, -3, -1, 0, 31, 65, -2, 100, -1, -1], np.int32)
    assert_same(
        run_op("pow", base, exp),
        np.array([1024, 1, -1, 1, 0, 1, I32_MIN, 3, 0, 1530182129, 0, 0], np.int32),
    )
    assert 5**36 % 2**32 == 1530182129  # 100 = 0b1100100: only its low 6 bits (36) count
    assert_same(
        run_op(
            "pow",
            np.array([2, 1, 3, 3], np.uint32),
            np.array([3, 2**31 + 1, 2**31, 2**32 - 1], np.uint32),
        ),
        np.array([8, 1, 0, 0], np.uint32),
    )
    assert_same(
        run_op("pow", np.array([2, 3, -2, 3], np.int8), np.array([7, 5, 7, -1], np.int8)),
        np.array([-128, -13, -128, 0], np.int8),
    )


# ---- floats ----


def test_float_div_rem_pow():
    a = np.array([5.5, -5.5, 5.5, 1.0, np.inf, 1.0, -1.0, 0.0], np.float32)
    b = np.array([2.0, 2.0, -2.0, 0.0, 2.0, 0.0, 0.0, 0.0], np.float32)
    assert_same(
        run_op("rem", a, b),
        np.array([1.5, -1.5, 1.5, np.nan, np.nan, np.nan, np.nan, np.nan], np.float32),
    )
    assert_same(
        run_op("div", a, b),
        np.array([2.75, -2.75, -2.75, np.inf, np.inf, np.inf, -np.inf, np.nan], np.float32),
    )
    assert_same(
        run_op("pow", np.float32([2, 4, -8]), np.float32([10, 0.5, 1 / 3])),
        np.float32([1024, 2, np.nan]),
    )


def test_max_min_propagate_nan_and_order_signed_zeros():
    a = np.array([-0.0, 0.0, np.nan, 1.0, -0.0, 2.0], np.float32)
    b = np.array([0.0, -0.0, 1.0, np.nan, -0.0, 3.0], np.float32)
    assert_same(run_op("max", a, b), np.array([0.0, 0.0, np.nan, np.nan, -0.0, 3.0], np.float32))
    assert_same(run_op("min", a, b), np.array([-0.0, -0.0, np.nan, np.nan, -0.0, 2.0], np.float32))
    assert_same(
        run_op("max", np.array([-3, 5], np.int8), np.array([2, -9], np.int8)),
        np.array([2, 5], np.int8),
    )
    assert_same(
        run_op("min", np.array([True, False]), np.array([True, True])), np.array([True, False])
    )


def test_bitwise_and_comparisons():
    a, b = np.array([12, -1, 0], np.int32), np.array([10, 5, -7], np.int32)
    assert_same(run_op("and", a, b), np.array([8, 5, 0], np.int32))
    assert_same(run_op("or", a, b), np.array([14, -1, -7], np.int32))
    assert_same(run_op("xor", a, b), np.array([6, -6, -7], np.int32))
    p, q = np.array([True, True, False]), np.array([True, False, False])
    assert_same(run_op("xor", p, q), np.array([False, True, False]))
    x = np.array([1.0, np.nan, -0.0, 2.0], np.float32)
    y = np.array([1.0, np.nan, 0.0, 1.0], np.float32)
    expected = {
        "eq": [1, 0, 1, 0],
        "ne": [0, 1, 0, 1],
        "lt": [0, 0, 0, 0],
        "le": [1, 0, 1, 0],
        "gt": [0, 0, 0, 1],
        "ge": [1, 0, 1, 1],
    }
    for name, want in expected.items():
        assert_same(run_op(name, x, y), np.array(want, bool))
        assert_same(run_op(name, x.astype(BF16), y.astype(BF16)), np.array(want, bool))


def test_unary_integer_corners():
    assert_same(run_op("neg", np.array([I32_MIN, 5], np.int32)), np.array([I32_MIN, -5], np.int32))
    assert_same(run_op("abs", np.array([I32_MIN, -5], np.int32)), np.array([I32_MIN, 5], np.int32))
    assert_same(run_op("neg", np.array([1, 0], np.uint32)), np.array([2**32 - 1, 0], np.uint32))
    assert_same(run_op("neg", np.float32([0.0, -2.0])), np.float32([-0.0, 2.0]))
    assert_same(run_op("not", np.array([True, False])), np.array([False, True]))
    assert_same(run_op("not", np.array([0, 5], np.int8)), np.array([-1, -6], np.int8))


MANTISSA_BITS = {np.dtype(np.float32): 23, np.dtype(BF16): 7, np.dtype(np.float16): 10}


@pytest.mark.parametrize(
    "name, ref",
    [
        ("exp", np.exp),
        ("log", np.log),
        ("tanh", np.tanh),
        ("sin", np.sin),
        ("cos", np.cos),
        ("sqrt", np.sqrt),
        ("rsqrt", lambda x: 1 / np.sqrt(x)),
        ("logistic", lambda x: 1 / (1 + np.exp(-x))),
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, BF16, np.float16])
def test_float_unary_within_two_ulps_of_float64(name, ref, dtype):
    x = np.array([0.25, 0.5, 1.0, 2.0, 3.5, 7.0, -1.5], dtype)
    if name in ("log", "sqrt", "rsqrt"):
        x = np.abs(x)
    out = run_op(name, x)
    assert out.dtype == np.dtype(dtype) and out.shape == x.shape
    exact = ref(x.astype(np.float64))
    magnitude = np.maximum(np.abs(exact), 2.0**-14)
    ulp = 2.0 ** (np.floor(np.log2(magnitude)) - MANTISSA_BITS[np.dtype(dtype)])
    assert np.all(np.abs(out.astype(np.float64) - exact) <= 2 * ulp), (out, exact)


def test_bf16_arithmetic_rounds_once_from_float32():
    rng = np.random.default_rng(0)
    a = rng.standard_normal(64).astype(BF16)
    b = rng.standard_normal(64).astype(BF16)
    for name, fn in [
        ("add", np.add),
        ("mul", np.multiply),
        ("div", np.divide),
        ("sub", np.subtract),
    ]:
        exact = fn(a.astype(np.float64), b.astype(np.float64))  # f32 is exact enough here
        assert_same(run_op(name, a, b), exact.astype(np.float32).astype(BF16))
    # 1 + 2**-8 is a tie between bf16 neighbours 1 and 1 + 2**-7: round to even gives 1
    assert_same(
        run_op("add", np.array([1.0], BF16), np.array([2.0**-8], BF16)), np.array([1.0], BF16)
    )
    assert_same(
        run_op("add", np.array([1.0], np.float16), np.array([2.0**-11], np.float16)),
        np.array([1.0], np.float16),
    )


def test_select_and_constant():
    p = np.array([True, False, True])
    assert_same(
        run_op("select", p, np.float32([1, 2, 3]), np.float32([4, 5, 6])), np.float32([1, 5, 3])
    )
    f = build([], lambda b: (b.const([[1, 2], [3, 4]], "int8"), b.const(2.5, "bfloat16")))
    m, s = interpret(f)
    assert_same(m, np.array([[1, 2], [3, 4]], np.int8))
    assert_same(s, np.array(2.5, BF16))


# ---- conversions ----


def test_float_to_int_saturates_and_nan_is_zero():
    f = np.float32([np.nan, np.inf, -np.inf, 3e9, -3e9, -1.7, 2.9, -0.5])
    assert_same(
        run_op("convert", f, dtype="int32"),
        np.array([0, I32_MAX, I32_MIN, I32_MAX, I32_MIN, -1, 2, 0], np.int32),
    )
    assert_same(
        run_op("convert", f, dtype="uint32"),
        np.array([0, 2**32 - 1, 0, 3_000_000_000, 0, 0, 2, 0], np.uint32),
    )
    assert_same(
        run_op("convert", f, dtype="int8"), np.array([0, 127, -128, 127, -128, -1, 2, 0], np.int8)
    )
    assert_same(
        run_op("convert", f.astype(BF16), dtype="int8"),
        np.array([0, 127, -128, 127, -128, -1, 2, 0], np.int8),
    )


def test_conversions_to_and_from_bool_and_between_ints():
    f = np.float32([np.nan, 0.0, -0.0, 0.5])
    assert_same(run_op("convert", f, dtype="bool"), np.array([True, False, False, True]))
    assert_same(run_op("convert", np.array([True, False]), dtype="float32"), np.float32([1, 0]))
    assert_same(run_op("convert", np.array([True, False]), dtype="int8"), np.int8([1, 0]))
    assert_same(
        run_op("convert", np.array([300, -1, 128], np.int32), dtype="int8"), np.int8([44, -1, -128])
    )
    assert_same(
        run_op("convert", np.array([-1, 7], np.int32), dtype="uint32"), np.uint32([2**32 - 1, 7])
    )


def test_float_narrowing_rounds_to_nearest_even():
    x = np.array([1 + 2**-8, 1 + 3 * 2**-8, 2**24 + 1, 65520.0], np.float32)
    assert_same(
        run_op("convert", x, dtype="bfloat16"), np.array([1.0, 1 + 2**-6, 2**24, 65536.0], BF16)
    )
    assert_same(
        run_op("convert", x, dtype="float16"),
        np.array([1 + 2**-8, 1 + 3 * 2**-8, np.inf, np.inf], np.float16),
    )
    big = np.array([2**24 + 2**16 + 1, 2**30 + 2**22 + 1, -(2**30 + 2**22 + 1)], np.int32)
    # XLA's bits: rounded to float32 first (2**24 + 2**16), then to bfloat16 (a tie, to even)
    np.testing.assert_array_equal(
        run_op("convert", big, dtype="bfloat16").view(np.uint16),
        np.array([19328, 20096, 52864], np.uint16),
    )


def test_bitcast_keeps_bits():
    assert_same(
        run_op("bitcast", np.float32([1.0, -0.0]), dtype="int32"), np.int32([0x3F800000, I32_MIN])
    )
    assert_same(run_op("bitcast", np.int32([-1]), dtype="uint32"), np.uint32([2**32 - 1]))
    h = np.array([1.5, -2.0], BF16)
    assert_same(run_op("bitcast", h, dtype="float16"), h.view(np.float16))
    assert_same(run_op("bitcast", np.float32(2.0), dtype="int32"), np.int32(0x40000000))


# ---- shapes ----


def test_iota_broadcast_reshape_transpose():
    f = build(
        [],
        lambda b: (
            b.v("iota", type=arr((2, 3), "int32"), dimension=1),
            b.v("iota", type=arr((3, 2), "bfloat16"), dimension=0),
        ),
    )
    i, h = interpret(f)
    assert_same(i, np.array([[0, 1, 2], [0, 1, 2]], np.int32))
    assert_same(h, np.array([[0, 0], [1, 1], [2, 2]], BF16))
    x = np.arange(3, dtype=np.float32)
    assert_same(
        run_op("broadcast_in_dim", x, shape=(2, 3, 4), dims=(1,)),
        np.broadcast_to(x[None, :, None], (2, 3, 4)),
    )
    y = np.arange(4, dtype=np.int8).reshape(1, 4)
    assert_same(run_op("broadcast_in_dim", y, shape=(3, 4), dims=(0, 1)), np.tile(y, (3, 1)))
    assert_same(run_op("broadcast_in_dim", np.float32(7), shape=(2,), dims=()), np.float32([7, 7]))
    z = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    assert_same(run_op("reshape", z, shape=(4, 6)), z.reshape(4, 6))
    assert_same(run_op("transpose", z, permutation=(2, 0, 1)), np.moveaxis(z, 2, 0))


# ---- reductions and dot ----


def test_reduce_sum():
    x = np.full((3, 100), 3, np.int8)
    assert_same(run_op("reduce_sum", x, axes=(1,)), wrap([300] * 3, np.int8))
    assert_same(run_op("reduce_sum", x, axes=()), x)
    assert_same(run_op("reduce_sum", np.ones(1000, BF16), axes=(0,)), np.array(1000, BF16))
    rng = np.random.default_rng(1)
    y = rng.standard_normal((4, 5, 6)).astype(np.float32)
    out = run_op("reduce_sum", y, axes=(0, 2))
    assert out.dtype == np.float32 and out.shape == (5,)
    np.testing.assert_allclose(out, y.astype(np.float64).sum((0, 2)), rtol=1e-5, atol=1e-5)


def test_reduce_max_min():
    x = np.float32([[1, np.nan, 3], [-0.0, 0.0, -1], [-0.0, -0.0, -5]])
    assert_same(run_op("reduce_max", x, axes=(1,)), np.float32([np.nan, 0.0, -0.0]))
    assert_same(run_op("reduce_min", x, axes=(0,)), np.float32([-0.0, np.nan, -5]))
    assert_same(
        run_op("reduce_max", np.zeros((2, 0), np.float32), axes=(1,)),
        np.float32([-np.inf, -np.inf]),
    )
    assert_same(run_op("reduce_min", np.zeros((0,), np.int8), axes=(0,)), np.array(127, np.int8))
    assert_same(
        run_op("reduce_max", np.array([[True, False], [False, False]]), axes=(1,)),
        np.array([True, False]),
    )
    assert_same(
        run_op("reduce_min", np.array([5, 2**32 - 1, 9], np.uint32), axes=(0,)),
        np.array(5, np.uint32),
    )


def test_dot():
    rng = np.random.default_rng(2)
    a = rng.integers(-128, 128, (4, 64)).astype(np.int8)
    b = rng.integers(-128, 128, (64, 3)).astype(np.int8)
    assert_same(run_op("dot", a, b, dtype="int32"), (a.astype(np.int64) @ b).astype(np.int32))
    assert_same(
        run_op("dot", a, b, dtype="int8"),
        wrap(list((a.astype(np.int64) @ b).ravel()), np.int8).reshape(4, 3),
    )
    small = rng.integers(-8, 8, (5, 7)).astype(BF16)
    other = rng.integers(-8, 8, (7, 2)).astype(BF16)
    assert_same(
        run_op("dot", small, other, dtype="float32"),
        (small.astype(np.float64) @ other.astype(np.float64)).astype(np.float32),
    )
    x = rng.standard_normal((8, 16)).astype(np.float32)
    y = rng.standard_normal((16, 4)).astype(np.float32)
    out = run_op("dot", x, y)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, x.astype(np.float64) @ y, rtol=1e-5, atol=1e-5)
    h = run_op("dot", x.astype(BF16), y.astype(BF16), dtype="bfloat16")
    exact = x.astype(BF16).astype(np.float64) @ y.astype(BF16).astype(np.float64)
    np.testing.assert_allclose(h.astype(np.float64), exact, rtol=2**-7, atol=1e-2)


def test_every_result_has_the_declared_type():
    """The engine rejects a rule result of the wrong dtype (guards against numpy promotion)."""
    from minipallas.ir.interpret import RULES

    f = build([arr((2,), "int32")], lambda b, x: b.v("neg", x))
    saved = RULES["neg"]
    RULES["neg"] = lambda interp, op, args: (args[0].astype(np.int64),)
    try:
        with pytest.raises(
            InterpretError, match=r"'neg': produced int64\[2\] for a result of type i32\[2\]"
        ):
            interpret(f, np.array([1, 2], np.int32))
    finally:
        RULES["neg"] = saved


# ---- subnormals: XLA on CPU flushes them in arithmetic (FTZ/DAZ) ----

SUB = np.float32([1e-40, -1e-40, 5e-39, 1e-45])  # all subnormal


def test_arithmetic_flushes_subnormal_operands_and_results():
    zero, one = np.zeros(4, np.float32), np.ones(4, np.float32)
    assert_same(run_op("add", SUB, zero), np.float32([0, 0, 0, 0]))
    assert_same(run_op("mul", SUB, one), np.float32([0, -0.0, 0, 0]))
    assert_same(
        run_op("div", np.float32([1e-30] * 2), np.float32([1e10, -1e10])), np.float32([0, -0.0])
    )
    assert_same(run_op("sub", np.float32([1.5e-38]), np.float32([1.2e-38])), np.float32([0]))
    assert_same(run_op("min", SUB, zero), np.float32([0, -0.0, 0, 0]))
    assert_same(run_op("eq", SUB, zero), np.ones(4, bool))
    assert_same(run_op("sqrt", SUB), np.float32([0, -0.0, 0, 0]))
    assert_same(run_op("rsqrt", SUB), np.float32([np.inf, -np.inf, np.inf, np.inf]))
    assert_same(run_op("log", SUB), np.full(4, -np.inf, np.float32))
    assert_same(run_op("exp", np.float32([-88.0, -100.0])), np.float32([0, 0]))
    assert_same(run_op("reduce_sum", SUB, axes=(0,)), np.float32(0))
    assert_same(run_op("convert", SUB, dtype="bool"), np.zeros(4, bool))
    assert_same(run_op("add", SUB.astype(BF16), zero.astype(BF16)), np.zeros(4, BF16))


def test_data_movement_sign_ops_and_some_transcendentals_keep_subnormals():
    assert_same(run_op("neg", SUB), -SUB)
    assert_same(run_op("abs", SUB), np.abs(SUB))
    assert_same(run_op("tanh", SUB), SUB)
    assert_same(run_op("sin", SUB), SUB)
    assert_same(run_op("select", np.ones(4, bool), SUB, np.zeros(4, np.float32)), SUB)
    assert_same(run_op("convert", SUB, dtype="bfloat16"), SUB.astype(BF16))
    assert_same(run_op("convert", SUB.astype(BF16), dtype="bool"), np.array([1, 1, 1, 0], bool))
    # rem keeps a subnormal dividend but treats a subnormal divisor as zero
    assert_same(
        run_op("rem", np.float32([1e-40, 5.0, 3e-39]), np.float32([1.0, 1e-40, 1e-39])),
        np.float32([1e-40, np.nan, np.nan]),
    )
    assert_same(
        run_op("rem", np.float32([1.5e-38]), np.float32([1.2e-38])),
        np.float32([1.5e-38]) % np.float32([1.2e-38]),
    )
