"""Upstream's TPU vector primitives imported (``pltpu.roll``), each checked against upstream
(its own lowering of the primitive, evaluated by XLA) bit for bit: interpret, compile and
``to_jax``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from interop_helpers import I32, arr, check
from jax.experimental.pallas import tpu as pltpu


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

    import minipallas
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
