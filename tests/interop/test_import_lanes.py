"""Upstream's TPU vector primitives imported (``pltpu.roll``, ``pltpu.bitcast``), a
``lax.bitcast_convert_type`` across widths, and ``platform_index`` (what
``jnp.diagonal`` emits), each checked against upstream
(its own lowering of the primitive, evaluated by XLA) bit for bit: interpret, compile and
``to_jax``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from interop_helpers import I32, arr, check
from jax import lax
from jax.experimental.pallas import tpu as pltpu

import minipallas


@pytest.mark.parametrize("shift", [0, 3, 9, -4, 2**31 - 1])
@pytest.mark.parametrize("stride", [None, (2, 0), (5, 2)])
def test_roll_by_a_traced_shift_imports_and_agrees(shift, stride):
    kw = {} if stride is None else {"stride": stride[0], "stride_axis": stride[1]}
    x = np.arange(2 * 8 * 6, dtype=np.float32).reshape(2, 8, 6)

    def f(x, s):
        return pltpu.roll(x, s, 1, **kw)

    fn = check(f, arr((2, 8, 6)), I32, args=[x, np.int32(shift)])
    assert "roll " in str(fn)


def test_roll_by_a_static_shift_imports_its_literal_as_an_i32_scalar():
    fn = check(lambda x: pltpu.roll(x, 5, 0) * 2, arr((8, 4), jnp.int32))
    assert "constant 5 : i32[]" in str(fn)


def test_roll_in_a_pallas_call_matches_upstreams_interpret_mode():
    from jax.experimental import pallas as pl

    from minipallas.interop import from_jaxpr

    def kernel(x_ref, o_ref):
        o_ref[...] = pltpu.roll(x_ref[...], pl.program_id(0) + 1, 1, stride=1, stride_axis=0)

    call = pl.pallas_call(kernel, jax.ShapeDtypeStruct((16, 128), jnp.float32), grid=(2,),
                          in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                          out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)))  # fmt: skip
    x = np.random.default_rng(0).standard_normal((16, 128)).astype(np.float32)
    want = np.asarray(jax.jit(pl.pallas_call(
        kernel, jax.ShapeDtypeStruct((16, 128), jnp.float32), grid=(2,),
        in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)), interpret=True))(x))  # fmt: skip
    fn = from_jaxpr(jax.make_jaxpr(call)(x))
    (got,) = minipallas.compile(fn)(x)
    assert np.asarray(got).tobytes() == want.tobytes()


@pytest.mark.parametrize("shape", [(6, 6), (5, 7), (4, 4)])
def test_diagonal_imports_its_platform_index_and_picks_the_cpu_branch(shape):
    """A square ``jnp.diagonal`` is ``lax.platform_dependent`` (a mosaic branch that multiplies
    by the identity and sums, a default one that gathers); the CPU takes the default."""
    fn = check(jnp.diagonal, arr(shape))
    assert ('platform_index ("mosaic"), default' in str(fn)) == (shape[0] == shape[1])


def test_platform_dependent_picks_the_branch_naming_the_platform():
    def f(x):
        return lax.platform_dependent(x, cpu=lambda x: x * 2.0, tpu=lambda x: x * 3.0,
                                      default=lambda x: x - 1.0)  # fmt: skip

    x = np.arange(4, dtype=np.float32)
    fn = check(f, arr((4,)), args=[x])
    assert "platform_index" in str(fn)
    assert minipallas.interpret(fn, x)[0].tolist() == (x * 2).tolist()


def test_a_platform_index_without_a_branch_for_the_platform_is_refused_with_a_fix():
    fn = minipallas.parse(
        """func @f() -> (i32[]) {
  %i = platform_index ("tpu") : i32[]
  return %i
}"""
    )
    with pytest.raises(minipallas.MiniPallasError, match="no branch for the CPU") as info:
        minipallas.interpret(fn)
    assert "cpu= or default=" in str(info.value) and "2:" in str(info.value)
    with pytest.raises(minipallas.MiniPallasError, match="no branch for the CPU"):
        minipallas.compile(fn)


def _random_bits(shape, dtype):
    size = int(np.prod(shape)) * jnp.dtype(dtype).itemsize
    bits = np.random.default_rng(size).integers(0, 256, size, np.uint8)
    return bits.view(jnp.dtype(dtype)).reshape(shape)


@pytest.mark.parametrize(
    ("source", "target", "shape"),
    [
        ("int32", "int16", (2, 8, 128)),
        ("int32", "bfloat16", (8, 128)),
        ("int32", "int8", (8, 4)),
        ("uint8", "float32", (8, 3)),
        ("int16", "int32", (6, 5)),
        ("float32", "uint32", (3, 2)),
    ],
)
def test_pltpu_bitcast_imports_as_packed_bitcast_and_agrees(source, target, shape):
    x = _random_bits(shape, source)
    fn = check(lambda x: pltpu.bitcast(x, target), arr(shape, source), args=[x])
    assert "packed_bitcast" in str(fn)


@pytest.mark.parametrize(
    ("source", "target", "shape"),
    [("int32", "int8", (3, 5)), ("float32", "bfloat16", ()), ("uint8", "int32", (2, 4)),
     ("int16", "float32", (2,)), ("bfloat16", "int8", (4,))],
)  # fmt: skip
def test_bitcast_convert_type_across_widths_imports_and_agrees(source, target, shape):
    x = _random_bits(shape, source)
    check(lambda x: lax.bitcast_convert_type(x, target), arr(shape, source), args=[x])


def test_diagonal_in_a_pallas_call_matches_upstreams_interpret_mode():
    from jax.experimental import pallas as pl

    from minipallas.interop import from_jaxpr

    def kernel(x_ref, o_ref):
        o_ref[...] = jnp.diagonal(x_ref[...])[None, :] * jnp.ones((8, 1), jnp.float32)

    out = jax.ShapeDtypeStruct((8, 128), jnp.float32)
    x = np.random.default_rng(3).standard_normal((128, 128)).astype(np.float32)
    want = np.asarray(jax.jit(pl.pallas_call(kernel, out, interpret=True))(x))
    fn = from_jaxpr(jax.make_jaxpr(pl.pallas_call(kernel, out))(x))
    for got in (minipallas.compile(fn)(x)[0], minipallas.interpret(fn, x)[0]):
        assert np.asarray(got).tobytes() == want.tobytes()
