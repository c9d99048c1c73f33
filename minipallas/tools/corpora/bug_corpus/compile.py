"""Kernels the chip's compiler (Mosaic) refuses though the CPU interpret modes run them: VMEM
and SMEM over-subscription, block shapes whose last two dims are neither multiples of
(8, 128) nor the array's, a vector load from SMEM."""

from __future__ import annotations

import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from .common import Entry, S, call, normal

ROWS = pl.BlockSpec((8, 128), lambda i: (i, 0))


# ----- a 200 MiB VMEM scratch (a v5e has 128 MiB of VMEM) -----


def _staging_kernel(x_ref, o_ref, stage_ref):
    stage_ref[0:8, 0:128] = x_ref[...]  # a staging buffer sized for the whole problem
    o_ref[...] = stage_ref[0:8, 0:128] * 2.0


def _big_scratch(x, *, interpret=False):
    return call(
        _staging_kernel,
        S(x.shape, x.dtype),
        interpret,
        grid=(x.shape[0] // 8,),
        in_specs=[ROWS],
        out_specs=ROWS,
        scratch_shapes=[pltpu.VMEM((51200, 1024), jnp.float32)],  # 200 MiB
    )(x)


# ----- a 4 MiB SMEM scratch (SMEM holds a few KiB to 1 MiB) -----


def _counts_kernel(x_ref, o_ref, counts_ref):
    counts_ref[0] = 3
    o_ref[...] = x_ref[...] * counts_ref[0].astype(jnp.float32)


def _big_smem(x, *, interpret=False):
    return call(
        _counts_kernel,
        S(x.shape, x.dtype),
        interpret,
        grid=(x.shape[0] // 8,),
        in_specs=[ROWS],
        out_specs=ROWS,
        scratch_shapes=[pltpu.SMEM((1 << 20,), jnp.int32)],
    )(x)


# ----- blocks that break the (8, 128) rule -----


def _add_one(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


def _blocked(x, block, *, interpret=False):
    grid = (x.shape[0] // block[0], x.shape[1] // block[1])
    spec = pl.BlockSpec(block, lambda i, j: (i, j))
    return call(
        _add_one, S(x.shape, x.dtype), interpret, grid=grid, in_specs=[spec], out_specs=spec
    )(x)


def _lanes_100(x, *, interpret=False):
    return _blocked(x, (8, 100), interpret=interpret)  # 100 lanes of 200: not 128, not all


def _rows_4(x, *, interpret=False):
    return _blocked(x, (4, 128), interpret=interpret)  # 4 rows of 16: not 8, not all


# ----- a vector load from SMEM -----


def _smem_table_kernel(t_ref, x_ref, o_ref):
    o_ref[...] = x_ref[...] * t_ref[...]  # SMEM holds scalars: no vector loads


def _smem_vector(t, x, *, interpret=False):
    return call(
        _smem_table_kernel,
        S(x.shape, x.dtype),
        interpret,
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
    )(t, x)


X = normal(51, 16, 128)
X200 = normal(52, 16, 200)
T = normal(53, 8, 128)

ENTRIES = [
    Entry(
        "vmem_scratch_200mib",
        _big_scratch,
        (X,),
        lambda x: 2.0 * x,
        "compile",
        "compile-error",
        "a 200 MiB VMEM scratch: more than the chip's VMEM, let alone the scoped limit",
    ),
    Entry(
        "smem_scratch_4mib",
        _big_smem,
        (X,),
        lambda x: 3.0 * x,
        "compile",
        "compile-error",
        "a 4 MiB SMEM scratch for a counter: more than the chip's SMEM",
    ),
    Entry(
        "block_lanes_100",
        _lanes_100,
        (X200,),
        lambda x: x + 1.0,
        "compile",
        "compile-error",
        "block (8, 100) of a (16, 200) array: the last dim is neither a multiple of 128 nor "
        "the array's",
    ),
    Entry(
        "block_rows_4",
        _rows_4,
        (X,),
        lambda x: x + 1.0,
        "compile",
        "compile-error",
        "block (4, 128) of a (16, 128) f32 array: the second-last dim is neither a multiple of "
        "8 nor the array's",
    ),
    Entry(
        "smem_vector_load",
        _smem_vector,
        (T, X[:8]),
        lambda t, x: x * t,
        "compile",
        "compile-error",
        "an (8, 128) f32 operand placed in SMEM and loaded as a vector",
    ),
]
