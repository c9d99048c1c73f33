"""The structural ops (reverse, pad, cumulative ops, reduce_prod, sort, top_k, argmax/argmin):
the reference interpreter against the compiled StableHLO module and ``to_jax``, bit for bit,
on random inputs with NaNs, signed zeros, subnormals and ties; float ``reduce_prod`` within
its stated bound (XLA multiplies in its own order)."""

import ml_dtypes
import numpy as np
import pytest

import minipallas
from minipallas.interop import to_jax
from minipallas.ir import ArrayType, Builder, params
from minipallas.ir import dtypes as mp_dtypes

DTYPES = ("float32", "bfloat16", "int32", "uint32")


def sample(rng, shape, dtype):
    """Random values with ties; floats also get NaN, -0.0, +0.0, inf and a subnormal."""
    np_dtype = mp_dtypes.to_numpy(dtype)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if not mp_dtypes.is_float(dtype):
        return rng.integers(-3 if dtype == "int32" else 0, 4, shape).astype(np_dtype)
    x = np.asarray(np.round(rng.standard_normal(shape) * 4) / 2)
    specials = [np.nan, -np.nan, -0.0, 0.0, np.inf, -np.inf, 1e-40 if dtype == "float32" else 0]
    where = rng.random(shape) < 0.2
    x[where] = rng.choice(specials, int(where.sum()))
    return x.astype(np.float32).astype(np_dtype)


def one_op(name, types, **attrs):
    b = Builder()
    xs = params(types)
    op = b.create(name, list(xs), attrs)
    return b.function(name, xs, list(op.results))


def bits(x, nan_bits=True):
    """The bits of ``x``; without ``nan_bits`` every NaN is one NaN."""
    x = np.asarray(x)
    if x.dtype == np.bool_:
        return x
    out = x.view(f"uint{8 * x.dtype.itemsize}").copy()
    if not nan_bits and x.dtype.kind in "fV":
        out[np.isnan(np.asarray(x, np.float32))] = 0
    return out


def assert_all_agree(fn, *args, nan_bits=True):
    """interpret == compile == to_jax, bit for bit (NaN payloads and signs too if
    ``nan_bits``: arithmetic leaves a NaN's sign to the backend, moving ops keep it)."""
    want = minipallas.interpret(fn, *args)
    for way, got in (("compile", minipallas.compile(fn)(*args)), ("to_jax", to_jax(fn)(*args))):
        for k, (w, g) in enumerate(zip(want, got, strict=True)):
            w, g = np.asarray(w), np.asarray(g)
            assert w.dtype == g.dtype and w.shape == g.shape, (way, k)
            same = np.array_equal(bits(w, nan_bits), bits(g, nan_bits))
            assert same, f"{fn.name} {way} result {k}:\n{w}\n{g}"


@pytest.mark.parametrize("dtype", DTYPES)
def test_reverse_and_pad(dtype):
    rng = np.random.default_rng(1)
    t = ArrayType((3, 5), dtype)
    x = sample(rng, t.shape, dtype)
    assert_all_agree(one_op("reverse", [t], dims=(0, 1)), x)
    pad = one_op("pad", [t, ArrayType((), dtype)], low=(1, -2), high=(-1, 3), interior=(2, 1))
    assert pad.result_types[0].shape == (1 + 3 + 4 - 1, -2 + 5 + 4 + 3)
    assert_all_agree(pad, x, sample(rng, (), dtype))


@pytest.mark.parametrize("dtype", [*DTYPES, "float16"])
@pytest.mark.parametrize("name", ["cumsum", "cumprod", "cummax", "cummin"])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumulative(name, dtype, reverse):
    """Lengths below, at and past XLA's base of 16, and past 16 * 16 (two levels of tree)."""
    rng = np.random.default_rng(2)
    for n in (1, 17, 300) if dtype in ("float32", "bfloat16") else (1, 40):
        t = ArrayType((2, n), dtype)
        x = sample(rng, t.shape, dtype)
        if name == "cumprod" and mp_dtypes.is_float(dtype):
            x = (1 + rng.standard_normal(t.shape) / 8).astype(np.float32).astype(x.dtype)
        assert_all_agree(one_op(name, [t], axis=1, reverse=reverse), x, nan_bits=False)
    t = ArrayType((40, 3), dtype)
    x = sample(rng, t.shape, dtype)
    assert_all_agree(one_op(name, [t], axis=0, reverse=reverse), x, nan_bits=False)


