"""Traced arrays: operators, dtype promotion and weak typing, broadcasting, reductions, dot,
indexing and ``minipallas.numpy``. Semantics are checked by running the traced program in the
reference interpreter against upstream ``jax.numpy`` (exact operations) or numpy.
"""

import itertools

import jax
import jax.numpy as real_jnp
import ml_dtypes
import numpy as np
import pytest
from frontend_helpers import arr, find, names, only, raises_at, ref, run, same, traced

import minipallas as mp
import minipallas.numpy as jnp
from minipallas.frontend.promotion import promote
from minipallas.ir import Array, Dyn, Int, Slice

DTYPES = ["bool", "int8", "int32", "uint32", "bfloat16", "float16", "float32"]


def against_jax(f, *args):
    """Traces ``f(minipallas.numpy, *xs)``, interprets it, and compares with
    ``f(jax.numpy, *xs)`` bit for bit."""
    fn = traced(lambda *xs: f(jnp, *xs), *[arr(a.shape, a.dtype) for a in args])
    (ours,) = run(fn, *args)
    theirs = np.asarray(jax.jit(lambda *xs: f(real_jnp, *xs))(*args))
    same(ours, theirs)
    return fn


# ----- promotion -----


@pytest.mark.parametrize("a, b", list(itertools.combinations_with_replacement(DTYPES, 2)))
def test_promotion_table_matches_jax(a, b):
    expected = jax.dtypes.canonicalize_dtype(real_jnp.promote_types(a, b)).name
    assert promote(a, b) == promote(b, a) == expected


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scalar", [True, 3, 2.5])
def test_python_scalars_are_weakly_typed_like_jax(dtype, scalar):
    fn = traced(lambda x: jnp.maximum(x, scalar), arr((2,), dtype))
    expected = real_jnp.maximum(real_jnp.zeros((2,), dtype), scalar).dtype
    assert fn.result_types == (arr((2,), np.dtype(expected).name),)


def test_mixed_dtypes_get_explicit_converts():
    fn = traced(lambda x, y: x + y, arr((4,), "int32"), arr((4,), "bfloat16"))
    convert, add = fn.body.ops
    assert (convert.name, convert.attrs["dtype"], convert.operands) == (
        "convert",
        "bfloat16",
        (fn.params[0],),
    )
    assert add.operands == (convert.result, fn.params[1])


def test_weak_scalar_is_a_constant_of_the_array_dtype():
    fn = traced(lambda x: x * 2.0, arr((4,), "bfloat16"))
    assert names(fn) == ["constant", "broadcast_in_dim", "mul"]
    assert fn.body.ops[0].result.type == arr((), "bfloat16")


def test_numpy_scalars_and_arrays_are_strongly_typed():
    fn = traced(lambda x: x * np.float32(2), arr((4,), "bfloat16"))
    assert fn.result_types == (arr((4,)),)
    fn = traced(lambda x: x + np.ones(4, np.int8), arr((4,), "int8"))
    assert fn.result_types == (arr((4,), "int8"),)


def test_int_scalar_out_of_range_for_the_array_dtype():
    def f(x):
        return x + 300

    with raises_at(f.__code__.co_firstlineno + 1, match="does not fit in int8"):
        mp.trace(f, arr((4,), "int8"))


def test_numpy_scalar_on_the_left_uses_our_operator():
    fn = traced(lambda x: np.float32(3) - x, arr((4,)))
    assert names(fn) == ["constant", "broadcast_in_dim", "sub"]


# ----- broadcasting -----


def test_broadcasting_inserts_broadcast_in_dim():
    fn = traced(lambda x, y: x * y, arr((8, 1)), arr((4,)))
    bx, by, mul = fn.body.ops
    assert (bx.attrs["shape"], bx.attrs["dims"]) == ((8, 4), (0, 1))
    assert (by.attrs["shape"], by.attrs["dims"]) == ((8, 4), (1,))
    assert mul.result.type == arr((8, 4))


def test_same_shapes_need_no_broadcast():
    assert names(traced(lambda x, y: x - y, arr((3,)), arr((3,)))) == ["sub"]


def test_shapes_that_do_not_broadcast():
    def f(x, y):
        return x + y

    with raises_at(f.__code__.co_firstlineno + 1, match=r"shapes \(3,\), \(4,\) do not"):
        mp.trace(f, arr((3,)), arr((4,)))


