"""Pure array ops through StableHLO on XLA:CPU against the reference interpreter.

Every elementwise op runs on every pair of edge values of every dtype it takes (zeros of both
signs, subnormals, limits, infinities, NaN) and must agree bit for bit (any NaN equals any
NaN); transcendentals agree within ``TRANSCENDENTAL_ULPS``. XLA:CPU flushes float32/bfloat16
subnormals to zero in arithmetic (FTZ/DAZ) and the interpreter models that; ``pow`` is the one
op where the two still differ on subnormal operands (xfail below).
"""

import ml_dtypes
import numpy as np
import pytest
from shlo_util import (
    ALL,
    FLOATS,
    INTS,
    assert_same,
    check,
    const,
    edge_values,
    elementwise,
    pairs,
    random_array,
    summation_tolerance,
)

import minipallas
from minipallas.ir import ArrayType, Builder, Literal, infer_result_types, params
from minipallas.ir import dtypes as mp_dtypes
from minipallas.ir.errors import MiniPallasError
from minipallas.ir.opset.arrays import ARITHMETIC, BITWISE, COMPARISONS, FLOAT_UNARY, UNARY

# Worst distance measured over 80k random inputs per op (jaxlib 0.10.2, x86-64), rounded up:
# float32 exp/tanh/logistic 4, log 3, rsqrt 2, sin/cos/pow 1; bfloat16/float16 1 (computed in
# float32 and rounded once on both sides); sqrt and everything else exact.
TRANSCENDENTAL_ULPS = {"float32": 4, "bfloat16": 1, "float16": 1}
INEXACT = (*FLOAT_UNARY, "pow")


def _ulps(name: str, dtype: str) -> int:
    if name in INEXACT and name != "sqrt" and mp_dtypes.is_float(dtype):
        return TRANSCENDENTAL_ULPS[dtype]
    return 0


def _defined(name: str, dtype: str, arity: int, attrs=None) -> bool:
    """Whether the op's type rule accepts ``dtype`` operands."""
    try:
        infer_result_types(name, [ArrayType((2,), dtype)] * arity, attrs or {}, [])
    except MiniPallasError:
        return False
    return True


BINARY_CASES = [
    (name, dtype)
    for name in (*ARITHMETIC, *BITWISE, *COMPARISONS)
    for dtype in ALL
    if _defined(name, dtype, 2)
]
UNARY_CASES = [(name, dtype) for name in UNARY for dtype in ALL if _defined(name, dtype, 1)]
REDUCE_CASES = [
    (name, dtype)
    for name in ("reduce_sum", "reduce_max", "reduce_min")
    for dtype in ALL
    if _defined(name, dtype, 1, {"axes": (0,)})
]


@pytest.mark.parametrize("name, dtype", BINARY_CASES)
def test_binary_ops_on_edge_pairs(name, dtype):
    a, b = pairs(dtype, subnormals=name != "pow")
    t = ArrayType(a.shape, dtype)
    check(elementwise(name, [t, t]), a, b, ulps=_ulps(name, dtype))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_pow_with_subnormal_operands(dtype):
    """XLA:CPU's pow keeps subnormal operands (pow(-1, 1e-45) is NaN), as the interpreter does."""
    a, b = pairs(dtype)
    t = ArrayType(a.shape, dtype)
    check(elementwise("pow", [t, t]), a, b, ulps=_ulps("pow", dtype))


@pytest.mark.parametrize("name, dtype", UNARY_CASES)
def test_unary_ops_on_edge_values(name, dtype):
    x = edge_values(dtype)
    check(elementwise(name, [ArrayType(x.shape, dtype)]), x, ulps=_ulps(name, dtype))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", [*FLOAT_UNARY, "pow"])
