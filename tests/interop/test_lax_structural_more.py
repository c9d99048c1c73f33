"""``lax.cumlogsumexp`` and ``jnp.tile`` over refs: upstream (discharge_state + XLA), the import
interpreted, discharged and compiled agree bit for bit; cumlogsumexp also in bfloat16/float16,
reversed, and over lengths that take XLA's one-window and tree paths."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

import minipallas as mp
from minipallas.interop import from_jaxpr
from minipallas.tools.difftest import Case, ref, run


def _input(shape, dtype=np.float32, seed=0) -> np.ndarray:
    x = (np.random.default_rng(seed).standard_normal(shape) * 5).astype(dtype)
    x[0, 2], x[1, 3], x[2, 4], x[2, 5] = np.nan, np.inf, -np.inf, -0.0
    return x


PROGRAMS = {
    "cumlogsumexp": lambda a: lax.cumlogsumexp(a, axis=1),
    "cumlogsumexp_reverse_axis0": lambda a: lax.cumlogsumexp(a, axis=0, reverse=True),
    "tile": lambda a: jnp.tile(a, (2, 3))[:4, :40] + jnp.tile(a[:1, :10], (1, 4)),
    "tile_rank_up": lambda a: jnp.tile(a, (2, 1, 1)).sum(0),
}


@pytest.mark.parametrize("name", PROGRAMS)
def test_import_agrees_with_upstream(name):
    f = PROGRAMS[name]

    def kernel(o_ref, a_ref):
        o_ref[...] = f(a_ref[...])

    x = _input((4, 40))
    report = run(Case(name, kernel, (ref(np.zeros_like(x)), ref(x))))
    assert report.ok, report.text()
    assert set(report.outcomes) >= {"upstream", "interpret", "discharge", "compile"}


def _bits(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).view(f"uint{8 * np.asarray(x).itemsize}")


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.float16], ids=str)
def test_cumlogsumexp_is_bit_for_bit_by_dtype_and_length(dtype):
    for n, reverse in ((1, False), (7, True), (17, False), (100, True)):
        x = _input((3, max(n, 6)), dtype, seed=n)[:, :n]

        def f(a, reverse=reverse):
            return lax.cumlogsumexp(a, axis=1, reverse=reverse)

        upstream = np.asarray(jax.jit(f)(x))
        fn = from_jaxpr(jax.make_jaxpr(f)(x))
        where = f"{np.dtype(dtype).name} n={n} reverse={reverse}"
        np.testing.assert_array_equal(_bits(mp.interpret(fn, x)[0]), _bits(upstream), where)
        np.testing.assert_array_equal(_bits(mp.compile(fn)(x)[0]), _bits(upstream), where)


def test_cumlogsumexp_of_integers_is_refused_by_the_verifier():
    with pytest.raises(mp.MiniPallasError, match="cumlogsumexp.*needs floats"):
        mp.parse(
            """
            func @f(%x: i32[4]) -> (i32[4]) {
              %y = cumlogsumexp %x, axis 0 : i32[4]
              return %y
            }
            """
        )


def test_tile_imports_as_a_broadcast_and_a_reshape():
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    fn = from_jaxpr(jax.make_jaxpr(lambda a: jnp.tile(a, (2, 3)))(x))
    assert [op.name for op in fn.body.ops] == ["broadcast_in_dim", "reshape"]
    np.testing.assert_array_equal(mp.interpret(fn, x)[0], np.tile(x, (2, 3)))