# ----- operators against jax.numpy -----

INTS = np.array([-7, -6, -1, 0, 1, 5, 7, 2**31 - 1], np.int32)
INT_DIVISORS = np.array([2, -2, 3, 0, -3, 2, -1, 7], np.int32)
FLOATS = np.array([-7.5, -6, -1, 0, 1.25, 5, np.inf, np.nan], np.float32)
FLOAT_DIVISORS = np.array([2, -2.5, 3, 0, -3, 0, 2, 1], np.float32)


@pytest.mark.parametrize(
    "op",
    [
        lambda ns, x, y: x // y,
        lambda ns, x, y: x % y,
        lambda ns, x, y: x / y,
        lambda ns, x, y: ns.floor_divide(x, y),
        lambda ns, x, y: ns.remainder(x, y),
        lambda ns, x, y: x + y * 3 - 1,
        lambda ns, x, y: -x,
        lambda ns, x, y: abs(x),
        lambda ns, x, y: x & y | ~x ^ y,
        lambda ns, x, y: ns.maximum(x, y) - ns.minimum(x, y),
        lambda ns, x, y: ns.where(x > y, x, 0),
        lambda ns, x, y: (x == y) | (x != 0) & (x <= y) ^ (x >= 1) | (x < -1),
    ],
)
def test_integer_operators_match_jax(op):
    against_jax(op, INTS, INT_DIVISORS)


