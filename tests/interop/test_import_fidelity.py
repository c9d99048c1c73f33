"""Issue 39's import gaps (section 3): what upstream TPU kernels use that once did not import.

- a stride-0 read, ``x_ref[pl.ds(i, n, stride=0)]``: Mosaic's broadcast read. Upstream's
  interpret mode cannot run one (a static start divides by zero, a dynamic one reads ``n``
  rows from ``i``), so the reference is the chip's bits: measured on a v5e, upstream's kernel
  and minipallas's Mosaic module both give row ``i`` ``n`` times, which is numpy's broadcast;
- ``jax.random`` with threefry keys in a kernel (``threefry2x32`` and the key primitives),
  against upstream's interpret mode;
- ``lt_to`` / ``le_to`` / ``eq_to`` (XLA's total order), hence ``jnp.searchsorted``,
  ``jnp.histogram`` and megablox's ``gmm``, against upstream on the CPU.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import minipallas as mp
from minipallas.interop import JaxprImportError
from minipallas.interop.importer.rules.kernel_call import kernel_from_jaxpr
from minipallas.kernels.programs.choose import lower_for_target

X = (np.arange(16 * 128) % 1000).astype(np.float32).reshape(16, 128)


def _bits(x):
    return np.asarray(x).tobytes()


def _agrees(f, *args):
    """``f``'s import interprets and compiles (discharge included) to ``f``'s bits."""
    want = [np.asarray(w) for w in jax.tree.leaves(jax.jit(f)(*args))]
    fn = mp.from_jaxpr(jax.make_jaxpr(f)(*args))
    for got in (mp.interpret(fn, *args), mp.compile(fn)(*args)):
        assert [_bits(g) for g in got] == [_bits(w) for w in want]
    return fn


# --- stride-0 reads --------------------------------------------------------------------------


def _static(x_ref, o_ref):
    o_ref[...] = x_ref[pl.ds(3, 8, stride=0), :]


def _dynamic(x_ref, o_ref):
    o_ref[...] = x_ref[pl.ds(pl.program_id(0) + 5, 8, stride=0), :]


def _pltpu_load(x_ref, o_ref):
    o_ref[...] = pltpu.load(x_ref.at[pl.ds(pl.program_id(0) + 6, 8, stride=0), :])


def _lanes(x_ref, o_ref):
    o_ref[...] = x_ref[pl.ds(0, 8), pl.ds(5, 128, stride=0)]


def _stride0_call(kernel, grid=1):
    out = jax.ShapeDtypeStruct((8, 128), jnp.float32)
    return pl.pallas_call(kernel, out_shape=out, grid=(grid,))


@pytest.mark.parametrize(
    "kernel, grid, expected",
    [
        (_static, 1, np.broadcast_to(X[3], (8, 128))),
        (_dynamic, 2, np.broadcast_to(X[6], (8, 128))),  # the last step's row, 1 + 5
        (_pltpu_load, 2, np.broadcast_to(X[7], (8, 128))),
        (_lanes, 1, np.broadcast_to(X[:8, 5:6], (8, 128))),
    ],
    ids=["static", "dynamic", "pltpu_load", "lanes"],
)
def test_a_stride_zero_read_is_a_broadcast_on_every_target(kernel, grid, expected):
    closed = jax.make_jaxpr(_stride0_call(kernel, grid))(X)
    fn = mp.from_jaxpr(closed)
    assert _bits(mp.interpret(fn, X)[0]) == _bits(expected)
    assert _bits(mp.interpret(mp.discharge(fn), X)[0]) == _bits(expected)
    assert _bits(mp.compile(fn)(X)[0]) == _bits(expected)
    # Mosaic: one row (column) loaded, then broadcast; libtpu compiles it after the test
    module = lower_for_target(kernel_from_jaxpr(closed, memory_space=mp.tpu.VMEM), "tpu").as_text()
    assert "vector.broadcast" in module and "strided_load" not in module


def test_upstreams_interpret_mode_cannot_run_a_stride_zero_read():
    """Why the reference above is the chip's broadcast, not upstream's interpret mode."""
    out = jax.ShapeDtypeStruct((8, 128), jnp.float32)
    with pytest.raises(ZeroDivisionError):
        pl.pallas_call(_static, out_shape=out, interpret=True)(X)


def test_a_write_through_a_stride_zero_slice_is_refused_with_a_fix():
    def kernel(x_ref, o_ref):
        o_ref[pl.ds(0, 8, stride=0), :] = x_ref[pl.ds(0, 8), :]

    with pytest.raises(JaxprImportError, match="stride-0 slice") as e:
        mp.from_jaxpr(jax.make_jaxpr(_stride0_call(kernel))(X))
    assert "pl.ds(i, 1)" in e.value.fix


# --- threefry in a kernel --------------------------------------------------------------------


def test_threefry_in_a_kernel_matches_upstreams_interpret_mode():
    def kernel(s_ref, x_ref, bits_ref, uniform_ref):
        key = jax.random.fold_in(jax.random.key(s_ref[0]), pl.program_id(0))
        first, second = jax.random.split(key)
        small = jax.random.bits(jax.random.key(7, impl="threefry2x32"), (8, 128), jnp.uint8)
        bits_ref[...] = jax.random.bits(first, (8, 128)) ^ small.astype(jnp.uint32)
        uniform_ref[...] = x_ref[...] + jax.random.uniform(second, (8, 128))

    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    call = pl.pallas_call(
        kernel,
        out_shape=[jax.ShapeDtypeStruct((16, 128), t) for t in (jnp.uint32, jnp.float32)],
        grid=(2,),
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), spec],
        out_specs=[spec, spec],
        interpret=True,
    )
    _agrees(call, np.array([-3], np.int32), X)


def test_threefry2x32_broadcasts_its_keys_over_its_counts():
    counts = np.arange(12, dtype=np.uint32).reshape(3, 4) * np.uint32(0x9E3779B9)
    fn = _agrees(
        jax.extend.random.threefry2x32_p.bind,
        np.uint32(0xDEADBEEF),
        np.uint32(5),
        counts,
        counts[::-1].copy(),
    )
    assert {op.name for op in fn.walk()} >= {"add", "xor", "shift_left", "shift_right_logical"}


def test_a_key_input_is_its_key_data():
    key = jax.random.split(jax.random.key(3), 2)
    fn = mp.from_jaxpr(jax.make_jaxpr(lambda k: jax.random.bits(k[1], (5,)))(key))
    assert str(fn.params[0].type) == "u32[2,2]"
    data = np.asarray(jax.random.key_data(key))
    assert _bits(mp.compile(fn)(data)[0]) == _bits(jax.random.bits(key[1], (5,)))


def _hardware_prng(o_ref):
    pltpu.prng_seed(3)
    o_ref[...] = pltpu.prng_random_bits((8, 128))


@pytest.mark.parametrize(
    "program, message",
    [
        (lambda: jax.random.bits(jax.random.key(1, impl="rbg"), (4,)), "'rbg'"),
        (pl.pallas_call(_hardware_prng, jax.ShapeDtypeStruct((8, 128), jnp.int32)), "hardware"),
    ],
    ids=["rbg", "pltpu_prng"],
)
def test_another_prng_is_refused_with_a_fix(program, message):
    with pytest.raises(JaxprImportError, match=message) as e:
        mp.from_jaxpr(jax.make_jaxpr(program)())
    assert "threefry" in e.value.fix


# --- total order, searchsorted, histogram, megablox ------------------------------------------

SPECIALS = np.array(
    [0.5, -0.0, 0.0, np.nan, -np.nan, np.inf, -np.inf, 1e-40, -1e-40, 2.0, -3.5, 1.0],
    np.float32,
)


@pytest.mark.parametrize("name", ["lt_to", "le_to", "eq_to"])
@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16, np.int32])
def test_total_order_comparisons_match_upstream(name, dtype):
    """-NaN < -inf < -0.0 < +0.0 < subnormals < +inf < +NaN, subnormals not flushed."""
    x = np.array([0, 1, -1, 7, -(2**31), 2**31 - 1], dtype) if dtype == np.int32 else SPECIALS
    x = x.astype(dtype)
    a, b = np.repeat(x, x.size), np.tile(x, x.size)
    _agrees(getattr(jax.lax, f"{name}_p").bind, a, b)


@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted_matches_upstream(side):
    edges = np.array([-np.inf, -2.0, 0.0, 1.0, 1.0, 2.0, np.inf, np.nan], np.float32)
    _agrees(lambda a, v: jnp.searchsorted(a, v, side=side), edges, SPECIALS)


def test_histogram_matches_upstream():
    x = np.random.default_rng(39).standard_normal(300).astype(np.float32)
    x[:4] = [-0.0, 0.0, np.nan, 2.0]  # on an edge, and outside every bin
    _agrees(lambda x, b: jnp.histogram(x, b), x, np.linspace(-2, 2, 9, dtype=np.float32))
    _agrees(lambda x: jnp.histogram(x, 5, range=(-1.0, 1.0)), x)


@pytest.mark.parametrize("name", ["gmm", "tgmm"])
def test_megablox_imports_and_compiles_to_upstreams_bits(name):
    """megablox's group metadata is a ``jnp.histogram``; with it, ``gmm`` / ``tgmm`` import."""
    from jax.experimental.pallas.ops.tpu.megablox.gmm import gmm, tgmm

    rng = np.random.default_rng(0)
    lhs = rng.standard_normal((512, 128)).astype(jnp.bfloat16)
    rhs = rng.standard_normal((4, 128, 128) if name == "gmm" else (512, 128))
    sizes = np.array([100, 200, 12, 200], np.int32)
    args = (lhs.T.copy() if name == "tgmm" else lhs, rhs.astype(jnp.bfloat16), sizes)

    def f(lhs, rhs, sizes):
        op = gmm if name == "gmm" else tgmm
        return op(lhs, rhs, sizes, tiling=(128, 128, 128), interpret=True)

    want = np.asarray(jax.jit(f)(*args))
    fn = mp.from_jaxpr(jax.make_jaxpr(f)(*args))
    assert _bits(mp.compile(fn)(*args)[0]) == _bits(want)
