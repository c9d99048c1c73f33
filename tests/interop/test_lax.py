"""``lax`` primitives imported from upstream, each checked bit for bit against upstream on edge
values (NaN, infinities, signed zeros, integer extremes, zero divisors); transcendentals match
upstream exactly when compiled and within a few ulps when interpreted."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from interop_helpers import arr, check
from jax import lax

import minipallas
from minipallas.interop import from_jaxpr

EDGE_F32 = np.array(
    [0.0, -0.0, 1.0, -1.5, 2.5, 3.0, -7.25, 1e30, -1e30, np.inf, -np.inf, np.nan, 0.1, 65504.0,
     3e9, -3e9],
    np.float32,
)  # fmt: skip
EDGE_I32 = np.array(
    [0, 1, -1, 2, -2, 7, -7, 100, 2**31 - 1, -(2**31), 3, -3, 5, 31, 32, -33], np.int32
)
OTHER_I32 = np.array([1, 0, -1, 3, 0, -2, 2, 7, -1, -1, 0, 5, -5, 2, -3, 33], np.int32)


def values(dtype, k=0):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return np.tile([True, False] if k == 0 else [True, True, False, False], 8 if k == 0 else 4)
    if np.issubdtype(dtype, np.integer):
        base = EDGE_I32 if k == 0 else OTHER_I32
        return base.astype(dtype)
    return np.roll(EDGE_F32, k).astype(dtype)


def check_arrays(f, *dtypes, ulps=0, shapes=None):
    shapes = shapes or [(16,)] * len(dtypes)
    args = [values(d, k).reshape(s) for k, (d, s) in enumerate(zip(dtypes, shapes, strict=True))]
    avals = [arr(a.shape, a.dtype) for a in args]
    return check(f, *avals, args=args, ulps=ulps)


BINARY = ["add", "sub", "mul", "div", "rem", "max", "min"]


ARITHMETIC = [
    *[(name, d) for name in BINARY for d in ("float32", "bfloat16", "int32", "int8")],
    *[("pow", d) for d in ("float32", "bfloat16")],  # upstream's pow takes a float base
]


@pytest.mark.parametrize("name, dtype", ARITHMETIC)
def test_arithmetic(name, dtype):
    check_arrays(getattr(lax, name), dtype, dtype, ulps=2 if name == "pow" else 0)


def test_float_to_integer_pow_converts_the_exponent():
    check_arrays(lambda x, y: lax.pow(x, y), jnp.float32, jnp.int32, ulps=2)


@pytest.mark.parametrize("name", ["and", "or", "xor"])
@pytest.mark.parametrize("dtype", [jnp.int32, jnp.uint32, jnp.bool_])
def test_bitwise(name, dtype):
    check_arrays(
        {"and": lax.bitwise_and, "or": lax.bitwise_or, "xor": lax.bitwise_xor}[name], dtype, dtype
    )


@pytest.mark.parametrize("name", ["eq", "ne", "lt", "le", "gt", "ge"])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.int32, jnp.uint32, jnp.bool_])
def test_comparisons(name, dtype):
    check_arrays(getattr(lax, name), dtype, dtype)


EXACT_UNARY = [
    *[
        (name, d)
        for name in ("neg", "sign", "square")
        for d in ("float32", "bfloat16", "int32", "uint32")
    ],
    *[("abs", d) for d in ("float32", "bfloat16", "int32")],
    *[("not", d) for d in ("int32", "uint32", "bool")],
]


@pytest.mark.parametrize("name, dtype", EXACT_UNARY)
def test_exact_unary(name, dtype):
    check_arrays(lax.bitwise_not if name == "not" else getattr(lax, name), dtype)


@pytest.mark.parametrize("name", ["exp", "log", "tanh", "logistic", "sqrt", "rsqrt", "sin", "cos"])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_transcendentals(name, dtype):
    check_arrays(getattr(lax, name), dtype, ulps=4)


def test_is_finite_integer_pow_and_clamp():
    def f(x, lo):
        return (
            lax.is_finite(x),
            lax.integer_pow(x, 3),
            lax.integer_pow(x, -2),
            lax.integer_pow(x, 0),
            lax.integer_pow(x, 5),
            lax.clamp(-2.0, x, 2.0),
            lax.clamp(lo, x, lo + 1.0),
        )

    check_arrays(f, jnp.float32, jnp.float32)
    check_arrays(lambda i: (lax.integer_pow(i, 3), lax.clamp(-5, i, 6)), jnp.int32)


def test_select_n_with_bool_and_integer_predicates():
    def f(p, i, a, b, c):
        return lax.select_n(p, a, b), lax.select_n(i, a, b, c), lax.select_n(p[0], a, b)

    p = np.arange(16) % 3 == 0
    i = (np.arange(16) % 3).astype(np.int32)
    a, b, c = (values(jnp.float32, k) for k in range(3))
    check(f, arr((16,), jnp.bool_), arr((16,), jnp.int32), *[arr((16,))] * 3, args=[p, i, a, b, c])


@pytest.mark.parametrize(
    "source", [jnp.float32, jnp.bfloat16, jnp.int32, jnp.int8, jnp.uint32, jnp.bool_]
)
@pytest.mark.parametrize(
    "target", [jnp.float32, jnp.bfloat16, jnp.int32, jnp.int8, jnp.uint32, jnp.bool_]
)
def test_convert_element_type(source, target):
    check_arrays(lambda x: lax.convert_element_type(x, target), source)


def test_bitcast_convert_type():
    check_arrays(lambda x: lax.bitcast_convert_type(x, jnp.int32), jnp.float32)
    check_arrays(lambda x: lax.bitcast_convert_type(x, jnp.float32), jnp.uint32)


def test_shapes():
    def f(x):
        y = x.reshape(4, 4)
        return (
            lax.broadcast_in_dim(x[:4], (3, 4), (1,)),
            y.T,
            lax.transpose(y.reshape(2, 2, 4), (2, 0, 1)),
            lax.reshape(y, (2, 8), dimensions=(1, 0)),
            jnp.expand_dims(y, 1),
            lax.squeeze(y[:1], (0,)),
            lax.iota(jnp.int32, 5),
            lax.broadcasted_iota(jnp.float32, (2, 3), 1),
            jnp.copy(x),
            *lax.optimization_barrier((x, y)),
        )

    check_arrays(f, jnp.float32)


def test_implicit_size_one_broadcasting_becomes_explicit():
    """jax 0.10.2 lets lax binary ops stretch size-1 dimensions of same-rank operands."""

    def f(col, row, x):
        return (
            lax.add(col, row),
            lax.lt(row, col),
            lax.max(x, row),
            lax.sub(col, x),
            lax.pow(col, 2.0),
        )

    col, row = values(jnp.float32)[:4].reshape(4, 1), values(jnp.float32, 1)[:4].reshape(1, 4)
    x = values(jnp.float32, 2).reshape(4, 4)
    fn = check(f, arr((4, 1)), arr((1, 4)), arr((4, 4)), args=[col, row, x])
    stretched = {op.operands[0].type.shape for op in fn.walk() if op.name == "broadcast_in_dim"}
    assert {(4, 1), (1, 4)} <= stretched


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.int32, jnp.bool_])
def test_reductions(dtype):
    def f(x):
        y = x.reshape(4, 4)
        if np.dtype(dtype) == np.bool_:
            return jnp.any(y, axis=0), jnp.all(y, axis=1), jnp.any(y), y.max(axis=1), y.min(axis=0)
        return y.sum(axis=0), y.max(axis=1), y.min(axis=(0, 1)), lax.reduce_max(y[:0], (0,))

    small = np.arange(16, dtype=np.float32) % 5 - 2  # exact sums whatever the order
    x = small.astype(dtype) if np.dtype(dtype) != np.bool_ else small > 0
    check(f, arr((16,), dtype), args=[x])


@pytest.mark.parametrize(
    "shapes, numbers",
    [
        (((3, 4), (4, 5)), (((1,), (0,)), ((), ()))),
        (((4, 3), (4, 5)), (((0,), (0,)), ((), ()))),
        (((3, 4), (5, 4)), (((1,), (1,)), ((), ()))),
        (((3, 4), (4,)), (((1,), (0,)), ((), ()))),
        (((4,), (4, 5)), (((0,), (0,)), ((), ()))),
        (((4,), (4,)), (((0,), (0,)), ((), ()))),
        (((2, 3, 4), (2, 4, 5)), (((2,), (1,)), ((0,), (0,)))),  # jnp.matmul of stacks
        (((2, 6, 3, 4), (2, 6, 4, 5)), (((3,), (2,)), ((0, 1), (0, 1)))),
    ],
)
def test_dot_general_forms(shapes, numbers):
    def f(a, b):
        return lax.dot_general(a, b, numbers), lax.dot_general(
            a.astype(jnp.bfloat16),
            b.astype(jnp.bfloat16),
            numbers,
            preferred_element_type=jnp.float32,
        )

    rng = np.random.default_rng(0)
    args = [rng.integers(-3, 4, s).astype(np.float32) for s in shapes]  # exact in any order
    check(f, *[arr(s) for s in shapes], args=args)


def test_slices_and_updates():
    def f(x, i, u):
        y = x.reshape(4, 4)
        return (
            lax.slice(y, (1, 0), (3, 4), (1, 2)),
            lax.dynamic_slice(y, (i, 1), (2, 3)),
            lax.dynamic_slice(y, (-1, 9), (2, 2)),
            lax.dynamic_update_slice(y, u, (i, i)),
            jnp.concatenate([y, y[:1], y[1:3]], axis=0),
        )

    for i in (-5, 0, 3, 9):
        args = [values(jnp.float32), np.int32(i), np.ones((2, 2), np.float32)]
        check(f, arr((16,)), arr((), jnp.int32), arr((2, 2)), args=args)


@pytest.mark.parametrize("mode", [None, "clip", "fill", "promise_in_bounds"])
def test_gathers_jnp_indexing_produces(mode):
    def f(x, idx, i):
        y = x.reshape(4, 4)
        return (
            y.at[idx].get(mode=mode),
            y.at[idx, 1:].get(mode=mode),
            y.at[:, idx].get(mode=mode),
            y.at[idx, idx].get(mode=mode),
            y.at[i, idx].get(mode=mode),
        )

    idx = np.array([0, 3, -1, 5, -9], np.int32)
    check(
        f,
        arr((16,)),
        arr((5,), jnp.int32),
        arr((), jnp.int32),
        args=[values(jnp.float32), idx, np.int32(2)],
    )


@pytest.mark.parametrize("mode", [None, "clip", "drop", "promise_in_bounds"])
def test_scatters_jnp_indexing_produces(mode):
    def f(x, idx, u):
        y = x.reshape(4, 4)
        return (
            y.at[idx].set(u, mode=mode),
            y.at[idx].add(u, mode=mode),
            y.at[idx, 2].set(u[:, 0], mode=mode),
            y.at[:, idx].add(u.T, mode=mode),
        )

    idx = np.array([1, 3, 5, -9, 2], np.int32)  # no duplicates: their order is unspecified
    u = np.arange(20.0, dtype=np.float32).reshape(5, 4)
    check(f, arr((16,)), arr((5,), jnp.int32), arr((5, 4)), args=[values(jnp.float32), idx, u])


def test_unsupported_primitive_names_it_and_the_user_line():
    def f(x):
        return lax.lgamma(x)  # the next line number is what the error must name

    line = f.__code__.co_firstlineno + 1
    with pytest.raises(minipallas.MiniPallasError, match="lgamma") as info:
        from_jaxpr(jax.make_jaxpr(f)(1.0))
    assert f"{__file__}:{line}" in str(info.value)


def test_unsupported_dtype_is_an_error():
    with pytest.raises(minipallas.MiniPallasError, match="complex64"):
        from_jaxpr(jax.make_jaxpr(lambda x: x + 1)(np.complex64(1)))