def test_unsigned_floor_division_and_remainder_match_jax():
    x, y = np.array([7, 8, 0, 2**32 - 1], np.uint32), np.array([2, 3, 5, 0], np.uint32)
    against_jax(lambda ns, a, b: a // b, x, y)
    against_jax(lambda ns, a, b: a % b, x, y)


@pytest.mark.parametrize(
    "op",
    [
        lambda ns, x, y: x % y,
        lambda ns, x, y: x / y,
        lambda ns, x, y: x * y - x + 0.5,
        lambda ns, x, y: ns.where(x < y, -x, y),
        lambda ns, x, y: 1 / (x + 2),
        lambda ns, x, y: x > y,
    ],
)
def test_float_operators_match_jax(op):
    against_jax(op, FLOATS, FLOAT_DIVISORS)


def test_bool_comparisons_match_jax():
    a = np.array([True, True, False, False])
    b = np.array([True, False, True, False])
    against_jax(lambda ns, x, y: (x == y) ^ (x < y), a, b)
    fn = traced(lambda x, y: x >= y, arr((4,), "bool"), arr((4,), "bool"))
    assert names(fn) == ["convert", "convert", "ge"]


def test_true_divide_of_ints_is_float32():
    fn = against_jax(lambda ns, x, y: x / y, INTS, INT_DIVISORS)
    assert fn.result_types == (arr((8,)),)
    assert [op.attrs["dtype"] for op in find(fn, "convert")] == ["float32", "float32"]


def test_floor_division_of_floats_is_refused():
    def f(x):
        return x // 2.0

    with raises_at(f.__code__.co_firstlineno + 1, match="'//' on float32"):
        mp.trace(f, arr((4,)))


def test_builder_type_errors_are_trace_errors_at_the_line():
    def f(x):
        return ~x  # not on floats

    with raises_at(f.__code__.co_firstlineno + 1, match="'not': needs ints or bools"):
        mp.trace(f, arr((4,)))


# ----- shapes, reductions, dot, indexing -----


def test_shape_methods():
    def f(x):
        return x.T, x.reshape(2, -1), x.reshape((12,)), x.astype(jnp.int32), x.transpose(1, 0)

    fn = traced(f, arr((3, 4)))
    assert fn.result_types == (arr((4, 3)), arr((2, 6)), arr((12,)), arr((3, 4), "int32"),
                               arr((4, 3)))  # fmt: skip
    assert names(fn) == ["transpose", "reshape", "reshape", "convert", "transpose"]
    assert (
        traced(lambda x: x.astype(np.float32).reshape(3, 4).transpose(0, 1), arr((3, 4))).body.ops
        == ()
    )


@pytest.mark.parametrize(
    "f",
    [
        lambda ns, x: ns.sum(x),
        lambda ns, x: x.sum(axis=0),
        lambda ns, x: x.max(axis=-1, keepdims=True),
        lambda ns, x: ns.min(x, axis=(0, 1)),
        lambda ns, x: ns.sum(x > 0, axis=1),
        lambda ns, x: ns.sum(x.astype(ns.int8), axis=0),
    ],
)
def test_reductions_match_jax(f):
    x = np.arange(-6, 6, dtype=np.int32).reshape(3, 4)
    fn = against_jax(f, x)
    assert find(fn, "reduce_sum") or find(fn, "reduce_max") or find(fn, "reduce_min")


def test_dot_shapes_dtypes_and_values():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.arange(12, dtype=np.float32).reshape(3, 4)
    v = np.arange(3, dtype=np.float32)
    against_jax(lambda ns, x, y: x @ y, a, b)
    against_jax(lambda ns, x, y: ns.dot(x, y), v, a.T.copy())
    against_jax(lambda ns, x, y: ns.matmul(x, y), a, v)
    against_jax(lambda ns, x, y: ns.dot(x, y), v, v)
    fn = traced(
        lambda x, y: jnp.dot(x, y, preferred_element_type=jnp.float32),
        arr((2, 3), "bfloat16"),
        arr((3, 4), "bfloat16"),
    )
    op = only(fn, "dot")
    assert op.attrs["dtype"] == "float32" and fn.result_types == (arr((2, 4)),)


def test_dot_mistakes():
    def f(x, y):
        return jnp.dot(x, y)

    with raises_at(f.__code__.co_firstlineno + 1, match="contracting dimensions differ"):
        mp.trace(f, arr((2, 3)), arr((4, 4)))
    with raises_at(f.__code__.co_firstlineno + 1, match="1-D or 2-D"):
        mp.trace(f, arr((2, 3, 3)), arr((3, 4)))


def test_indexing_arrays():
    def f(x, i, idx):
        return x[1:3], x[i], x[idx], x[:, None], x[None, 0], x[...]

    fn = traced(f, arr((4, 5)), arr((), "int32"), arr((2,), "int32"))
    slice_op, dyn, gather = fn.body.ops[0], only(fn, "dynamic_slice"), only(fn, "gather")
    assert slice_op.name == "slice" and slice_op.attrs["indexer"][0] == Slice(1, 2, 1)
    assert dyn.name == "dynamic_slice" and dyn.attrs["indexer"][0] == Int(Dyn(0))
    assert gather.name == "gather" and gather.attrs["indexer"][0] == Array(Dyn(0))
    assert fn.result_types == (arr((2, 5)), arr((5,)), arr((2, 5)), arr((4, 1, 5)), arr((1, 5)),
                               arr((4, 5)))  # fmt: skip
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    idx = np.array([3, 0], np.int32)
    outs = run(fn, x, np.int32(2), idx)
    for got, want in zip(outs, [x[1:3], x[2], x[idx], x[:, None], x[None, 0], x], strict=True):
        same(got, want)


def test_iterating_an_array_indexes_its_rows():
    fn = traced(lambda x: tuple(x), arr((3, 2)))
    assert names(fn) == ["slice"] * 3 and fn.result_types == (arr((2,)),) * 3


# ----- minipallas.numpy -----


def test_creation_functions():
    def f(x_ref):
        return (
            jnp.zeros((2, 3)),
            jnp.ones(4, jnp.int8),
            jnp.full((2,), 1.5, "bfloat16"),
            jnp.zeros_like(x_ref),
            jnp.ones_like(x_ref, dtype=np.int32),
            jnp.full_like(x_ref, 7, shape=(3,)),
            jnp.arange(5),
            jnp.arange(2, 11, 3),
            jnp.arange(0.0, 1.0, 0.25),
            jnp.broadcasted_iota(jnp.int32, (2, 3), 1),
            jnp.iota(jnp.float32, 3),
            jnp.asarray([1, 2]),
        )

    fn = traced(f, ref((2, 2), "float16"))
    outs = run(fn, np.zeros((2, 2), np.float16))
    expected = [
        np.zeros((2, 3), np.float32),
        np.ones(4, np.int8),
        np.full((2,), 1.5, ml_dtypes.bfloat16),
        np.zeros((2, 2), np.float16),
        np.ones((2, 2), np.int32),
        np.full((3,), 7, np.float16),
        np.arange(5, dtype=np.int32),
        np.arange(2, 11, 3, dtype=np.int32),
        np.arange(0, 1, 0.25, dtype=np.float32),
        np.broadcast_to(np.arange(3, dtype=np.int32), (2, 3)),
        np.arange(3, dtype=np.float32),
        np.array([1, 2], np.int32),
    ]
    for got, want in zip(outs, expected, strict=True):
        same(got, want)


@pytest.mark.parametrize("name", ["exp", "log", "tanh", "sqrt", "sin", "cos", "logistic"])
def test_transcendentals_compute_ints_in_float32(name):
    fn = traced(lambda x: getattr(jnp, name)(x), arr((3,), "int32"))
    assert names(fn) == ["convert", name] and fn.result_types == (arr((3,)),)
    fn = traced(lambda x: getattr(jnp, name)(x), arr((3,), "bfloat16"))
    assert names(fn) == [name] and fn.result_types == (arr((3,), "bfloat16"),)


def test_rsqrt_and_sigmoid_names():
    fn = traced(lambda x: (jnp.rsqrt(x), jnp.sigmoid(x)), arr((3,)))
    assert names(fn) == ["rsqrt", "logistic"]


def test_elementwise_namespace_against_jax():
    x = np.array([-2, -1, 0, 1, 3], np.int32)
    y = np.array([1, -1, 2, 0, 3], np.int32)
    against_jax(
        lambda ns, a, b: ns.add(a, ns.multiply(b, 2)) - ns.subtract(a, ns.negative(b)),
        x,
        y,
    )
    against_jax(lambda ns, a, b: ns.logical_and(a, b) ^ ns.logical_not(ns.logical_or(a, b)), x, y)
    against_jax(lambda ns, a, b: ns.equal(a, b) | ns.less(a, b) & ns.greater_equal(a, 0), x, y)
    against_jax(lambda ns, a, b: ns.abs(a) + ns.power(b, 2), x, y)
    against_jax(lambda ns, a, b: ns.bitwise_xor(ns.bitwise_and(a, b), ns.invert(a)), x, y)
    against_jax(lambda ns, a, b: ns.squeeze(ns.expand_dims(a, 0)) * ns.broadcast_to(b, (5,)), x, y)
    against_jax(lambda ns, a, b: ns.transpose(ns.reshape(a * b, (5, 1))), x, y)


def test_abs_of_unsigned_and_bool_is_the_value():
    assert traced(lambda x: abs(x), arr((2,), "uint32")).body.ops == ()
    assert traced(lambda x: jnp.abs(x), arr((2,), "bool")).body.ops == ()


def test_dtypes_compare_like_jax():
    seen = []
    traced(lambda x, y: seen.extend([x.dtype == jnp.bfloat16, y.dtype == jnp.bool_]),
           arr((2,), "bfloat16"), arr((2,), "bool"))  # fmt: skip
    assert seen == [True, True]
    assert jnp.float32 is np.float32 and jnp.bfloat16 is ml_dtypes.bfloat16


@pytest.mark.parametrize(
    "bad, match",
    [
        (lambda x: x.astype("float64x"), "unsupported dtype 'float64x'"),
        (lambda x: jnp.zeros((2,), "complex64"), "unsupported dtype 'complex64'"),
        (lambda x: x.reshape(7), "cannot reshape shape"),
        (lambda x: x.sum(axis=2), "axis 2 is out of range"),
        (lambda x: x.transpose(0, 0), "not a permutation"),
        (lambda x: jnp.arange(x), "arange bounds must be static"),
        (lambda x: jnp.zeros(x), "shape must be static"),
        (lambda x: jnp.where(x, x), "missing"),
        (lambda x: jnp.squeeze(x, 0), "cannot squeeze"),
        (lambda x: jnp.broadcast_to(x, (3,)), "cannot broadcast shape"),
        (lambda x: len(x[0, 0]), "len\\(\\) of a 0-d array"),
    ],
)
def test_array_mistakes(bad, match):
    if match == "missing":
        with pytest.raises(TypeError):
            mp.trace(bad, arr((2, 4)))
        return
    with raises_at(bad.__code__.co_firstlineno, match=match):
        mp.trace(bad, arr((2, 4)))
