"""A partial last block's padding entering a reduction: a sum over rows, a running max over
lane blocks, a dot over a partial k block. The chip copies only the array's part of a partial
block; the rest of the VMEM buffer holds what was there before. Measured on a v5e: the row
sum, the lane max and the lane mean come out wrong the same way each run, the partial-k dot
differently each run."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from .common import F32, HIGHEST, Entry, S, call, matmul_ref, normal

ARBITRARY = pltpu.CompilerParams(dimension_semantics=("arbitrary",))


# ----- column sums over row blocks of 8, the last one partial -----


def _col_sum_kernel(x_ref, o_ref, *, rows: int | None):
    i = pl.program_id(0)

    @pl.when(i == 0)
    def _():
        o_ref[...] = jnp.zeros_like(o_ref)

    x = x_ref[...]
    if rows is not None:  # the fix: zero the rows past the array's end
        row = i * 8 + jax.lax.broadcasted_iota(jnp.int32, x.shape, 0)
        x = jnp.where(row < rows, x, 0.0)
    o_ref[...] += jnp.broadcast_to(jnp.sum(x, axis=0, keepdims=True), o_ref.shape)


def column_sums(x, *, interpret=False, masked=False):
    """Column sums of ``x`` (rows not a multiple of 8), broadcast over an (8, n) output."""
    kernel = functools.partial(_col_sum_kernel, rows=x.shape[0] if masked else None)
    return call(
        kernel,
        S((8, x.shape[1]), x.dtype),
        interpret,
        grid=(pl.cdiv(x.shape[0], 8),),
        in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)),
        compiler_params=ARBITRARY,
    )(x)


def column_sums_want(x):
    return np.broadcast_to(x.sum(0, keepdims=True), (8, x.shape[1])).astype(F32)


# ----- a row max over lane blocks of 128, the last one partial -----


def _row_max_kernel(x_ref, o_ref, m_ref):
    j = pl.program_id(0)

    @pl.when(j == 0)
    def _():
        m_ref[...] = jnp.full_like(m_ref, -jnp.inf)

    m_ref[...] = jnp.maximum(m_ref[...], jnp.max(x_ref[...], axis=1, keepdims=True))

    @pl.when(j == pl.num_programs(0) - 1)
    def _():
        o_ref[...] = jnp.broadcast_to(m_ref[...], o_ref.shape)


def _row_max(x, *, interpret=False):
    return call(
        _row_max_kernel,
        S((x.shape[0], 128), x.dtype),
        interpret,
        grid=(pl.cdiv(x.shape[1], 128),),
        in_specs=[pl.BlockSpec((x.shape[0], 128), lambda j: (0, j))],
        out_specs=pl.BlockSpec((x.shape[0], 128), lambda j: (0, 0)),
        scratch_shapes=[pltpu.VMEM((x.shape[0], 1), jnp.float32)],
        compiler_params=ARBITRARY,
    )(x)


def _row_max_want(x):
    return np.broadcast_to(x.max(1, keepdims=True), (x.shape[0], 128)).astype(F32)


# ----- a matmul whose K is not a multiple of the k tile -----


def _dot_kernel(x_ref, y_ref, o_ref, acc_ref):
    k = pl.program_id(0)

    @pl.when(k == 0)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], precision=HIGHEST)

    @pl.when(k == pl.num_programs(0) - 1)
    def _():
        o_ref[...] = acc_ref[...]


def _partial_k_matmul(x, y, *, interpret=False):
    m, kk = x.shape
    return call(
        _dot_kernel,
        S((m, y.shape[1]), x.dtype),
        interpret,
        grid=(pl.cdiv(kk, 128),),
        in_specs=[
            pl.BlockSpec((m, 128), lambda k: (0, k)),
            pl.BlockSpec((128, y.shape[1]), lambda k: (k, 0)),
        ],
        out_specs=pl.BlockSpec((m, y.shape[1]), lambda k: (0, 0)),
        scratch_shapes=[pltpu.VMEM((m, y.shape[1]), jnp.float32)],
        compiler_params=ARBITRARY,
    )(x, y)


# ----- a row mean over a partial lane block, divided by the true width -----


def _row_mean_kernel(x_ref, o_ref, *, n: int):
    s = jnp.sum(x_ref[...], axis=1, keepdims=True)  # the padding lanes enter the sum
    o_ref[...] = jnp.broadcast_to(s / n, o_ref.shape)


def _row_mean(x, *, interpret=False):
    rows = x.shape[0]
    return call(
        functools.partial(_row_mean_kernel, n=x.shape[1]),
        S((rows, 128), x.dtype),
        interpret,
        grid=(rows // 8,),
        in_specs=[pl.BlockSpec((8, 256), lambda i: (i, 0))],  # 256 lanes for a 200-wide row
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
    )(x)


def _row_mean_want(x):
    return np.broadcast_to(x.mean(1, keepdims=True), (x.shape[0], 128)).astype(F32)


TALL = normal(21, 20, 128)
WIDE = normal(22, 8, 320)
A, B = normal(23, 8, 200), normal(24, 200, 128)
ROWS200 = normal(25, 16, 200)

ENTRIES = [
    Entry(
        "partial_rows_sum",
        column_sums,
        (TALL,),
        column_sums_want,
        "undefined-read",
        "wrong",
        "20 rows in blocks of 8: the last block's 4 padding rows enter the column sums",
    ),
    Entry(
        "partial_lanes_max",
        _row_max,
        (WIDE,),
        _row_max_want,
        "undefined-read",
        "wrong",
        "320 lanes in blocks of 128: the last block's 64 padding lanes enter the running max",
    ),
    Entry(
        "partial_k_dot",
        _partial_k_matmul,
        (A, B),
        matmul_ref,
        "undefined-read",
        "varies",
        "K = 200 in k tiles of 128: the last tile's padding columns of x meet y's padding rows "
        "in the dot",
    ),
    Entry(
        "partial_lanes_mean",
        _row_mean,
        (ROWS200,),
        _row_mean_want,
        "undefined-read",
        "wrong",
        "a 256-lane block over 200-wide rows: the 56 padding lanes enter the row sum",
    ),
]
