"""The elementwise ops jnp programs use beyond the basics, interpreter against XLA:CPU
(``minipallas.compile``): every bfloat16 and float16 bit pattern, and about 1.2e5 float32
values per op (zeros, subnormals, infinities, NaN payloads, the values around each algorithm's
branch points, random bit patterns and typical values), bit for bit, or within the op's
``transcendental.ULP_BOUND``. Integer ops over every dtype, with shift amounts past the width
and negative."""

import ml_dtypes
import numpy as np
import pytest
from float_samples import edge_rich_float32

import minipallas as mp
from minipallas.ir import dtypes
from minipallas.ir.interpret.xla import transcendental

U16 = np.arange(2**16, dtype=np.uint16)
LOW = {"bfloat16": U16.view(ml_dtypes.bfloat16), "float16": U16.view(np.float16)}
FLOAT_UNARY = ("floor", "ceil", "round", "round_even", "exp2", "expm1", "log1p", "erf")
FLOAT_UNARY += ("erf_inv", "tan", "asin", "atan", "sinh", "cosh", "asinh", "cbrt")
FLOAT_BINARY = ("atan2", "nextafter")
# branch points of XLA's algorithms, and where the formulas' steps change range
EDGES = [0.5, 1.5, 2.5, 1.0, 0.41421356, 3.8325, 88.8, -87.8, 5.0, 2.0**64, 1e30, 3e38, 0.25]
# float32 ops within a bound: (op, dtype) -> ulps
BOUND = {("atan", "float32"): 5, ("asinh", "float32"): 1, ("asinh", "float16"): 1}
INTS = ("int32", "int16", "int8", "uint32", "uint16", "uint8")


def _program(op: str, dtype: str, n: int, arity: int) -> mp.ir.Function:
    t = f"{dtypes.SHORT[dtype]}[{n}]"
    if arity == 2:
        body = f"%y = {op} %x, %z : {t}"
        return mp.parse(f"func @f(%x: {t}, %z: {t}) -> ({t}) {{\n  {body}\n  return %y\n}}")
    return mp.parse(f"func @f(%x: {t}) -> ({t}) {{\n  %y = {op} %x : {t}\n  return %y\n}}")


def _f32(n: int = 120_000) -> np.ndarray:
    rng = np.random.default_rng(0)
    centres = np.array([0.0, 2.0**-126, *EDGES], np.float32)
    return edge_rich_float32(centres, lambda k: rng.standard_normal(k) * 2, n, rng)


def _ordered(a: np.ndarray) -> np.ndarray:
    """Float bits as integers ordered like the values (so ulps are differences)."""
    width = a.dtype.itemsize * 8
    b = a.view({2: np.uint16, 4: np.uint32}[a.dtype.itemsize]).astype(np.int64)
    sign = np.int64(1) << (width - 1)
    return np.where(b & sign, sign - b, b)


def _check(op: str, dtype: str, *args: np.ndarray) -> None:
    fn = _program(op, dtype, args[0].size, len(args))
    ours, xla = mp.interpret(fn, *args)[0], mp.compile(fn)(*args)[0]
    unsigned = {2: np.uint16, 4: np.uint32}[ours.dtype.itemsize]
    differ = np.nonzero(ours.view(unsigned) != xla.view(unsigned))[0]
    a_nan, b_nan = (
        np.isnan(ours[differ].astype(np.float32)),
        np.isnan(xla[differ].astype(np.float32)),
    )
    assert (a_nan == b_nan).all(), f"{op} {dtype}: NaN against a number"
    # IEEE 754 leaves a NaN's sign and payload unspecified, and XLA's code for them depends on
    # the CPU: asinh(+NaN) in bf16 is 0x7fc0 on an AMD EPYC and 0xffc0 on an Intel Xeon, and
    # erf_inv's f16 NaNs carry other payload bits on an AMD EPYC than the interpreter's (equal
    # on an Intel Xeon). So a NaN must meet a NaN; which NaN is the CPU's business.
    numbers = differ[~a_nan]
    ulps = np.abs(_ordered(ours[numbers]) - _ordered(xla[numbers]))
    bound = BOUND.get((op, dtype), 0)
    shown = [(*(a[i] for a in args), ours[i], xla[i]) for i in numbers[ulps > bound][:5]]
    assert ulps.max(initial=0) <= bound, f"{op} {dtype}: beyond {bound} ulps, e.g. {shown}"


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("op", FLOAT_UNARY)
def test_unary_values_are_xlas(op, dtype):
    _check(op, dtype, LOW[dtype] if dtype in LOW else _f32())


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("op", FLOAT_BINARY)
def test_binary_values_are_xlas(op, dtype):
    x = LOW[dtype] if dtype in LOW else _f32()
    _check(op, dtype, x, np.random.default_rng(1).permutation(x))


