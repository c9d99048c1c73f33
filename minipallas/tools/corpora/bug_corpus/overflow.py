"""int32 wraparound in index arithmetic: a multiplicative hash in an index map, a fixed-point
row offset for a manual DMA from an ANY ref, global token positions in a causal mask. Index
arithmetic is int32 on every Pallas backend; each product here passes 2**31."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from .common import I32, Entry, S, call, normal

ROWS = pl.BlockSpec((8, 128), lambda i: (i, 0))
HASH = 1_000_000_007  # i * HASH passes 2**31 from i = 3


# ----- blocks spread by a multiplicative hash -----


def _copy(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def _hashed_gather(x, *, interpret=False):
    n = x.shape[0] // 8
    spread = pl.BlockSpec((8, 128), lambda i: ((i * HASH) % n, 0))
    return call(
        _copy, S(x.shape, x.dtype), interpret, grid=(n,), in_specs=[spread], out_specs=ROWS
    )(x)


def _hashed_want(x):
    blocks = x.reshape(-1, 8, 128)
    n = len(blocks)
    return blocks[[(i * HASH) % n for i in range(n)]].reshape(x.shape)


# ----- a DMA offset computed in fixed point -----

FRACTION = 26  # row offsets in units of 2**-26 rows


def _fixed_point_kernel(x_hbm, o_ref, buf, sem):
    i = pl.program_id(0)
    start = (i * (8 << FRACTION)) >> FRACTION  # i * 2**29: wraps negative from i = 4
    copy = pltpu.make_async_copy(x_hbm.at[pl.ds(start, 8)], buf, sem)
    copy.start()
    copy.wait()
    o_ref[...] = buf[...] * 2.0


def _fixed_point_dma(x, *, interpret=False):
    return call(
        _fixed_point_kernel,
        S(x.shape, x.dtype),
        interpret,
        grid=(x.shape[0] // 8,),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=ROWS,
        scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA(())],
    )(x)


# ----- a causal mask over global positions near 2**31 -----


def _causal_kernel(offsets_ref, x_ref, o_ref):
    q = offsets_ref[0] + jax.lax.broadcasted_iota(jnp.int32, x_ref.shape, 0)
    k = offsets_ref[1] + jax.lax.broadcasted_iota(jnp.int32, x_ref.shape, 1)
    o_ref[...] = jnp.where(q >= k, x_ref[...], 0.0)  # q wraps negative past 2**31 - 1


def _causal(offsets, x, *, interpret=False):
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1,
        grid=(1,),
        in_specs=[pl.BlockSpec((8, 128), lambda i, off: (0, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i, off: (0, 0)),
    )
    return call(_causal_kernel, S(x.shape, x.dtype), interpret, grid_spec=grid_spec)(offsets, x)


def _causal_want(offsets, x):
    q = int(offsets[0]) + np.arange(8)[:, None]
    k = int(offsets[1]) + np.arange(128)[None, :]
    return np.where(q >= k, x, 0.0).astype(x.dtype)


X48 = normal(61, 48, 128)
X64 = normal(62, 64, 128)
X8 = normal(63, 8, 128)
OFFSETS = np.array([2**31 - 4, 2**31 - 128], I32)  # a long stream's query and key positions

ENTRIES = [
    Entry(
        "hashed_index_map_overflow",
        _hashed_gather,
        (X48,),
        _hashed_want,
        "overflow",
        "wrong",
        "the index map's hash i * 1000000007 wraps in int32 from i = 3, so % 6 picks other blocks",
    ),
    Entry(
        "dma_offset_overflow",
        _fixed_point_dma,
        (X64,),
        lambda x: 2.0 * x,
        "overflow",
        "halt",
        "the fixed-point row offset i * 2**29 wraps negative from i = 4: the DMA reads before "
        "the array",
    ),
    Entry(
        "causal_position_overflow",
        _causal,
        (OFFSETS, X8),
        _causal_want,
        "overflow",
        "wrong",
        "query positions offset + row pass 2**31 - 1 and wrap negative: the causal mask drops "
        "their rows",
    ),
]
