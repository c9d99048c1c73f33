"""``jax.vmap`` of stateful programs imported from upstream, bit for bit against upstream.

jax's batching rules emit numpy integers in static parameters (``broadcast_in_dim``'s
``broadcast_dimensions`` is a tuple of ``np.int64`` when a swap's value is broadcast to a batched
index); minipallas's builder makes them Python ints. Upstream has no batching rule for
``run_state``, so the stateful programs here take refs or make them with ``jax.new_ref``.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from interop_helpers import arr, assert_all_same, check, ref

import minipallas
from minipallas.interop import from_jaxpr, to_jax

ROWS = np.array([[0, 1], [1, 2], [2, 0], [-1, 1]], np.int32)
X = np.arange(12.0, dtype=np.float32).reshape(4, 3) - 5.0


def stateful(r, i):
    r[i] = jnp.zeros(i.shape) + r[0]
    r[...] += 1.0
    return r[i] * 2.0


def numpy_int_params(closed):
    """(primitive, parameter) pairs whose value holds a numpy integer, sub-jaxprs included."""
    found = set()
    for eqn in closed.jaxpr.eqns:
        for name, value in eqn.params.items():
            values = value if isinstance(value, tuple) else (value,)
            if any(isinstance(v, np.integer) for v in values):
                found.add((eqn.primitive.name, name))
    return found


def test_batched_refs_and_indices_import_with_numpy_integer_dims():
    f = jax.vmap(stateful)
    avals = (ref((4, 3)), arr((4, 2), jnp.int32))
    assert ("broadcast_in_dim", "broadcast_dimensions") in numpy_int_params(
        jax.make_jaxpr(f)(*avals)
    )
    fn = check(f, *avals, args=[X, ROWS])
    assert "np." not in str(fn)


@pytest.mark.parametrize("ref_axis", [0, 1])
def test_vmap_over_a_new_ref_made_outside(ref_axis):
    def f(x, i, v):
        r = jax.new_ref(x)
        y = jax.vmap(stateful, in_axes=(ref_axis, 0))(r, i)
        r[0] += v
        return y, jax.freeze(r)

    x = X if ref_axis == 0 else X.T.copy()
    v = np.float32(0.5)
    closed = jax.make_jaxpr(f)(x, ROWS, v)
    fn = from_jaxpr(closed)
    want = [np.asarray(w) for w in jax.jit(f)(x, ROWS, v)]
    assert_all_same(list(minipallas.interpret(fn, x, ROWS, v)), want, 0, "interpret")
    assert_all_same(list(minipallas.compile(fn)(x, ROWS, v)), want, 0, "compile")
    got = jax.jit(to_jax(fn))(x, ROWS, v)
    assert_all_same([np.asarray(g) for g in got], want, 0, "to_jax")


def test_vmap_of_a_function_making_its_own_ref():
    def g(x, i):
        r = jax.new_ref(x)
        r[i] = r[0] * 2.0
        r[...] = jnp.broadcast_to(r[1], x.shape) + x
        return jax.freeze(r)

    f = jax.vmap(g)
    i = np.array([0, 1, 2, -1], np.int32)
    fn = from_jaxpr(jax.make_jaxpr(f)(X, i))
    want = [np.asarray(jax.jit(f)(X, i))]
    assert_all_same(list(minipallas.interpret(fn, X, i)), want, 0, "interpret")
    assert_all_same(list(minipallas.compile(fn)(X, i)), want, 0, "compile")
