"""Imported programs wrap a negative index once, never twice.

jax.numpy indexing and ``lax.dynamic_slice`` put their wrap in the jaxpr (``lt``, ``add``,
``select_n``); the importer keeps those ops and adds none (minipallas's own ops clamp), while
a state ``get``/``swap`` (whose wrap upstream adds in discharge) gets exactly one. An index of
-5 on a dimension of 4 tells them apart: once wrapped it is -1 and clamps to 0, twice it is 3.
The front end's wrap (``minipallas.trace``) exported by ``to_jax`` and imported back is still
one wrap (``to_jax`` clamps the wrapped index, so the wrap jax adds after it never fires).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from interop_helpers import I32, arr, check, ref, upstream
from jax import lax

import minipallas
from minipallas.interop import from_jaxpr, to_jax

X = np.arange(24, dtype=np.float32).reshape(4, 6)
VALUES = [-9, -5, -4, -1, 0, 3, 7]


def selects(fn):
    return sum(op.name == "select" for op in fn.walk())


def select_ns(closed):
    return sum(e.primitive.name == "select_n" for e in closed.jaxpr.eqns)


@pytest.mark.parametrize("i", VALUES)
@pytest.mark.parametrize(
    "f",
    [
        lambda x, i: x[i],
        lambda x, i: x[i, 1:3],
        lambda x, i: x[i + jnp.arange(-1, 2)],
        lambda x, i: lax.dynamic_slice(x, (i, i), (2, 3)),
        lambda x, i: lax.dynamic_update_slice(x, jnp.zeros((2, 2)), (i, 0)),
    ],
    ids=["int", "int-and-slice", "array", "dynamic_slice", "dynamic_update_slice"],
)
def test_jax_numpy_and_lax_wraps_are_imported_as_they_are(f, i):
    closed = jax.make_jaxpr(f)(arr((4, 6)), I32)
    fn = check(f, arr((4, 6)), I32, args=[X, np.int32(i)])
    assert selects(fn) == select_ns(closed)  # the jaxpr's wraps, and no more


@pytest.mark.parametrize("i", VALUES)
def test_a_state_index_gets_one_wrap(i):
    def f(x_ref, i):
        return x_ref[i]

    fn = check(f, ref((4, 6)), I32, args=[X, np.int32(i)])
    assert selects(fn) == 1


@pytest.mark.parametrize("i", VALUES)
def test_the_front_ends_wrap_survives_export_and_import_once(i):
    def f(x_ref, i):
        a = x_ref[i, minipallas.ds(i, 2)]
        x_ref[minipallas.ds(i, 2), 0] = minipallas.numpy.zeros((2,), minipallas.numpy.float32)
        return a

    traced = minipallas.trace(
        f, minipallas.RefType((4, 6), "float32"), minipallas.ArrayType((), "int32")
    )
    exported = jax.make_jaxpr(to_jax(traced))(arr((4, 6)), I32)
    back = from_jaxpr(exported)
    want = upstream(exported, [X, np.int32(i)])
    got = minipallas.compile(back)(X, np.int32(i))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    x = X.copy()
    (a,) = minipallas.interpret(traced, x, np.int32(i))
    np.testing.assert_array_equal(a, want[0])
    np.testing.assert_array_equal(x, want[1])


def test_kernel_indices_imported_from_pallas_call_wrap_once():
    from jax.experimental import pallas as pl

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[pl.program_id(0) - 1][None, :]

    call = pl.pallas_call(
        kernel,
        jax.ShapeDtypeStruct((4, 6), jnp.float32),
        grid=(4,),
        in_specs=[pl.BlockSpec((4, 6), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((1, 6), lambda i: (i, 0)),
        interpret=True,
    )
    closed = jax.make_jaxpr(call)(arr((4, 6)))
    fn = from_jaxpr(closed)
    (got,) = minipallas.compile(fn)(X)
    np.testing.assert_array_equal(got, np.asarray(jax.jit(call)(X)))
    np.testing.assert_array_equal(got[0], X[3])
