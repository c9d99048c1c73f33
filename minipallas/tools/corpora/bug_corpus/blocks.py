"""Out-of-bounds: a block index map that leaves its array (the last block's neighbour, a
negative index, a k grid one too long, a scalar-prefetched table entry past the end) and a
``pl.ds`` or ``fori_loop`` that runs past a VMEM ref. Block windows are DMAs on the chip, which
may halt it; a dynamic slice of a VMEM ref has no bounds check there."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from .common import F32, HIGHEST, I32, Entry, S, call, matmul_ref, normal

ROWS = pl.BlockSpec((8, 128), lambda i: (i, 0))


# ----- a neighbour block past either end -----


def _smooth(x_ref, n_ref, o_ref):
    o_ref[...] = 0.5 * (x_ref[...] + n_ref[...])


def _halo(x, *, interpret=False, shift: int):
    n = x.shape[0] // 8
    neighbour = pl.BlockSpec((8, 128), lambda i: (i + shift, 0))  # no clamp at the ends
    return call(
        _smooth,
        S(x.shape, x.dtype),
        interpret,
        grid=(n,),
        in_specs=[ROWS, neighbour],
        out_specs=ROWS,
    )(x, x)


def _halo_want(x, shift):
    blocks = x.reshape(-1, 8, 128)
    other = np.clip(np.arange(len(blocks)) + shift, 0, len(blocks) - 1)
    return (0.5 * (blocks + blocks[other])).reshape(x.shape)


# ----- a tiled matmul whose k grid is one step too long -----


def _matmul_kernel(x_ref, y_ref, o_ref, acc_ref, *, nk: int):
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], precision=HIGHEST)

    @pl.when(k == nk - 1)
    def _():
        o_ref[...] = acc_ref[...]


def _matmul_long_k(x, y, *, interpret=False):
    (m, kk), n = x.shape, y.shape[1]
    nk = kk // 128 + 1  # one k step too many: the last x and y blocks start past K
    return call(
        functools.partial(_matmul_kernel, nk=nk),
        S((m, n), x.dtype),
        interpret,
        grid=(m // 8, n // 128, nk),
        in_specs=[
            pl.BlockSpec((8, 128), lambda i, j, k: (i, k)),
            pl.BlockSpec((128, 128), lambda i, j, k: (k, j)),
        ],
        out_specs=pl.BlockSpec((8, 128), lambda i, j, k: (i, j)),
        scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")
        ),
    )(x, y)


# ----- paged sums: a block table padded with a sentinel page past the end -----


def _paged_kernel(table_ref, lengths_ref, page_ref, o_ref):
    b, j = pl.program_id(0), pl.program_id(1)

    @pl.when(j == 0)
    def _():
        o_ref[...] = jnp.zeros_like(o_ref)

    @pl.when(j < lengths_ref[b])
    def _():
        o_ref[...] += page_ref[...]


def paged_sum(pages, table, lengths, *, interpret=False, clamp=False):
    """Per sequence, the sum of its pages; ``table`` (flat, ``slots`` per sequence) is padded
    with page ``len(pages)`` past each sequence's length."""
    n_seq, n_pages = lengths.shape[0], pages.shape[0]
    slots = table.shape[0] // n_seq

    def page_of(b, j, table_ref, lengths_ref):
        page = table_ref[b * slots + j]
        if clamp:  # the fix: never fetch the sentinel (its block is skipped anyway)
            page = jnp.where(j < lengths_ref[b], page, 0)
        return (page, 0, 0)

    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=2,
        grid=(n_seq, slots),
        in_specs=[pl.BlockSpec((None, 8, 128), page_of)],
        out_specs=pl.BlockSpec((None, 8, 128), lambda b, j, t, n: (b, 0, 0)),
    )
    del n_pages
    return call(
        _paged_kernel,
        S((n_seq, 8, 128), pages.dtype),
        interpret,
        grid_spec=grid_spec,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
    )(table, lengths, pages)


def paged_want(pages, table, lengths):
    slots = table.shape[0] // lengths.shape[0]
    return np.stack(
        [pages[table[b * slots : b * slots + n]].sum(0) for b, n in enumerate(lengths)]
    ).astype(F32)


PAGES = normal(3, 6, 8, 128)
TABLE = np.array([4, 0, 5, 6, 2, 1, 6, 6], I32)  # 6 = no page (past the end)
LENGTHS = np.array([3, 2], I32)


# ----- an embedding gather with one-based ids -----


def _copy(ids_ref, row_ref, o_ref):
    o_ref[...] = row_ref[...]


def _gather_one_based(table, ids, *, interpret=False):
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1,
        grid=(ids.shape[0],),
        in_specs=[pl.BlockSpec((None, 8, 128), lambda i, ids: (ids[i], 0, 0))],  # ids[i] - 1
        out_specs=pl.BlockSpec((None, 8, 128), lambda i, ids: (i, 0, 0)),
    )
    out = S((ids.shape[0], 8, 128), table.dtype)
    return call(_copy, out, interpret, grid_spec=grid_spec)(ids, table)


