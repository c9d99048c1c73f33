"""Undefined reads and unwritten outputs: scratch or an output block read before anything
writes it (a missing ``pl.when(k == 0)`` init, an init on the wrong step, accumulating into
``o_ref`` without one, an aliased output read as if it held its input), and a grid or a
``pl.when`` that leaves part of an output unwritten. On the chip such memory holds whatever was
there before; measured on a v5e, some of these vary from run to run and some are wrong the same
way each time."""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from .common import HIGHEST, Entry, S, call, matmul_ref, normal

ROWS = pl.BlockSpec((8, 128), lambda i: (i, 0))
MATMUL_SPECS = {
    "in_specs": [
        pl.BlockSpec((8, 128), lambda i, j, k: (i, k)),
        pl.BlockSpec((128, 128), lambda i, j, k: (k, j)),
    ],
    "out_specs": pl.BlockSpec((8, 128), lambda i, j, k: (i, j)),
}


def _matmul_kernel(x_ref, y_ref, o_ref, acc_ref, *, nk: int, init_at: int | None):
    k = pl.program_id(2)
    if init_at is not None:

        @pl.when(k == init_at)
        def _():
            acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], precision=HIGHEST)

    @pl.when(k == nk - 1)
    def _():
        o_ref[...] = acc_ref[...]


def tiled_matmul(x, y, *, interpret=False, init_at: int | None = 0, k_semantics="arbitrary"):
    """A (8, 128, 128)-tiled matmul with an f32 accumulator scratch; ``init_at``: the k step
    that zeroes it (0 is right); ``k_semantics``: the k axis's ("arbitrary" is right)."""
    (m, kk), n = x.shape, y.shape[1]
    nk = kk // 128
    kernel = functools.partial(_matmul_kernel, nk=nk, init_at=init_at)
    return call(
        kernel,
        S((m, n), x.dtype),
        interpret,
        grid=(m // 8, n // 128, nk),
        scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", k_semantics)
        ),
        **MATMUL_SPECS,
    )(x, y)


# ----- accumulating into the output block over a reduction axis, never zeroed -----


def _col_sum_kernel(x_ref, o_ref):
    o_ref[...] += jnp.sum(x_ref[...].reshape(-1, 8, 128), axis=0)


def _block_sum_no_init(x, *, interpret=False):
    spec = pl.BlockSpec((32, 128), lambda j, r: (r, j))
    return call(
        _col_sum_kernel,
        S((8, x.shape[1]), x.dtype),
        interpret,
        grid=(x.shape[1] // 128, x.shape[0] // 32),
        in_specs=[spec],
        out_specs=pl.BlockSpec((8, 128), lambda j, r: (0, j)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
    )(x)


def _block_sum_want(x):
    return x.reshape(-1, 8, x.shape[1]).sum(0)


# ----- an in-place update that reads the aliased output's block -----


def _axpy_kernel(d_ref, x_ref, o_ref):
    del x_ref  # the author thinks o_ref holds x's block: it is aliased to it
    o_ref[...] += 0.1 * d_ref[...]


def _axpy_in_place(d, x, *, interpret=False):
    return call(
        _axpy_kernel,
        S(x.shape, x.dtype),
        interpret,
        grid=(x.shape[0] // 8,),
        in_specs=[ROWS, ROWS],
        out_specs=ROWS,
        input_output_aliases={1: 0},
    )(d, x)


# ----- a grid that covers half the output -----


def _double(x_ref, o_ref):
    o_ref[...] = 2.0 * x_ref[...]


def _half_grid(x, *, interpret=False):
    n = x.shape[0] // 8
    return call(
        _double, S(x.shape, x.dtype), interpret, grid=(n // 2,), in_specs=[ROWS], out_specs=ROWS
    )(x)  # the author halved the grid for a 2x-wide block and forgot to widen the block


# ----- a pl.when that skips the last block's store -----


def _scale_kernel(x_ref, o_ref):
    i = pl.program_id(0)

    @pl.when(i < pl.num_programs(0) - 1)  # meant for a bias added to all blocks but the last
    def _():
        o_ref[...] = x_ref[...] * 3.0 + 1.0


def _skip_last(x, *, interpret=False):
    return call(
        _scale_kernel,
        S(x.shape, x.dtype),
        interpret,
        grid=(x.shape[0] // 8,),
        in_specs=[ROWS],
        out_specs=ROWS,
    )(x)


def _skip_last_want(x):
    out = x * 3.0 + 1.0
    out[-8:] = x[-8:] * 3.0
    return out


# ----- a scratch tile half written, then read whole -----


def _pairs_kernel(x_ref, o_ref, tmp_ref):
    tmp_ref[0:4, :] = x_ref[0:4, :] + x_ref[4:8, :]  # the pairwise sums fill 4 of 8 rows
    o_ref[...] = jnp.broadcast_to(jnp.sum(tmp_ref[...], axis=0, keepdims=True), (8, 128))


def _pairs(x, *, interpret=False):
    return call(
        _pairs_kernel,
        S(x.shape, x.dtype),
        interpret,
        grid=(x.shape[0] // 8,),
        in_specs=[ROWS],
        out_specs=ROWS,
        scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)],
    )(x)


def _pairs_want(x):
    sums = x.reshape(-1, 8, 128).sum(1, keepdims=True)
    return np.broadcast_to(sums, (sums.shape[0], 8, 128)).reshape(x.shape).copy()


X32 = normal(11, 32, 128)
A, B = normal(12, 16, 256), normal(13, 256, 128)
TALL = normal(14, 64, 256)
D = normal(15, 32, 128)

ENTRIES = [
    Entry(
        "matmul_no_init",
        functools.partial(tiled_matmul, init_at=None),
        (A, B),
        matmul_ref,
        "undefined-read",
        "varies",
        "the f32 accumulator scratch is never zeroed: no pl.when(k == 0) init",
    ),
    Entry(
        "matmul_init_last_step",
        functools.partial(tiled_matmul, init_at=1),
        (A, B),
        matmul_ref,
        "undefined-read",
        "wrong",
        "the accumulator is zeroed at k == nk - 1 instead of k == 0: the first tile's partial "
        "product is read from stale scratch and then thrown away",
    ),
    Entry(
        "accumulate_output_no_init",
        _block_sum_no_init,
        (TALL,),
        _block_sum_want,
        "undefined-read",
        "varies",
        "o_ref += over the reduction axis with no zeroing at r == 0: the output block starts "
        "as whatever VMEM held",
    ),
    Entry(
        "aliased_output_read",
        _axpy_in_place,
        (D, X32),
        lambda d, x: x + np.float32(0.1) * d,
        "undefined-read",
        "wrong",
        "o_ref is aliased to x, but an output block is not copied in: o_ref += reads stale "
        "VMEM, not x",
    ),
    Entry(
        "half_grid_output",
        _half_grid,
        (X32,),
        lambda x: 2.0 * x,
        "unwritten-output",
        "varies",
        "the grid is halved but the block is not widened: the second half of the output is "
        "never written",
    ),
    Entry(
        "when_skips_last_block",
        _skip_last,
        (X32,),
        _skip_last_want,
        "unwritten-output",
        "wrong",
        "the pl.when that was meant to skip only the bias skips the whole store: the last "
        "block is never written",
    ),
    Entry(
        "scratch_half_written",
        _pairs,
        (X32,),
        _pairs_want,
        "undefined-read",
        "varies",
        "the pairwise sums fill rows 0..4 of the scratch tile; the sum reads all 8",
    ),
]