def test_cumsum_starts_from_the_identity():
    """XLA adds each window to +0: a cumsum of -0.0 is +0.0 (the interpreter says so too)."""
    fn = one_op("cumsum", [ArrayType((3,), "float32")], axis=0, reverse=False)
    (out,) = minipallas.interpret(fn, np.array([-0.0, -0.0, 1e-40], np.float32))
    assert np.array_equal(bits(out), bits(np.zeros(3, np.float32)))
    assert_all_agree(fn, np.array([-0.0, -0.0, 1e-40], np.float32))


@pytest.mark.parametrize("dtype", DTYPES)
def test_reduce_prod(dtype):
    rng = np.random.default_rng(3)
    t = ArrayType((4, 3, 6), dtype)
    fn = one_op("reduce_prod", [t], axes=(0, 2))
    x = sample(rng, t.shape, dtype)
    if not mp_dtypes.is_float(dtype):
        assert_all_agree(fn, x)
        return
    x = (1 + rng.standard_normal(t.shape) / 4).astype(np.float32).astype(x.dtype)
    (want,) = minipallas.interpret(fn, x)
    (got,) = minipallas.compile(fn)(x)
    eps = float(ml_dtypes.finfo(x.dtype).eps)
    bound = 24 * eps * np.abs(np.asarray(want, np.float64))  # n roundings of a product
    assert np.all(np.abs(np.asarray(want, np.float64) - np.asarray(got, np.float64)) <= bound)


@pytest.mark.parametrize("dtype", [*DTYPES, "bool"])
def test_sort_one_key_and_argsort(dtype):
    rng = np.random.default_rng(4)
    t = ArrayType((3, 33), dtype)
    x = sample(rng, t.shape, dtype)
    assert_all_agree(one_op("sort", [t], dimension=1, num_keys=1), x)
    iota = np.broadcast_to(np.arange(3, dtype=np.int32)[:, None], t.shape).copy()
    pair = one_op("sort", [t, ArrayType(t.shape, "int32")], dimension=0, num_keys=1)
    assert_all_agree(pair, x, iota)


def test_sort_two_keys_and_jnp_order():
    """Lexicographic on two keys; -0 ties +0, subnormals tie zeros, NaNs tie and come last."""
    rng = np.random.default_rng(5)
    t, u = ArrayType((64,), "float32"), ArrayType((64,), "int32")
    fn = one_op("sort", [t, u, u], dimension=0, num_keys=2)
    x, y = sample(rng, t.shape, "float32"), rng.integers(0, 3, 64).astype(np.int32)
    assert_all_agree(fn, x, y, np.arange(64, dtype=np.int32))
    x = np.array([1e-40, 0.0, -0.0, np.nan, -np.nan, -1e-40, 1.0], np.float32)
    seven = [ArrayType((7,), "float32"), ArrayType((7,), "int32"), ArrayType((7,), "int32")]
    (_, _, order) = minipallas.interpret(
        one_op("sort", seven, dimension=0, num_keys=1),
        x,
        np.zeros(7, np.int32),
        np.arange(7, dtype=np.int32),
    )
    assert order.tolist() == [0, 1, 2, 5, 6, 3, 4]


@pytest.mark.parametrize("dtype", [*DTYPES, "bool"])
def test_top_k(dtype):
    rng = np.random.default_rng(6)
    t = ArrayType((3, 20), dtype)
    x = sample(rng, t.shape, dtype)
    for k in (0, 1, 7, 20):
        assert_all_agree(one_op("top_k", [t], k=k), x)


def test_top_k_total_order():
    fn = one_op("top_k", [ArrayType((6,), "float32")], k=6)
    x = np.array([-0.0, np.nan, 0.0, -np.nan, np.inf, 1e-40], np.float32)
    (_, index) = minipallas.interpret(fn, x)
    assert index.tolist() == [1, 4, 5, 2, 0, 3]
    assert_all_agree(fn, x)


@pytest.mark.parametrize("dtype", [*DTYPES, "bool"])
@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_argmax(name, dtype):
    rng = np.random.default_rng(7)
    t = ArrayType((5, 12), dtype)
    x = sample(rng, t.shape, dtype)
    for axis in (0, 1):
        assert_all_agree(one_op(name, [t], axis=axis, dtype="int32"), x)
    x = np.array([1.0, -0.0, np.nan, 0.0, np.nan, 3.0], np.float32)
    (i,) = minipallas.interpret(
        one_op(name, [ArrayType((6,), "float32")], axis=0, dtype="int32"), x
    )
    assert int(i) == 2  # the first NaN wins
