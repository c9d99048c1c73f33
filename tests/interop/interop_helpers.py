"""Shared checks for the interop tests: trace an upstream program, import it, and compare
minipallas (interpret, compile, to_jax) with upstream (``discharge_state`` + evaluation)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

import minipallas
from minipallas.interop import from_jaxpr, to_jax
from minipallas.lowering.compat.jax_private import core as jax_core
from minipallas.lowering.compat.jax_private import state_discharge, state_types


def ref(shape, dtype=jnp.float32, space=None):
    return state_types.AbstractRef(jax_core.ShapedArray(tuple(shape), np.dtype(dtype)), space)


def arr(shape, dtype=jnp.float32):
    return jax_core.ShapedArray(tuple(shape), np.dtype(dtype))


I32 = arr((), jnp.int32)


def sample(aval, rng):
    """A random input for an aval (a ref's initial value for a ref)."""
    inner = aval.inner_aval if isinstance(aval, state_types.AbstractRef) else aval
    shape, dtype = inner.shape, np.dtype(inner.dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-3, 7, shape).astype(dtype)
    return rng.standard_normal(shape).astype(np.float32).astype(dtype)


def upstream(closed, args):
    """Upstream's answer: ``discharge_state``, then evaluation under ``jax.jit``."""
    discharged = state_discharge.discharge_state(closed)
    outs = jax.jit(jax_core.jaxpr_as_fun(discharged))(*args)
    return [np.asarray(o) for o in outs]


def interpreted(fn, args):
    """minipallas's interpreter, in the discharged convention (results, then final refs)."""
    bound = [np.array(a) for a in args]
    results = minipallas.interpret(fn, *bound)
    refs = [
        b for p, b in zip(fn.params, bound, strict=True) if isinstance(p.type, minipallas.RefType)
    ]
    return [*results, *refs]


def _bits(x):
    x = np.asarray(x)
    if x.dtype == ml_dtypes.bfloat16 or x.dtype == np.float16:
        return x.view(np.uint16).astype(np.int64), np.isnan(x.astype(np.float32))
    if x.dtype == np.float32:
        return x.view(np.uint32).astype(np.int64), np.isnan(x)
    return x, None


def assert_same(got, want, ulps=0, what="value"):
    """Equal dtype, shape and bits (any NaN equals any NaN; ``ulps`` allows float rounding)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    g, g_nan = _bits(got)
    w, w_nan = _bits(want)
    if g_nan is None:
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    assert (g_nan == w_nan).all(), f"{what}: NaN positions differ\n{got}\n{want}"
    same = (g == w) | (g_nan & w_nan)
    if ulps:
        with np.errstate(invalid="ignore"):
            close = np.abs(got.astype(np.float64) - want.astype(np.float64))
        scale = (
            65536 if want.dtype == ml_dtypes.bfloat16 else 8192 if want.dtype == np.float16 else 1
        )
        spacing = np.abs(np.spacing(want.astype(np.float32))) * ulps * scale
        same = same | (close <= spacing)
    assert same.all(), f"{what}: bits differ\n{got}\n{want}"


def assert_all_same(got, want, ulps=0, what=""):
    assert len(got) == len(want), f"{what}: {len(got)} outputs, expected {len(want)}"
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert_same(g, w, ulps, f"{what} output {k}")


def check(f, *avals, args=None, seed=0, ulps=0, compile=True, jax_too=True, **import_options):
    """Trace ``f`` upstream, import it, and compare every minipallas path with upstream.

    Returns the imported function. ``ulps`` relaxes the interpreter's comparison only (numpy
    transcendentals); compile and to_jax run XLA and must match upstream bit for bit.
    """
    closed = jax.make_jaxpr(f)(*avals)
    fn = from_jaxpr(closed, **import_options)
    minipallas.verify(fn)
    rng = np.random.default_rng(seed)
    if args is None:
        args = [sample(a, rng) for a in avals]
    want = upstream(closed, args)
    assert_all_same(interpreted(fn, args), want, ulps, "interpret")
    if compile:
        assert_all_same(list(minipallas.compile(fn)(*args)), want, 0, "compile")
    if jax_too:
        got = jax.jit(to_jax(fn))(*args)
        assert_all_same([np.asarray(g) for g in got], want, 0, "to_jax")
    return fn
