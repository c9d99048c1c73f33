"""``stop_gradient``, ``add_any`` and ``multiple_of`` import, so ``jax.nn.softmax``,
``log_softmax``, ``logsumexp``, gradients and Pallas hints run: compile and to_jax bit for bit
with upstream, the interpreter within 1 ulp (XLA:CPU fuses softmax's division and the
gradient's multiply-adds, measured: 2 of 15 elements 1 ulp off)."""

import jax
import jax.numpy as jnp
import jax.scipy.special as special
import numpy as np
import pytest
from jax.experimental import pallas as pl

from tests.interop.interop_helpers import arr, check

X = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32) * 4


@pytest.mark.parametrize(
    "f",
    [
        jax.nn.softmax,
        lambda x: jax.nn.softmax(x, axis=0),
        jax.nn.log_softmax,
        jax.nn.logsumexp,
        lambda x: special.logsumexp(x, axis=1),
        jax.grad(lambda x: jnp.sum(x * x + jnp.sin(x) * x)),
    ],
    ids=["softmax", "softmax0", "log_softmax", "logsumexp", "scipy_logsumexp", "grad"],
)
def test_nn_functions_match_upstream(f):
    check(f, arr(X.shape), args=[X], ulps=1)


def test_add_any_and_multiple_of_compute_add_and_identity():
    def f(i, x):
        grad = jax.grad(lambda v: jnp.sum(v * v * v))(x)  # cotangents summed with add_any
        return grad, x[pl.multiple_of(i * 2, 2)]

    assert "add_any" in str(jax.make_jaxpr(f)(np.int32(1), X))
    check(f, arr((), jnp.int32), arr(X.shape), args=[np.int32(1), X])


def test_max_contiguous_is_the_identity():
    from jax.experimental.pallas import triton as plgpu

    def f(x):
        offsets = plgpu.max_contiguous(jnp.arange(8, dtype=jnp.int32) + 1, 8)
        return x[offsets] * 2.0

    assert "max_contiguous" in str(jax.make_jaxpr(f)(np.zeros(9, np.float32)))
    check(f, arr((9,)))


def test_an_optimization_barrier_keeps_xla_from_folding_through_it():
    """``(x + 1) - 1`` rounds twice; with 1 a constant XLA folds it to ``x``, unless the sum
    passes an optimization barrier, as upstream's does: imported as the op (not dropped), every
    path gives upstream's bits, which are not ``x``'s."""
    x = np.random.default_rng(1).standard_normal(64).astype(np.float32)

    def f(v):
        return jax.lax.optimization_barrier(v + 1.0) - 1.0

    fn = check(f, arr(x.shape), args=[x])
    assert "optimization_barrier" in str(fn)
    assert not np.array_equal(np.asarray(jax.jit(f)(x)), x)


def test_empty_is_an_uninitialized_value():
    import minipallas as mp

    fn = mp.from_jaxpr(jax.make_jaxpr(lambda: jax.lax.empty((2, 3), jnp.float32))())
    assert "uninitialized : f32[2,3]" in str(fn)
    (out,) = mp.interpret(fn)
    assert np.isnan(out).all()  # discharge's fill value for floats


@pytest.mark.parametrize("approx", [False, True])
def test_pallas_reciprocal_matches_upstreams_interpret_mode(approx):
    """``pl.reciprocal``: ``1 / x``; ``approx`` rounds ``x`` to bfloat16 first, the quotient
    staying float32, as XLA:CPU computes upstream's rule (issue 39's flash kernels use it)."""
    import minipallas as mp

    def kernel(x_ref, o_ref):
        o_ref[...] = pl.reciprocal(x_ref[...], approx=approx)

    x = (np.random.default_rng(1).standard_normal((8, 128)) * 3).astype(np.float32)
    out = jax.ShapeDtypeStruct(x.shape, x.dtype)

    def f(x):
        return pl.pallas_call(kernel, out_shape=out, interpret=True)(x)

    want = np.asarray(f(x))
    fn = mp.from_jaxpr(jax.make_jaxpr(f)(x))
    assert mp.interpret(fn, x)[0].tobytes() == want.tobytes()
    assert np.asarray(mp.compile(fn)(x)[0]).tobytes() == want.tobytes()


def test_axis_index_of_a_named_grid_axis_is_its_program_id():
    """``lax.axis_index`` of a pallas_call grid axis named in its ``GridSpec`` (upstream's
    interpret mode raises "Found an unbound axis name")."""
    import minipallas as mp

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + jax.lax.axis_index("i").astype(jnp.float32) * 10

    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    grid = pl.GridSpec(grid=(("i", 2),), in_specs=[spec], out_specs=spec)
    out = jax.ShapeDtypeStruct((16, 128), jnp.float32)
    x = np.arange(16 * 128, dtype=np.float32).reshape(16, 128)
    fn = mp.from_jaxpr(jax.make_jaxpr(lambda x: pl.pallas_call(kernel, out, grid_spec=grid)(x))(x))
    expected = x + np.repeat(np.arange(2, dtype=np.float32) * 10, 8)[:, None]
    np.testing.assert_array_equal(mp.interpret(fn, x)[0], expected)
    np.testing.assert_array_equal(np.asarray(mp.compile(fn)(x)[0]), expected)
