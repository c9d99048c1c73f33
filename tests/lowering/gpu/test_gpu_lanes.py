"""Upstream's TPU vector ops (``pltpu.roll``, ``pltpu.bitcast``) and ``platform_index`` (a
square ``jnp.diagonal``) on the Triton path: upstream's Triton lowering has no rule for them,
and minipallas refuses them with a fix."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from minipallas.interop.importer.rules.kernel_call import kernel_from_jaxpr
from minipallas.ir.errors import MiniPallasError
from minipallas.kernels.pallas_call import lower_for_target

TRITON_REFUSED = {
    "roll": lambda x: pltpu.roll(x, 1, 1),
    "packed_bitcast": lambda x: pltpu.bitcast(x, jnp.int16),
    "platform_index": jnp.diagonal,
}


@pytest.mark.parametrize("name", TRITON_REFUSED)
def test_the_triton_path_refuses_them_as_upstream_has_no_rule(name):
    def kernel(x_ref, o_ref):
        o_ref[...] = jnp.sum(TRITON_REFUSED[name](x_ref[...])).astype(jnp.int32)

    call = pl.pallas_call(kernel, jax.ShapeDtypeStruct((), jnp.int32))
    x = np.zeros((16, 16), np.int32)
    kernel_ir = kernel_from_jaxpr(jax.make_jaxpr(call)(x))
    with pytest.raises(MiniPallasError, match=f"'{name}'.*has no Triton lowering") as info:
        lower_for_target(kernel_ir, "gpu")
    assert "fix:" in str(info.value)