def test_transcendentals_on_random_values_within_tolerance(name, dtype):
    rng = np.random.default_rng(7)
    np_dtype = mp_dtypes.to_numpy(dtype)
    x = np.concatenate([rng.standard_normal(4000) * s for s in (0.01, 1, 10, 80)])
    x = x.astype(np.float32).astype(np_dtype)
    t = ArrayType(x.shape, dtype)
    if name == "pow":
        y = np.clip(x, -20, 20).astype(np_dtype)
        check(elementwise(name, [t, t]), np.abs(x), y, ulps=_ulps(name, dtype))
        return
    if name in ("log", "sqrt", "rsqrt"):
        x = np.abs(x)
    check(elementwise(name, [t]), x, ulps=_ulps(name, dtype))


def test_integer_division_corners_are_defined():
    """x/0 = -1, x%0 = x, INT_MIN/-1 = INT_MIN, INT_MIN%-1 = 0: emitted as selects."""
    lo = np.iinfo(np.int32).min
    a = np.array([7, -7, lo, lo, 5, 0], np.int32)
    b = np.array([0, 0, -1, 0, -1, 0], np.int32)
    t = ArrayType(a.shape, "int32")
    div = check(elementwise("div", [t, t]), a, b)[0]
    rem = check(elementwise("rem", [t, t]), a, b)[0]
    np.testing.assert_array_equal(div, [-1, -1, lo, -1, -5, -1])
    np.testing.assert_array_equal(rem, [7, -7, 0, lo, 0, 0])
    text = str(minipallas.lower(elementwise("div", [t, t])))
    assert "stablehlo.select" in text and "stablehlo.divide" in text


def test_integer_pow_negative_exponents():
    base = np.array([2, 3, -1, 1, 2, 0, -2, -1, -1, 1], np.int32)
    exp = np.array([10, 64, 65, -3, -1, 0, 31, -1, -2, -(2**31)], np.int32)
    t = ArrayType(base.shape, "int32")
    out = check(elementwise("pow", [t, t]), base, exp)[0]
    np.testing.assert_array_equal(out, [1024, 1, -1, 1, 0, 1, -(2**31), 0, 0, 1])
    u = ArrayType((4,), "uint32")
    out = check(
        elementwise("pow", [u, u]),
        np.array([2, 1, 3, 3], np.uint32),
        np.array([3, 2**31 + 1, 2**31, 2**32 - 1], np.uint32),
    )[0]
    np.testing.assert_array_equal(out, [8, 1, 0, 0])


def test_float_max_min_order_signed_zeros_and_propagate_nan():
    a = np.array([-0.0, 0.0, np.nan, 1.0], np.float32)
    b = np.array([0.0, -0.0, 1.0, np.nan], np.float32)
    t = ArrayType(a.shape, "float32")
    big = check(elementwise("max", [t, t]), a, b)[0]
    small = check(elementwise("min", [t, t]), a, b)[0]
    assert list(np.signbit(big[:2])) == [False, False]
    assert list(np.signbit(small[:2])) == [True, True]
    assert np.isnan(big[2:]).all() and np.isnan(small[2:]).all()


@pytest.mark.parametrize("source", ALL)
@pytest.mark.parametrize("target", ALL)
def test_convert_every_pair_of_dtypes(source, target):
    x = edge_values(source)
    check(elementwise("convert", [ArrayType(x.shape, source)], {"dtype": target}), x)


@pytest.mark.parametrize("source", FLOATS)
@pytest.mark.parametrize("target", INTS)
def test_float_to_int_saturates_and_maps_nan_to_zero(source, target):
    values = [
        2147483520,
        2147483648,
        4294967040,
        4294967296,
        -2147483648,
        -2147483904,
        127.9,
        128,
        -128.5,
        -129,
        255.5,
        256,
        65504,
        -65504,
        1e10,
        -1e10,
        np.nan,
        np.inf,
        -np.inf,
    ]
    x = np.array(values, np.float64).astype(mp_dtypes.to_numpy(source))
    out = check(elementwise("convert", [ArrayType(x.shape, source)], {"dtype": target}), x)[0]
    info = np.iinfo(mp_dtypes.to_numpy(target))
    assert out[-3:].tolist() == [0, info.max, info.min]


