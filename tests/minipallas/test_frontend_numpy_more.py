"""The ``minipallas.numpy`` functions a new user reached for first (issue 14): constants,
mean/var, argmax, scans, rounding, sign, clip, where with broadcasting, and the importer's ops
under their numpy names. Each traced program runs in the reference interpreter and through
``minipallas.compile`` (XLA:CPU); both must equal ``jax.numpy`` bit for bit.
"""

import math
import zlib

import jax
import jax.numpy as real_jnp
import numpy as np
import pytest
from frontend_helpers import arr, names, raises_at, run, same, traced

import minipallas as mp
import minipallas.numpy as jnp


def data(shape, dtype, whole=False):
    """Random values with the float specials first; ``whole``: integer-valued floats, whose
    sums and small products are exact in any order (float sums are not bit-exact otherwise:
    XLA and the interpreter add in different orders). Seeded by the arguments, so a test's
    data does not depend on which tests ran before it."""
    rng = np.random.default_rng(zlib.crc32(repr((shape, dtype, whole)).encode()))
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        low = 0 if np.dtype(dtype).kind == "u" else -9
        return rng.integers(low, 10, shape).astype(dtype)
    x = rng.integers(-4, 5, shape) if whole else rng.standard_normal(shape) * 4
    x = x.astype(dtype)
    specials = np.array([0.5, -0.5, 2.5, -0.0, np.nan, np.inf, -np.inf], dtype)
    flat = x.reshape(-1)
    flat[: min(len(specials), flat.size)] = specials[: flat.size]
    return x


def agrees(f, *args, ulps=0):
    """``f(minipallas.numpy, *args)`` compiled equals ``f(jax.numpy, ...)`` bit for bit (both
    are XLA:CPU), and interpreted too, or within ``ulps`` units in the last place where XLA's
    own numerics are not correctly rounded (its transcendentals' polynomials; ``x / c`` for a
    constant ``c``, which XLA rewrites as ``x * (1 / c)``)."""
    fn = traced(lambda *xs: f(jnp, *xs), *[arr(a.shape, a.dtype.name) for a in args])
    theirs = np.asarray(jax.jit(lambda *xs: f(real_jnp, *xs))(*args))
    same(mp.compile(fn)(*args)[0], theirs)
    (interpreted,) = run(fn, *args)
    if ulps:
        assert interpreted.dtype == theirs.dtype
        eps = float(jax.numpy.finfo(theirs.dtype).eps)
        wide = [np.asarray(v, np.float64) for v in (interpreted, theirs)]
        np.testing.assert_allclose(*wide, rtol=ulps * eps, atol=0)
    else:
        same(interpreted, theirs)
    return fn


def close(f, x, rtol):
    """As ``agrees``, to a relative tolerance (for sums of inexact terms); NaNs where jnp's are."""
    fn = traced(lambda x: f(jnp, x), arr(x.shape, x.dtype.name))
    theirs = np.asarray(jax.jit(lambda x: f(real_jnp, x))(x)).astype(np.float64)
    for ours in (run(fn, x)[0], mp.compile(fn)(x)[0]):
        assert ours.dtype == fn.result_types[0].dtype
        np.testing.assert_allclose(np.asarray(ours, np.float64), theirs, rtol=rtol, atol=rtol)


def test_inf_nan_pi_are_jnps_floats():
    assert jnp.inf == real_jnp.inf and math.isnan(jnp.nan) and jnp.pi == real_jnp.pi
    agrees(lambda np_, x: np_.where(x > 0, x, -np_.inf), data((8,), "float32"))


MEANS = [
    lambda np_, x: np_.mean(x),
    lambda np_, x: np_.mean(x, axis=1),
    lambda np_, x: np_.mean(x, axis=0, keepdims=True),
    lambda np_, x: np_.mean(x, axis=(0, 1), dtype=np_.bfloat16),
]
VARS = [
    lambda np_, x: np_.var(x),
    lambda np_, x: np_.var(x, axis=1, keepdims=True),
    lambda np_, x: np_.var(x, axis=0, ddof=1),
    lambda np_, x: np_.var(x, axis=0, ddof=5),  # count - ddof <= 0: NaN
]
MEAN_DTYPES = ["float32", "bfloat16", "float16", "int32", "bool"]
RTOL = {"float32": 1e-6, "int32": 1e-6, "bool": 1e-6, "bfloat16": 2**-7, "float16": 2**-10}


@pytest.mark.parametrize("dtype", MEAN_DTYPES)
@pytest.mark.parametrize("f", MEANS)
def test_mean_matches_jax_bit_for_bit_on_exact_sums(f, dtype):
    """Counts of 4, 8 and 32: dividing by a power of two is exact however XLA does it."""
    agrees(f, np.nan_to_num(data((4, 8), dtype, whole=True), posinf=3, neginf=-3))


def test_mean_by_a_count_that_is_not_a_power_of_two():
    agrees(lambda np_, x: np_.mean(x, axis=1), data((5, 6), "float32", whole=True), ulps=1)


