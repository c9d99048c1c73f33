"""Correct controls: the buggy kernels fixed, and the everyday kernels they come from (partial
blocks that only feed their own padding, a masked partial reduction, an accumulator zeroed
under ``pl.when``, a double-buffered DMA, scratch carried along an "arbitrary" axis, clamped
block tables). A check that reports any of these raises a false alarm."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from .blocks import EMB, LENGTHS, PAGES, TABLE, paged_sum, paged_want
from .common import F32, I32, Entry, S, call, matmul_ref, normal
from .dma import pipeline, store_via_dma
from .padding import column_sums, column_sums_want
from .parallel import block_sum, block_sum_want, prefix_sums, prefix_sums_want
from .undefined import tiled_matmul

ROWS = pl.BlockSpec((8, 128), lambda i: (i, 0))


# ----- elementwise and row-wise kernels over a partial last block -----


def _affine_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0 + 1.0


def _softmax_kernel(x_ref, o_ref):
    x = x_ref[...]
    e = jnp.exp(x - jnp.max(x, axis=1, keepdims=True))
    o_ref[...] = e / jnp.sum(e, axis=1, keepdims=True)


def _layernorm_kernel(x_ref, g_ref, o_ref):
    x = x_ref[...]
    mean = jnp.mean(x, axis=1, keepdims=True)
    var = jnp.mean((x - mean) ** 2, axis=1, keepdims=True)
    o_ref[...] = (x - mean) * jax.lax.rsqrt(var + 1e-5) * g_ref[...]


def _rows(kernel, x, *, interpret=False, extra=()):
    block = (8, x.shape[1])
    specs = [pl.BlockSpec(block, lambda i: (i, 0))]
    specs += [pl.BlockSpec(e.shape, lambda i: (0, 0)) for e in extra]
    return call(
        kernel,
        S(x.shape, x.dtype),
        interpret,
        grid=(pl.cdiv(x.shape[0], 8),),
        in_specs=specs,
        out_specs=specs[0],
    )(x, *extra)


def _softmax_want(x):
    e = np.exp(x - x.max(1, keepdims=True))
    return (e / e.sum(1, keepdims=True)).astype(F32)


def _layernorm_want(x, g):
    x64 = x.astype(np.float64)
    mean = x64.mean(1, keepdims=True)
    var = ((x64 - mean) ** 2).mean(1, keepdims=True)
    return ((x64 - mean) / np.sqrt(var + 1e-5) * g).astype(F32)


# ----- a halo clamped at both ends; a 2-D parallel grid -----


def _smooth(x_ref, n_ref, o_ref):
    o_ref[...] = 0.5 * (x_ref[...] + n_ref[...])


def _halo_clamped(x, *, interpret=False):
    n = x.shape[0] // 8
    nxt = pl.BlockSpec((8, 128), lambda i: (jnp.minimum(i + 1, n - 1), 0))
    return call(
        _smooth, S(x.shape, x.dtype), interpret, grid=(n,), in_specs=[ROWS, nxt], out_specs=ROWS
    )(x, x)


def _halo_want(x):
    blocks = x.reshape(-1, 8, 128)
    other = np.minimum(np.arange(len(blocks)) + 1, len(blocks) - 1)
    return (0.5 * (blocks + blocks[other])).reshape(x.shape)


def _add_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def _add_2d(x, y, *, interpret=False):
    spec = pl.BlockSpec((8, 128), lambda i, j: (i, j))
    return call(
        _add_kernel,
        S(x.shape, x.dtype),
        interpret,
        grid=(x.shape[0] // 8, x.shape[1] // 128),
        in_specs=[spec, spec],
        out_specs=spec,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")),
    )(x, y)


# ----- an embedding gather with in-range ids -----


def _copy(ids_ref, row_ref, o_ref):
    o_ref[...] = row_ref[...]


def _gather(table, ids, *, interpret=False):
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1,
        grid=(ids.shape[0],),
        in_specs=[pl.BlockSpec((None, 8, 128), lambda i, ids: (ids[i], 0, 0))],
        out_specs=pl.BlockSpec((None, 8, 128), lambda i, ids: (i, 0, 0)),
    )
    out = S((ids.shape[0], 8, 128), table.dtype)
    return call(_copy, out, interpret, grid_spec=grid_spec)(ids, table)


A, B = normal(71, 16, 256), normal(72, 256, 128)
X20 = normal(73, 20, 128)
X32 = normal(74, 32, 128)
X64 = normal(75, 64, 128)
LN, GAIN = normal(76, 20, 256), normal(77, 1, 256)
P, Q = normal(78, 16, 256), normal(79, 16, 256)
IDS0 = np.array([1, 4, 0, 2], I32)


def _ok(name, fn, args, want, note):
    return Entry(name, fn, args, want, None, "correct", note)


ENTRIES = [
    _ok(
        "matmul_init",
        tiled_matmul,
        (A, B),
        matmul_ref,
        "tiled matmul, accumulator zeroed under pl.when(k == 0)",
    ),
    _ok(
        "partial_elementwise",
        functools.partial(_rows, _affine_kernel),
        (X20,),
        lambda x: x * 2.0 + 1.0,
        "2 x + 1 over 20 rows in blocks of 8: padding feeds padding",
    ),
    _ok(
        "partial_rows_softmax",
        functools.partial(_rows, _softmax_kernel),
        (X20,),
        _softmax_want,
        "row softmax over 20 rows in blocks of 8: each row reduces over its own lanes",
    ),
    _ok(
        "partial_rows_layernorm",
        lambda x, g, *, interpret=False: _rows(
            _layernorm_kernel, x, interpret=interpret, extra=(g,)
        ),
        (LN, GAIN),
        _layernorm_want,
        "layernorm over 20 rows of 256 in blocks of 8",
    ),
    _ok(
        "masked_partial_sum",
        functools.partial(column_sums, masked=True),
        (X20,),
        column_sums_want,
        "column sums over a partial last block, its padding rows masked",
    ),
    _ok(
        "double_buffered_dma",
        pipeline,
        (X64,),
        lambda x: 2.0 * x + 1.0,
        "two-slot DMA pipeline from HBM: each copy waited before its buffer is read",
    ),
    _ok(
        "output_copy_waited",
        functools.partial(store_via_dma, wait=True),
        (X64,),
        lambda x: 2.0 * x + 1.0,
        "the result copied to an HBM output and waited",
    ),
    _ok(
        "arbitrary_carried_scratch",
        functools.partial(prefix_sums, semantics="arbitrary"),
        (X32,),
        prefix_sums_want,
        "prefix sums carried in scratch along an arbitrary axis",
    ),
    _ok(
        "arbitrary_shared_block",
        functools.partial(block_sum, semantics="arbitrary"),
        (X32,),
        block_sum_want,
        "block sum accumulated in one output block along an arbitrary axis",
    ),
    _ok(
        "paged_sum_clamped",
        functools.partial(paged_sum, clamp=True),
        (PAGES, TABLE, LENGTHS),
        paged_want,
        "paged sums whose index map never fetches the sentinel page",
    ),
    _ok(
        "embedding_gather",
        _gather,
        (EMB, IDS0),
        lambda t, ids: t[ids],
        "scalar-prefetch gather with in-range ids",
    ),
    _ok(
        "halo_clamped",
        _halo_clamped,
        (X32,),
        _halo_want,
        "next-block halo clamped to the last block",
    ),
    _ok(
        "parallel_2d_add",
        _add_2d,
        (P, Q),
        lambda x, y: x + y,
        "a 2-D parallel grid, each point writing its own block",
    ),
]