@pytest.mark.parametrize(
    "pair",
    [
        ("float32", "int32"),
        ("int32", "float32"),
        ("bfloat16", "float16"),
        ("uint32", "int32"),
        ("int8", "int8"),
    ],
)
def test_bitcast(pair):
    source, target = pair
    x = edge_values(source)
    check(elementwise("bitcast", [ArrayType(x.shape, source)], {"dtype": target}), x)


@pytest.mark.parametrize("dtype", ALL)
def test_select(dtype):
    rng = np.random.default_rng(1)
    x, y = random_array(rng, (5, 3), dtype), random_array(rng, (5, 3), dtype)
    p = rng.random((5, 3)) < 0.5
    t = ArrayType((5, 3), dtype)
    check(elementwise("select", [ArrayType((5, 3), "bool"), t, t]), p, x, y)


@pytest.mark.parametrize("dtype", ALL)
def test_constants_keep_their_bits(dtype):
    """Dense and splat constants, NaN payloads and signed zeros included."""
    b = Builder()
    values = edge_values(dtype)
    dense = const(b, values, dtype)
    splat = const(b, np.full((2, 3), values[-1]), dtype)
    fn = b.function("constants", [], [dense, splat])
    check(fn)
    nan = np.array([0x7FC00005, 0xFFC00000], np.uint32).view(np.float32)
    b = Builder()
    fn = b.function("nans", [], [const(b, nan, "float32"), const(b, np.float32(-0.0), "float32")])
    got = minipallas.compile(fn)()
    assert got[0].view(np.uint32).tolist() == [0x7FC00005, 0xFFC00000]
    assert np.signbit(got[1])


@pytest.mark.parametrize("dtype", ["float32", "int32", "uint32", "int8", "bfloat16"])
def test_iota(dtype):
    b = Builder()
    outs = [
        b.create("iota", attrs={"type": ArrayType((4, 3), dtype), "dimension": d}).result
        for d in (0, 1)
    ]
    check(b.function("iota", [], outs))


def test_shape_ops():
    rng = np.random.default_rng(2)
    b = Builder()
    (x,) = params([ArrayType((2, 1, 3), "float32")])
    y = b.create("broadcast_in_dim", [x], {"shape": (4, 2, 5, 3), "dims": (1, 2, 3)}).result
    z = b.create("transpose", [y], {"permutation": (3, 0, 2, 1)}).result
    w = b.create("reshape", [z], {"shape": (12, 10)}).result
    fn = b.function("shapes", [x], [y, z, w])
    check(fn, rng.standard_normal((2, 1, 3)).astype(np.float32))


@pytest.mark.parametrize("name, dtype", REDUCE_CASES)
@pytest.mark.parametrize("axes", [(0,), (1, 2), (), (0, 1, 2)])
def test_reductions(name, dtype, axes):
    rng = np.random.default_rng(3)
    x = random_array(rng, (4, 5, 6), dtype)
    if mp_dtypes.is_float(dtype):
        x.flat[7] = -0.0
        x.flat[11] = 0.0
    atol = 0.0
    if name == "reduce_sum" and mp_dtypes.is_float(dtype):
        # XLA adds in its own order, numpy pairwise; float32 accumulation for 16-bit floats
        n = int(np.prod([x.shape[a] for a in axes]))
        atol = summation_tolerance(x, n, "float32") + summation_tolerance(x, 1, dtype)
    check(elementwise(name, [ArrayType(x.shape, dtype)], {"axes": axes}), x, atol=atol)


@pytest.mark.parametrize("name", ["reduce_max", "reduce_min"])
def test_reductions_propagate_nan_and_handle_empty_axes(name):
    x = np.array([[1.0, np.nan, 3.0], [-0.0, 0.0, -0.0]], np.float32)
    check(elementwise(name, [ArrayType(x.shape, "float32")], {"axes": (1,)}), x)
    empty = np.zeros((3, 0), np.float32)
    out = check(elementwise(name, [ArrayType(empty.shape, "float32")], {"axes": (1,)}), empty)
    assert np.isinf(out[0]).all()


