"""Blocks past their arrays, found on the CPU before a kernel reaches the chip."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl

import minipallas as mp
from minipallas.interop.importer.rules.kernel_call import kernel_from_jaxpr
from minipallas.tools.difftest.halts import out_of_bounds_block

S = jax.ShapeDtypeStruct


def _kernel(index_map, x_shape, out_shape, grid):
    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1.0

    spec = pl.BlockSpec((16, 128), index_map)
    call = pl.pallas_call(body, S(out_shape, jnp.float32), grid=grid, in_specs=[spec],
                          out_specs=pl.BlockSpec((16, 128), lambda i: (i, 0)))  # fmt: skip
    x = np.zeros(x_shape, np.float32)
    return kernel_from_jaxpr(jax.make_jaxpr(call)(x), memory_space=mp.tpu.VMEM), x


def test_a_diagonal_block_of_a_one_block_wide_input_is_past_its_end():
    """fuzz-tpu's finding on the v5e: block (1, 1) of a 128-wide input read garbage on the chip
    (both lowerings alike) where interpret mode clamps."""
    kernel, x = _kernel(lambda i: (i, i), (64, 128), (64, 128), (2,))
    found = out_of_bounds_block(kernel, [x])
    assert found == (
        "input 0 at grid point [1]: block index [1, 1] starts at element 128 of dimension 1, "
        "past its 128 elements"
    )


def test_a_partial_last_block_is_inside():
    kernel, x = _kernel(lambda i: (i, 0), (40, 128), (48, 128), (3,))
    assert out_of_bounds_block(kernel, [x]) is None


def test_a_grid_longer_than_the_array_is_past_its_end():
    kernel, x = _kernel(lambda i: (i, 0), (32, 128), (64, 128), (4,))
    assert out_of_bounds_block(kernel, [x]).startswith("input 0 at grid point [2]")
