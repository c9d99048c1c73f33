"""Shared helpers for the StableHLO tests: building small programs and comparing the compiled
module's results with the reference interpreter's, bit for bit (NaN-aware) or within ulps."""

from __future__ import annotations

import ml_dtypes
import numpy as np

import minipallas
from minipallas.ir import ArrayType, Builder, Literal, RefType, params
from minipallas.ir import dtypes as mp_dtypes

FLOATS = ("float32", "bfloat16", "float16")
INTS = ("int32", "int8", "uint32")
ALL = (*FLOATS, *INTS, "bool")


def edge_values(dtype: str, subnormals: bool = True) -> np.ndarray:
    """Values where backends disagree if anything does: zeros, signs, limits, NaN, inf and
    (unless asked not to) subnormals, which XLA:CPU flushes in arithmetic."""
    np_dtype = mp_dtypes.to_numpy(dtype)
    if dtype == "bool":
        return np.array([False, True])
    if mp_dtypes.is_float(dtype):
        info = ml_dtypes.finfo(np_dtype)
        values = [
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.5,
            2.5,
            -2.5,
            3.75,
            -7.0,
            100.0,
            1e4,
            -3e4,
            float(info.max),
            float(-info.max),
            float(info.tiny),
            np.inf,
            -np.inf,
            np.nan,
        ]
        if subnormals:
            values += [float(info.smallest_subnormal), -float(info.smallest_subnormal)]
        return np.array(values, np.float64).astype(np_dtype)
    info = np.iinfo(np_dtype)
    values = {0, 1, 2, 3, 7, 100, info.max, info.max - 1, info.min}
    if info.min < 0:
        values |= {-1, -2, -7, info.min + 1}
    return np.array(sorted(values), np_dtype)


def pairs(dtype: str, subnormals: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of edge values, as two flat arrays."""
    v = edge_values(dtype, subnormals)
    a, b = np.meshgrid(v, v, indexing="ij")
    return a.reshape(-1), b.reshape(-1)


def random_array(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    np_dtype = mp_dtypes.to_numpy(dtype)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if mp_dtypes.is_float(dtype):
        return rng.standard_normal(shape).astype(np.float32).astype(np_dtype)
    info = np.iinfo(np_dtype)
    return rng.integers(max(info.min, -1000), min(info.max, 1000), shape).astype(np_dtype)


def const(b: Builder, value, dtype: str):
    return b.create("constant", attrs={"value": Literal.of(value, dtype)}).result


def summation_tolerance(x: np.ndarray, n: int, dtype: str) -> float:
    """The classic bound on a sum's rounding error in any order: ``n * eps * sum(|x|)``."""
    eps = float(ml_dtypes.finfo(mp_dtypes.to_numpy(dtype)).eps)
    return n * eps * float(np.abs(x.astype(np.float64)).sum())


def elementwise(name: str, types: list[ArrayType], attrs=None):
    """``@f(x...) = name(x...)``."""
    b = Builder()
    xs = params(types)
    out = b.create(name, list(xs), attrs or {}).result
    return b.function(name, xs, [out])


def _same_nan_bits(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Integer views of two float arrays with every NaN made one canonical NaN."""
    width = {2: np.uint16, 4: np.uint32}[a.dtype.itemsize]
    fa, fb = np.asarray(a, np.float32), np.asarray(b, np.float32)
    ia, ib = a.view(width).copy(), b.view(width).copy()
    ia[np.isnan(fa)] = 0
    ib[np.isnan(fb)] = 0
    return ia, ib


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Units in the last place between float arrays of one dtype (NaN vs NaN is 0)."""
    ia, ib = _same_nan_bits(a, b)
    bits = 8 * a.dtype.itemsize
    sign = np.array(1 << (bits - 1), np.int64)

    def ordered(i):
        i = i.astype(np.int64)
        return np.where(i & sign, sign - i, i + 0)  # negative floats count down from -0

    return np.abs(ordered(ia) - ordered(ib))


def assert_same(expected, got, ulps: int = 0, what: str = "", atol: float = 0.0) -> None:
    """Equal shape and dtype; bits equal (any NaN equals any NaN), or within ``ulps``; ``atol``
    instead allows an absolute difference (for sums, whose error bound is absolute)."""
    expected, got = np.asarray(expected), np.asarray(got)
    assert got.dtype == expected.dtype, f"{what}: dtype {got.dtype} != {expected.dtype}"
    assert got.shape == expected.shape, f"{what}: shape {got.shape} != {expected.shape}"
    if expected.dtype.kind == "f" or expected.dtype in (np.dtype(ml_dtypes.bfloat16),):
        nan_e, nan_g = np.isnan(expected.astype(np.float32)), np.isnan(got.astype(np.float32))
        assert (nan_e == nan_g).all(), f"{what}: NaN at different places\n{expected}\n{got}"
        if atol:
            close = np.abs(expected.astype(np.float64) - got.astype(np.float64)) <= atol
            assert (close | nan_e).all(), f"{what}: off by more than {atol}\n{expected}\n{got}"
            return
        distance = ulp_distance(expected, got)
        worst = int(distance.max()) if distance.size else 0
        if worst > ulps:
            idx = np.unravel_index(int(np.argmax(distance)), distance.shape)
            raise AssertionError(
                f"{what}: {worst} ulps apart (allowed {ulps}) at {idx}: "
                f"expected {expected[idx]!r}, got {got[idx]!r}"
            )
    else:
        np.testing.assert_array_equal(got, expected, err_msg=what)


def run_both(fn, *args):
    """(interpreter's results in the discharged convention, compiled module's results)."""
    copies = [np.array(a, copy=True) for a in args]
    results = minipallas.interpret(fn, *copies)
    refs = [c for p, c in zip(fn.params, copies, strict=True) if isinstance(p.type, RefType)]
    expected = (*results, *refs)
    got = minipallas.compile(fn)(*args)
    return expected, got


def check(fn, *args, ulps: int = 0, atol: float = 0.0):
    """``interpret`` and ``compile`` agree on ``fn(*args)``; returns the compiled results."""
    expected, got = run_both(fn, *args)
    assert len(got) == len(expected), f"{len(got)} results, expected {len(expected)}"
    for i, (e, g) in enumerate(zip(expected, got, strict=True)):
        assert_same(e, g, ulps, what=f"@{fn.name} result {i}", atol=atol)
    return got