@pytest.mark.parametrize("dtype", MEAN_DTYPES)
@pytest.mark.parametrize("f", VARS)
def test_var_matches_jax_to_rounding(f, dtype):
    close(f, np.nan_to_num(data((5, 6), dtype), posinf=3, neginf=-3), RTOL[dtype])


def test_var_is_nan_where_count_minus_ddof_is_not_positive():
    fn = traced(lambda x: jnp.var(x, axis=0, ddof=5), arr((5, 2)))
    assert np.isnan(run(fn, np.ones((5, 2), np.float32))[0]).all()


ARGS_AND_SCANS = [
    lambda np_, x: np_.argmax(x),
    lambda np_, x: np_.argmax(x, axis=0),
    lambda np_, x: np_.argmin(x, axis=-1, keepdims=True),
    lambda np_, x: np_.argmax(x, keepdims=True),
    lambda np_, x: np_.cumsum(x),
    lambda np_, x: np_.cumsum(x, axis=1),
    lambda np_, x: np_.cumprod(x, axis=0),
    lambda np_, x: np_.prod(x, axis=1),
    lambda np_, x: np_.sort(x, axis=0),
    lambda np_, x: np_.argsort(x),
    lambda np_, x: np_.flip(x),
    lambda np_, x: np_.flip(x, axis=1),
]


@pytest.mark.parametrize("dtype", ["float32", "int32", "int8", "bool"])
@pytest.mark.parametrize("f", ARGS_AND_SCANS)
def test_arg_scan_and_sort_functions_match_jax(f, dtype):
    agrees(f, data((4, 5), dtype, whole=True))


ROUNDING = [
    lambda np_, x: np_.floor(x),
    lambda np_, x: np_.ceil(x),
    lambda np_, x: np_.round(x),
    lambda np_, x: np_.sign(x),
    lambda np_, x: np_.abs(x),
    lambda np_, x: np_.clip(x, 1, 6),
    lambda np_, x: np_.clip(x, max=0.5),
    lambda np_, x: np_.clip(x, min=np_.zeros((1, 6), x.dtype)),
    lambda np_, x: np_.square(x),
    lambda np_, x: np_.isfinite(x),
    lambda np_, x: np_.isnan(x),
]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "int32", "uint8"])
@pytest.mark.parametrize("f", ROUNDING)
def test_rounding_sign_and_clip_match_jax(f, dtype):
    agrees(f, data((3, 6), dtype))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_round_to_decimals_divides_by_the_factor(dtype):
    agrees(lambda np_, x: np_.round(x, 2), data((3, 6), dtype), ulps=1)


def test_rounding_integers_adds_no_op():
    fn = traced(lambda x: (jnp.floor(x), jnp.ceil(x), jnp.round(x)), arr((4,), "int32"))
    assert names(fn) == []


@pytest.mark.parametrize(
    "name", ["exp2", "expm1", "log1p", "tan", "arcsin", "arctan", "sinh", "cosh", "arcsinh", "cbrt"]
)
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_importer_unary_ops_under_numpy_names(name, dtype):
    x = data((16,), dtype)
    if dtype == "float32":
        x = np.clip(x, -0.9, 0.9)  # inside arcsin's domain
    fn = agrees(lambda np_, x: getattr(np_, name)(x), x, ulps=4)
    assert fn.result_types[0].dtype == "float32"


@pytest.mark.parametrize(
    "f",
    [
        lambda np_, x, y: np_.arctan2(x, y),
        lambda np_, x, y: np_.nextafter(x, y),
        lambda np_, x, y: np_.left_shift(x.astype(np_.int32), 3),
        lambda np_, x, y: np_.right_shift(x.astype(np_.int32), 2),
        lambda np_, x, y: np_.right_shift(x.astype(np_.uint32), 2),
    ],
)
def test_importer_binary_ops_under_numpy_names(f):
    agrees(f, data((12,), "float32"), data((12,), "float32"))


@pytest.mark.parametrize(
    "shapes",
    [((4, 1), (1, 5), (4, 5)), ((5,), (4, 1), ()), ((4, 5), (), (5,)), ((1,), (3, 1), (1, 2))],
)
def test_where_broadcasts_condition_and_both_values(shapes):
    c, x, y = (data(s, d) for s, d in zip(shapes, ["bool", "float32", "int32"], strict=True))
    agrees(lambda np_, c, x, y: np_.where(c, x, y), c, x, y)


def test_where_shape_mismatch_names_the_shapes_and_a_fix():
    def f(c, x):
        return jnp.where(c, x, 0.0)

    with raises_at(f.__code__.co_firstlineno + 1, match=r"\(3,\).*\(4,\)") as info:
        mp.trace(f, arr((3,), "bool"), arr((4,)))
    assert info.value.fix


def test_argmax_of_empty_axis_is_refused():
    def f(x):
        return jnp.argmax(x, axis=1)

    with raises_at(f.__code__.co_firstlineno + 1, match="empty axis"):
        mp.trace(f, arr((3, 0)))