@pytest.mark.parametrize("n", [1, 5, 13, 37])
def test_short_arrays_and_tails(n):
    """XLA vectorizes in blocks of 8 and 16: short arrays and tails take other code paths."""
    x = np.random.default_rng(n).choice(_f32(), n)
    for op in FLOAT_UNARY:
        _check(op, "float32", x)
    for op in FLOAT_BINARY:
        _check(op, "float32", x, x[::-1].copy())


def test_bounds_are_recorded():
    """Every bounded float32 op is in ULP_BOUND, which the numerics envelope reads."""
    for (op, _), ulps in BOUND.items():
        assert transcendental.ULP_BOUND[op] >= ulps, op


@pytest.mark.parametrize("dtype", INTS)
def test_integer_ops_are_xlas(dtype):
    info = np.iinfo(dtypes.to_numpy(dtype))
    width = 8 * dtypes.itemsize(dtype)
    rng = np.random.default_rng(2)
    edges = [0, 1, info.max, info.min, 2, info.max - 1]
    x = np.concatenate([edges, rng.integers(info.min, info.max, 1000, endpoint=True)])
    amounts = np.concatenate([np.arange(-3, 2 * width + 3), rng.integers(info.min, info.max, 1000)])
    x, y = x.astype(dtype), amounts[: x.size].astype(dtype)
    ops = {"shift_left": 2, "shift_right_logical": 2, "shift_right_arithmetic": 2}
    ops.update(population_count=1, clz=1)
    for op, arity in ops.items():
        args = (x, y)[:arity]
        fn = _program(op, dtype, x.size, arity)
        np.testing.assert_array_equal(mp.interpret(fn, *args)[0], mp.compile(fn)(*args)[0])


def test_counts_and_shifts_by_hand():
    x = np.array([0, 1, -1, 0x0F0], np.int16)
    fn = _program("clz", "int16", 4, 1)
    np.testing.assert_array_equal(mp.interpret(fn, x)[0], [16, 15, 0, 8])
    fn = _program("population_count", "int16", 4, 1)
    np.testing.assert_array_equal(mp.interpret(fn, x)[0], [0, 1, 16, 4])
    by = np.array([16, -1, 15, 1], np.int16)
    fn = _program("shift_right_arithmetic", "int16", 4, 2)
    np.testing.assert_array_equal(mp.interpret(fn, x, by)[0], [0, 0, -1, 0x78])
    fn = _program("shift_left", "int16", 4, 2)
    np.testing.assert_array_equal(mp.interpret(fn, x, by)[0], [0, 0, -(2**15), 0x1E0])


@pytest.mark.parametrize("op, dtype", [("floor", "int32"), ("clz", "float32"),
                                       ("shift_left", "float32"), ("atan2", "int32")])  # fmt: skip
def test_wrong_dtypes_are_rejected(op, dtype):
    arity = 2 if op in ("shift_left", "atan2") else 1
    with pytest.raises(mp.MiniPallasError, match=op):
        _program(op, dtype, 4, arity)
