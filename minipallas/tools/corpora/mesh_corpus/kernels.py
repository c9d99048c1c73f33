"""Realistic kernels split across cores: split-K matmul, a producer and a consumer, layer norm,
softmax, a double-buffered pipeline, a histogram, an embedding gather and two broadcasts,
each with its numpy reference.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from minipallas.tools.corpora.mesh_corpus.common import (
    EPS,
    F32,
    I32,
    L,
    R,
    _ints,
    _kernel,
    _rng,
    _signal_all_but_me,
)

# --- split-K matmul: core c multiplies K-block c, each core combines its row block ---


def _splitk_matmul(cores):
    m, k = cores * R, cores * L
    rng = _rng("splitk", cores)
    a, b = _ints(rng, (m, k), -3, 4), _ints(rng, (k, L), -3, 4)

    def body(a_hbm, b_hbm, o_hbm, *, a_blk, b_blk, part, acc, tile):
        c = jax.lax.axis_index("core")
        pltpu.sync_copy(a_hbm.at[:, pl.ds(c * L, L)], a_blk)
        pltpu.sync_copy(b_hbm.at[pl.ds(c * L, L)], b_blk)
        part[...] = jnp.dot(a_blk[...], b_blk[...], preferred_element_type=F32)

        def combine(partials, sem):
            pltpu.sync_copy(part, partials.at[c])
            pltpu.core_barrier(sem, core_axis_name="core")
            rows = pl.ds(c * R, R)
            pltpu.sync_copy(partials.at[0, rows], acc)
            for j in range(1, cores):
                pltpu.sync_copy(partials.at[j, rows], tile)
                acc[...] = acc[...] + tile[...]
            pltpu.sync_copy(acc, o_hbm.at[rows])

        pl.run_scoped(
            combine,
            pltpu.VMEM_SHARED((cores, m, L), F32),
            pltpu.SemaphoreType.REGULAR,
            collective_axes="core",
        )

    scratch = dict(
        a_blk=pltpu.VMEM((m, L), F32),
        b_blk=pltpu.VMEM((L, L), F32),
        part=pltpu.VMEM((m, L), F32),
        acc=pltpu.VMEM((R, L), F32),
        tile=pltpu.VMEM((R, L), F32),
    )
    out = [jax.ShapeDtypeStruct((m, L), F32)]
    return _kernel(body, out, cores, scratch_types=scratch), (a, b)


def _splitk_matmul_ref(cores, a, b):
    parts = [a[:, j * L : (j + 1) * L] @ b[j * L : (j + 1) * L] for j in range(cores)]
    total = parts[0]
    for p in parts[1:]:
        total = total + p
    return (total,)


# --- producer/consumer: core 0 streams tiles to the last core through a 2-slot buffer ---

_STREAM_TILES = 4


def _producer_consumer(cores, remote=True):
    t = _STREAM_TILES
    x = _ints(_rng("stream", cores), (t * R, L), -50, 50)
    producer, consumer = 0, cores - 1

    def body(x_hbm, o_hbm, tile):
        c = jax.lax.axis_index("core")

        def scoped(slots, full, empty):
            def step(i, carry):
                slot = jax.lax.rem(i, 2)

                @pl.when(c == producer)
                def _():
                    @pl.when(i >= 2)
                    def _():
                        pl.semaphore_wait(empty, 1)  # the consumer has read slot i % 2

                    pltpu.sync_copy(x_hbm.at[pl.ds(i * R, R)], tile)
                    tile[...] = tile[...] * 2.0
                    pltpu.sync_copy(tile, slots.at[slot])
                    if remote:
                        pl.semaphore_signal(full, 1, core_index=consumer)
                    else:
                        pl.semaphore_signal(full, 1)  # bug: signals the producer's own copy

                @pl.when(c == consumer)
                def _():
                    pl.semaphore_wait(full, 1)
                    pltpu.sync_copy(slots.at[slot], tile)
                    tile[...] = tile[...] + 1.0
                    pltpu.sync_copy(tile, o_hbm.at[pl.ds(i * R, R)])

                    @pl.when(i + 2 < t)
                    def _():
                        pl.semaphore_signal(empty, 1, core_index=producer)

                return carry

            jax.lax.fori_loop(0, t, step, None)

        pl.run_scoped(
            scoped,
            pltpu.VMEM_SHARED((2, R, L), F32),
            pltpu.SemaphoreType.REGULAR,
            pltpu.SemaphoreType.REGULAR,
            collective_axes="core",
        )

    out = [jax.ShapeDtypeStruct((t * R, L), F32)]
    return _kernel(body, out, cores, scratch_types=[pltpu.VMEM((R, L), F32)]), (x,)


def _producer_consumer_ref(cores, x):
    return (x * np.float32(2.0) + np.float32(1.0),)


# --- layer norm over features split across cores: row sums exchanged, then normalize ---


def _layer_norm(cores):
    d = cores * L
    x = _ints(_rng("layernorm", cores), (R, d), -4, 5)

    def body(x_hbm, o_hbm, xt, st):
        c = jax.lax.axis_index("core")
        cols = pl.ds(c * L, L)
        pltpu.sync_copy(x_hbm.at[:, cols], xt)
        st[0] = jnp.broadcast_to(jnp.sum(xt[...], axis=1, keepdims=True), (R, L))
        st[1] = jnp.broadcast_to(jnp.sum(xt[...] * xt[...], axis=1, keepdims=True), (R, L))

        def scoped(stats, sem):
            pltpu.sync_copy(st, stats.at[c])
            pltpu.core_barrier(sem, core_axis_name="core")
            s = jnp.zeros((R, L), F32)
            ss = jnp.zeros((R, L), F32)
            for k in range(cores):
                pltpu.sync_copy(stats.at[k], st)
                s = s + st[0]
                ss = ss + st[1]
            mean = s / d
            var = ss / d - mean * mean
            xt[...] = (xt[...] - mean) * jax.lax.rsqrt(var + EPS)
            pltpu.sync_copy(xt, o_hbm.at[:, cols])

        pl.run_scoped(
            scoped,
            pltpu.VMEM_SHARED((cores, 2, R, L), F32),
            pltpu.SemaphoreType.REGULAR,
            collective_axes="core",
        )

    out = [jax.ShapeDtypeStruct((R, d), F32)]
    scratch = [pltpu.VMEM((R, L), F32), pltpu.VMEM((2, R, L), F32)]
    return _kernel(body, out, cores, scratch_types=scratch), (x,)


def _layer_norm_ref(cores, x):
    d = np.float32(cores * L)
    blocks = x.reshape(R, cores, L)
    s = np.zeros((R, 1), np.float32)
    ss = np.zeros((R, 1), np.float32)
    for k in range(cores):
        s = s + blocks[:, k].sum(axis=1, keepdims=True)
        ss = ss + (blocks[:, k] * blocks[:, k]).sum(axis=1, keepdims=True)
    mean = s / d
    var = ss / d - mean * mean
    return ((x - mean) * (np.float32(1) / np.sqrt(var + np.float32(EPS))),)


# --- per-core double-buffered pipeline: async copies into 2 VMEM slots, DMA semaphores ---

_PIPE_TILES = 4


def _double_buffer(cores):
    t = _PIPE_TILES
    x = _ints(_rng("pipeline", cores), (cores * t * R, L), -20, 20)

    def body(x_hbm, o_hbm, buf, res, sems):
        c = jax.lax.axis_index("core")
        base = c * t

        def fetch(i, slot):
            src = x_hbm.at[pl.ds((base + i) * R, R)]
            return pltpu.make_async_copy(src, buf.at[slot], sems.at[slot])

        fetch(0, 0).start()

        def step(i, carry):
            slot = jax.lax.rem(i, 2)

            @pl.when(i + 1 < t)
            def _():
                fetch(i + 1, 1 - slot).start()

            fetch(i, slot).wait()
            res[...] = buf[slot] * 3.0 - 1.0
            pltpu.sync_copy(res, o_hbm.at[pl.ds((base + i) * R, R)])
            return carry

        jax.lax.fori_loop(0, t, step, None)

    out = [jax.ShapeDtypeStruct(x.shape, F32)]
    scratch = [
        pltpu.VMEM((2, R, L), F32),
        pltpu.VMEM((R, L), F32),
        pltpu.SemaphoreType.DMA((2,)),
    ]
    params = pltpu.CompilerParams(vmem_limit_bytes=32 * 1024 * 1024)
    return _kernel(body, out, cores, scratch_types=scratch, compiler_params=params), (x,)


def _double_buffer_ref(cores, x):
    return (x * np.float32(3.0) - np.float32(1.0),)


# --- per-lane histogram (int32): each core counts its rows, core 0 adds the counts up ---

_BINS = 8


def _histogram(cores, barrier_everywhere=True):
    x = _ints(_rng("histogram", cores), (cores * 2 * R, L), 0, _BINS, np.int32)

    def body(x_hbm, o_hbm, xt, counts, tmp):
        c = jax.lax.axis_index("core")
        pltpu.sync_copy(x_hbm.at[pl.ds(c * 2 * R, 2 * R)], xt)
        for b in range(_BINS):
            hits = (xt[...] == b).astype(I32)
            counts[b : b + 1, :] = jnp.sum(hits, axis=0, keepdims=True)

        def scoped(partials, sem):
            pltpu.sync_copy(counts, partials.at[c])
            if barrier_everywhere:
                pltpu.core_barrier(sem, core_axis_name="core")

            @pl.when(c == 0)
            def _():
                if not barrier_everywhere:
                    pltpu.core_barrier(sem, core_axis_name="core")  # bug: only core 0 arrives
                for k in range(1, cores):
                    pltpu.sync_copy(partials.at[k], tmp)
                    counts[...] = counts[...] + tmp[...]
                pltpu.sync_copy(counts, o_hbm)

        pl.run_scoped(
            scoped,
            pltpu.VMEM_SHARED((cores, _BINS, L), I32),
            pltpu.SemaphoreType.REGULAR,
            collective_axes="core",
        )

    out = [jax.ShapeDtypeStruct((_BINS, L), I32)]
    scratch = [
        pltpu.VMEM((2 * R, L), I32),
        pltpu.VMEM((_BINS, L), I32),
        pltpu.VMEM((_BINS, L), I32),
    ]
    return _kernel(body, out, cores, scratch_types=scratch), (x,)


def _histogram_ref(cores, x):
    bins = np.arange(_BINS, dtype=np.int32)[:, None, None]
    return ((x[None] == bins).sum(axis=1, dtype=np.int32),)


# --- softmax over columns split across cores: row max and row sum exchanged ---


def _softmax(cores, separate_sum_buffer=True):
    d = cores * L
    x = _ints(_rng("softmax", cores), (R, d), -6, 7)

    def body(x_hbm, o_hbm, xt, st):
        c = jax.lax.axis_index("core")
        cols = pl.ds(c * L, L)
        pltpu.sync_copy(x_hbm.at[:, cols], xt)

        def scoped(maxes, sums, sem):
            st[...] = jnp.broadcast_to(jnp.max(xt[...], axis=1, keepdims=True), (R, L))
            pltpu.sync_copy(st, maxes.at[c])
            pltpu.core_barrier(sem, core_axis_name="core")
            pltpu.sync_copy(maxes.at[0], st)
            m = st[...]
            for k in range(1, cores):
                pltpu.sync_copy(maxes.at[k], st)
                m = jnp.maximum(m, st[...])
            e = jnp.exp(xt[...] - m)
            st[...] = jnp.broadcast_to(jnp.sum(e, axis=1, keepdims=True), (R, L))
            # The bug variant reuses ``maxes`` while other cores may still be reading it.
            pltpu.sync_copy(st, sums.at[c])
            pltpu.core_barrier(sem, core_axis_name="core")
            total = jnp.zeros((R, L), F32)
            for k in range(cores):
                pltpu.sync_copy(sums.at[k], st)
                total = total + st[...]
            xt[...] = e / total
            pltpu.sync_copy(xt, o_hbm.at[:, cols])

        if separate_sum_buffer:
            buffers = [pltpu.VMEM_SHARED((cores, R, L), F32)] * 2
            pl.run_scoped(scoped, *buffers, pltpu.SemaphoreType.REGULAR, collective_axes="core")
        else:
            pl.run_scoped(
                lambda stats, sem: scoped(stats, stats, sem),
                pltpu.VMEM_SHARED((cores, R, L), F32),
                pltpu.SemaphoreType.REGULAR,
                collective_axes="core",
            )

    out = [jax.ShapeDtypeStruct((R, d), F32)]
    scratch = [pltpu.VMEM((R, L), F32), pltpu.VMEM((R, L), F32)]
    return _kernel(body, out, cores, scratch_types=scratch), (x,)


def _softmax_ref(cores, x):
    blocks = x.reshape(R, cores, L)
    m = blocks[:, 0].max(axis=1, keepdims=True)
    for k in range(1, cores):
        m = np.maximum(m, blocks[:, k].max(axis=1, keepdims=True))
    e = np.exp(x - m)
    total = np.zeros((R, 1), np.float32)
    for k in range(cores):
        total = total + e[:, k * L : (k + 1) * L].sum(axis=1, keepdims=True)
    return (e / total,)


# --- embedding gather: row indices and per-core scales as SMEM scalars ---

_TABLE_ROWS = 64


def _gather_rows(cores):
    rng = _rng("gather", cores)
    table = _ints(rng, (_TABLE_ROWS, L), -100, 100)
    idx = _ints(rng, (cores * R,), 0, _TABLE_ROWS, np.int32)
    scale = _ints(rng, (cores,), -4, 5) / np.float32(2)

    def body(table_hbm, idx_hbm, scale_hbm, o_hbm, idx_smem, scale_smem, rows):
        c = jax.lax.axis_index("core")
        pltpu.sync_copy(idx_hbm.at[pl.ds(c * R, R)], idx_smem)
        pltpu.sync_copy(scale_hbm, scale_smem)

        def fetch(i, carry):
            pltpu.sync_copy(table_hbm.at[pl.ds(idx_smem[i], 1)], rows.at[pl.ds(i, 1)])
            return carry

        jax.lax.fori_loop(0, R, fetch, None)
        rows[...] = rows[...] * scale_smem[c]
        pltpu.sync_copy(rows, o_hbm.at[pl.ds(c * R, R)])

    out = [jax.ShapeDtypeStruct((cores * R, L), F32)]
    scratch = [pltpu.SMEM((R,), I32), pltpu.SMEM((cores,), F32), pltpu.VMEM((R, L), F32)]
    return _kernel(body, out, cores, scratch_types=scratch), (table, idx, scale)


def _gather_rows_ref(cores, table, idx, scale):
    rows = table[idx].reshape(cores, R, L) * scale[:, None, None]
    return (rows.reshape(cores * R, L),)


# --- weight broadcast: core 0 DMAs the weight into VMEM_SHARED once, all cores matmul ---


def _shared_weight_matmul(cores):
    rng = _rng("sharedweight", cores)
    x, w = _ints(rng, (cores * R, L), -3, 4), _ints(rng, (L, L), -3, 4)

    def body(x_hbm, w_hbm, o_hbm, xt, wt, yt):
        c = jax.lax.axis_index("core")
        rows = pl.ds(c * R, R)

        def scoped(w_shared, dma, sem):
            w_copy = pltpu.make_async_copy(w_hbm, w_shared, dma)

            @pl.when(c == 0)
            def _():
                w_copy.start()

            pltpu.sync_copy(x_hbm.at[rows], xt)  # overlaps the weight copy on core 0

            @pl.when(c == 0)
            def _():
                w_copy.wait()

            pltpu.core_barrier(sem, core_axis_name="core")
            pltpu.sync_copy(w_shared, wt)
            y = jnp.dot(xt[...], wt[...], preferred_element_type=F32)
            yt[...] = jnp.maximum(y, 0.0)
            pltpu.sync_copy(yt, o_hbm.at[rows])

        pl.run_scoped(
            scoped,
            pltpu.VMEM_SHARED((L, L), F32),
            pltpu.SemaphoreType.DMA,
            pltpu.SemaphoreType.REGULAR,
            collective_axes="core",
        )

    out = [jax.ShapeDtypeStruct(x.shape, F32)]
    scratch = [pltpu.VMEM((R, L), F32), pltpu.VMEM((L, L), F32), pltpu.VMEM((R, L), F32)]
    return _kernel(body, out, cores, scratch_types=scratch), (x, w)


def _shared_weight_matmul_ref(cores, x, w):
    return (np.maximum(x @ w, np.float32(0)),)


# --- tile broadcast with remote signals: core 0 loads a bias tile, signals every core ---


def _broadcast_tile(cores, signal_early=False, wait_value=1):
    rng = _rng("broadcast", cores)
    bias, y = _ints(rng, (R, L), -50, 50), _ints(rng, (cores * R, L), -50, 50)

    def body(bias_hbm, y_hbm, o_hbm, bt, yt):
        c = jax.lax.axis_index("core")
        rows = pl.ds(c * R, R)

        def scoped(bias_shared, dma, ready):
            @pl.when(c == 0)
            def _():
                copy = pltpu.make_async_copy(bias_hbm, bias_shared, dma)
                copy.start()
                if signal_early:
                    _signal_all_but_me(ready, cores)  # bug: the DMA may still be writing
                copy.wait()
                if not signal_early:
                    _signal_all_but_me(ready, cores)

            if cores > 1:

                @pl.when(c != 0)
                def _():
                    pl.semaphore_wait(ready, wait_value)

            pltpu.sync_copy(bias_shared, bt)

        pl.run_scoped(
            scoped,
            pltpu.VMEM_SHARED((R, L), F32),
            pltpu.SemaphoreType.DMA,
            pltpu.SemaphoreType.REGULAR,
            collective_axes="core",
        )
        pltpu.sync_copy(y_hbm.at[rows], yt)
        yt[...] = yt[...] + bt[...]
        pltpu.sync_copy(yt, o_hbm.at[rows])

    out = [jax.ShapeDtypeStruct(y.shape, F32)]
    scratch = [pltpu.VMEM((R, L), F32), pltpu.VMEM((R, L), F32)]
    return _kernel(body, out, cores, scratch_types=scratch), (bias, y)


def _broadcast_tile_ref(cores, bias, y):
    return (y + np.tile(bias, (cores, 1)),)