@pytest.mark.parametrize(
    "pair",
    [
        ("float32", "float32"),
        ("bfloat16", "float32"),
        ("float16", "float32"),
        ("int8", "int32"),
        ("int32", "int32"),
        ("float32", "bfloat16"),
        ("int32", "float32"),
    ],
)
def test_dot(pair):
    """Operands are converted to the result dtype, then multiplied; floats within the
    summation bound over the 16 products."""
    source, target = pair
    rng = np.random.default_rng(4)
    a, b = random_array(rng, (8, 16), source), random_array(rng, (16, 5), source)
    if mp_dtypes.is_int(source):
        a, b = (np.clip(v, -50, 50).astype(v.dtype) for v in (a, b))
    t_a, t_b = ArrayType(a.shape, source), ArrayType(b.shape, source)
    atol = 0.0
    if mp_dtypes.is_float(target):
        products = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
        atol = summation_tolerance(products, 16, "float32") + summation_tolerance(
            products, 1, target
        )
    check(elementwise("dot", [t_a, t_b], {"dtype": target}), a, b, atol=atol)


def test_batched_dot_is_one_dot_per_batch_element():
    """Leading dims are dot_general batch dims: integers exact, floats within the bound."""
    rng = np.random.default_rng(6)
    a = rng.integers(-50, 50, (2, 3, 8, 16)).astype(np.int32)
    b = rng.integers(-50, 50, (2, 3, 16, 5)).astype(np.int32)
    t_a, t_b = ArrayType(a.shape, "int32"), ArrayType(b.shape, "int32")
    (out,) = check(elementwise("dot", [t_a, t_b], {"dtype": "int32"}), a, b)
    np.testing.assert_array_equal(out, a @ b)
    x, y = a.astype(np.float32) / 7, b.astype(np.float32) / 3
    t_x, t_y = ArrayType(x.shape, "float32"), ArrayType(y.shape, "float32")
    products = np.abs(x.astype(np.float64)) @ np.abs(y.astype(np.float64))
    atol = summation_tolerance(products, 16, "float32")
    check(elementwise("dot", [t_x, t_y], {"dtype": "float32"}), x, y, atol=atol)


def test_bfloat16_arithmetic_rounds_once():
    """bf16 add/mul/div: the float32 result rounded once to bfloat16, exactly."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal(2000).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal(2000).astype(ml_dtypes.bfloat16)
    t = ArrayType(a.shape, "bfloat16")
    for name in ("add", "sub", "mul", "div", "rem", "max"):
        out = check(elementwise(name, [t, t]), a, b)[0]
        if name == "mul":
            wide = (a.astype(np.float32) * b.astype(np.float32)).astype(ml_dtypes.bfloat16)
            assert_same(wide, out)


def test_subnormals_flush_in_arithmetic_on_both_sides():
    """XLA:CPU runs with FTZ/DAZ; the interpreter models it. Pinned so a change in either
    shows up here: results flush to signed zeros, compares see zeros, data movement keeps."""
    tiny = np.float32(1e-45)
    x = np.array([tiny, -tiny, np.float32(1e-39)], np.float32)
    zero = np.zeros(3, np.float32)
    t = ArrayType((3,), "float32")
    (summed,) = check(elementwise("add", [t, t]), x, zero)
    assert (summed == 0).all() and not np.signbit(summed).any()  # -0 + +0 is +0
    (less,) = check(elementwise("lt", [t, t]), -x, zero)
    assert not less.any()
    (moved,) = check(elementwise("reshape", [t], {"shape": (3, 1)}), x)
    np.testing.assert_array_equal(moved[:, 0], x)


def test_literal_helper_roundtrip():
    """The test helper's own assumption: a literal holds exactly the bits it was given."""
    bits = np.array([0x7FC00005], np.uint32).view(np.float32)
    assert Literal.of(bits, "float32").array().view(np.uint32)[0] == 0x7FC00005