# ----- a chunk loop one chunk too long over a VMEM block -----


def _chunk_sum_kernel(x_ref, o_ref, *, chunks: int):
    def body(c, acc):
        return acc + x_ref[pl.ds(pl.multiple_of(c * 8, 8), 8), :]

    o_ref[...] = jax.lax.fori_loop(0, chunks, body, jnp.zeros((8, 128), jnp.float32))


def _chunk_sum(x, *, interpret=False):
    chunks = x.shape[0] // 8 + 1  # <= instead of <: the last chunk lies past the block
    kernel = functools.partial(_chunk_sum_kernel, chunks=chunks)
    return call(kernel, S((8, 128), x.dtype), interpret)(x)


# ----- a shifted store whose last chunk lands past the output -----


def _shift_kernel(x_ref, o_ref):
    o_ref[pl.ds(0, 8), :] = jnp.zeros((8, 128), jnp.float32)  # a one-tile header

    def body(c, carry):
        start = pl.multiple_of(c * 8 + 8, 8)  # one tile down: the last chunk lands past the end
        o_ref[pl.ds(start, 8), :] = x_ref[pl.ds(pl.multiple_of(c * 8, 8), 8), :]
        return carry

    jax.lax.fori_loop(0, x_ref.shape[0] // 8, body, 0)


def _shift_down(x, *, interpret=False):
    return call(_shift_kernel, S(x.shape, x.dtype), interpret)(x)


def _shift_want(x):
    return np.concatenate([np.zeros((8, 128), F32), x[:-8]])


# ----- a stencil that reads one tile past its block and discards it -----


def _next_tile_kernel(x_ref, o_ref):
    start = pl.multiple_of((pl.program_id(0) + 1) * 8, 8)  # rows 8 onwards: 64 of 64 rows
    nxt = x_ref[pl.ds(start, x_ref.shape[0]), :]
    row = jax.lax.broadcasted_iota(jnp.int32, x_ref.shape, 0)
    x = x_ref[...]
    o_ref[...] = jnp.where(row >= x_ref.shape[0] - 8, x, 0.5 * (x + nxt))


def _next_tile(x, *, interpret=False):
    spec = pl.BlockSpec(x.shape, lambda i: (0, 0))
    return call(
        _next_tile_kernel,
        S(x.shape, x.dtype),
        interpret,
        grid=(1,),
        in_specs=[spec],
        out_specs=spec,
    )(x)


def _next_tile_want(x):
    out = x.copy()
    out[:-8] = 0.5 * (x[:-8] + x[8:])
    return out


X32 = normal(1, 32, 128)
X64 = normal(2, 64, 128)
A, B = normal(4, 16, 256), normal(5, 256, 128)
EMB = normal(6, 5, 8, 128)
IDS = np.array([2, 5, 1, 3], I32)  # one-based: 5 is past the table's 5 rows

ENTRIES = [
    Entry(
        "halo_next_unclamped",
        functools.partial(_halo, shift=1),
        (X32,),
        lambda x: _halo_want(x, 1),
        "out-of-bounds",
        "halt",
        "the next-block index map i + 1 is not clamped: the last point's block starts past "
        "the array",
    ),
    Entry(
        "halo_prev_negative",
        functools.partial(_halo, shift=-1),
        (X32,),
        lambda x: _halo_want(x, -1),
        "out-of-bounds",
        "halt",
        "the previous-block index map i - 1 is -1 at the first point",
    ),
    Entry(
        "matmul_k_grid_too_long",
        _matmul_long_k,
        (A, B),
        matmul_ref,
        "out-of-bounds",
        "halt",
        "the k grid is K // tk + 1: the last k step's x and y blocks start past K",
    ),
    Entry(
        "paged_sum_sentinel",
        paged_sum,
        (PAGES, TABLE, LENGTHS),
        paged_want,
        "out-of-bounds",
        "halt",
        "the block table's padding entries name page 6 of 6; the index map fetches it though "
        "the body skips it",
    ),
    Entry(
        "gather_one_based_ids",
        _gather_one_based,
        (EMB, IDS),
        lambda t, ids: t[ids - 1],
        "out-of-bounds",
        "halt",
        "the ids are one-based and the index map uses them as is: id 5 of a 5-row table",
    ),
    Entry(
        "chunk_loop_past_block",
        _chunk_sum,
        (X64,),
        lambda x: x.reshape(8, 8, 128).sum(0),
        "out-of-bounds",
        "varies",
        "the fori_loop runs 9 chunks of 8 rows over a 64-row block: the last pl.ds reads past it",
    ),
    Entry(
        "shift_store_past_block",
        _shift_down,
        (X64,),
        _shift_want,
        "out-of-bounds",
        "latent",
        "the store shifted one tile down for a header writes the last chunk past the output block",
    ),
    Entry(
        "stencil_reads_past_tile",
        _next_tile,
        (X64,),
        _next_tile_want,
        "out-of-bounds",
        "latent",
        "pl.ds(8, 64) of a 64-row block reads one tile past it; the where discards those "
        "rows, so the values are right",
    ),
]
