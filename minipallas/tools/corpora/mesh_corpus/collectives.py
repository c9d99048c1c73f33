"""Collective communication across cores: all-reduce, all-gather, reduce-scatter,
all-to-all, a ring all-reduce and two prefix sums, each with its numpy reference.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from minipallas.tools.corpora.mesh_corpus.common import F32, I32, L, R, _ints, _kernel, _rng

# --- all-reduce: every core sums its 4 tiles, partials exchanged through VMEM_SHARED ---

_ALLREDUCE_TILES = 4


def _allreduce_sum(cores, barrier=True):
    t = _ALLREDUCE_TILES
    x = _ints(_rng("allreduce", cores), (cores * t * R, L), -8, 9)

    def body(x_hbm, o_hbm, tile, acc):
        c = jax.lax.axis_index("core")

        def add_tile(i, carry):
            pltpu.sync_copy(x_hbm.at[pl.ds((c * t + i) * R, R)], tile)
            acc[...] = acc[...] + tile[...]
            return carry

        acc[...] = jnp.zeros((R, L), F32)
        jax.lax.fori_loop(0, t, add_tile, None)

        @functools.partial(
            pl.run_scoped,
            partials=pltpu.VMEM_SHARED((cores, R, L), F32),
            sem=pltpu.SemaphoreType.REGULAR,
            collective_axes="core",
        )
        def _(partials, sem):
            pltpu.sync_copy(acc, partials.at[c])
            if barrier:
                pltpu.core_barrier(sem, core_axis_name="core")
            pltpu.sync_copy(partials.at[0], acc)
            for k in range(1, cores):
                pltpu.sync_copy(partials.at[k], tile)
                acc[...] = acc[...] + tile[...]
            pltpu.sync_copy(acc, o_hbm.at[pl.ds(c * R, R)])

    out = [jax.ShapeDtypeStruct((cores * R, L), F32)]
    scratch = [pltpu.VMEM((R, L), F32), pltpu.VMEM((R, L), F32)]
    return _kernel(body, out, cores, scratch_types=scratch), (x,)


def _allreduce_sum_ref(cores, x):
    tiles = x.reshape(cores, _ALLREDUCE_TILES, R, L)
    partial = np.zeros((cores, R, L), np.float32)
    for i in range(_ALLREDUCE_TILES):
        partial = partial + tiles[:, i]
    total = partial[0]
    for k in range(1, cores):
        total = total + partial[k]
    return (np.tile(total, (cores, 1)),)


# --- all-gather (int32): every core publishes its block, then copies out the whole ---


def _all_gather(cores, offset=True):
    n = cores * R
    x = _ints(_rng("allgather", cores), (n, L), -1000, 1000, np.int32)

    def body(x_hbm, o_hbm, buf):
        c = jax.lax.axis_index("core")

        def scoped(gathered, sem):
            pltpu.sync_copy(x_hbm.at[pl.ds(c * R, R)], gathered.at[pl.ds(c * R, R)])
            pltpu.core_barrier(sem, core_axis_name="core")
            pltpu.sync_copy(gathered, buf)
            buf[...] = buf[...] + c
            # The bug variant writes every core's copy over out[0].
            pltpu.sync_copy(buf, o_hbm.at[c if offset else 0])

        pl.run_scoped(
            scoped,
            pltpu.VMEM_SHARED((n, L), I32),
            pltpu.SemaphoreType.REGULAR,
            collective_axes="core",
        )

    out = [jax.ShapeDtypeStruct((cores, n, L), I32)]
    return _kernel(body, out, cores, scratch_types=[pltpu.VMEM((n, L), I32)]), (x,)


def _all_gather_ref(cores, x):
    return (np.stack([x + np.int32(c) for c in range(cores)]),)


# --- reduce-scatter (int32): core c sums block c of everyone's contribution ---


def _reduce_scatter(cores):
    n = cores * R
    x = _ints(_rng("reducescatter", cores), (cores, n, L), -1000, 1000, np.int32)

    def body(x_hbm, o_hbm, tile):
        c = jax.lax.axis_index("core")

        def scoped(contrib, sem):
            pltpu.sync_copy(x_hbm.at[c], contrib.at[c])
            pltpu.core_barrier(sem, core_axis_name="core")
            rows = pl.ds(c * R, R)

            def add(k, acc):
                pltpu.sync_copy(contrib.at[k, rows], tile)
                return acc + tile[...]

            tile[...] = jax.lax.fori_loop(0, cores, add, jnp.zeros((R, L), I32))
            pltpu.sync_copy(tile, o_hbm.at[rows])

        pl.run_scoped(
            scoped,
            pltpu.VMEM_SHARED((cores, n, L), I32),
            pltpu.SemaphoreType.REGULAR,
            collective_axes="core",
        )

    out = [jax.ShapeDtypeStruct((n, L), I32)]
    return _kernel(body, out, cores, scratch_types=[pltpu.VMEM((R, L), I32)]), (x,)


def _reduce_scatter_ref(cores, x):
    return (x.sum(axis=0, dtype=np.int32),)


# --- ring all-reduce: tiles travel right through per-core mailboxes, acks flow left ---


def _ring_allreduce(cores, ack=True, send_first=True):
    x = _ints(_rng("ring", cores), (cores * R, L), -9, 10)

    def body(x_hbm, o_hbm, cur, acc):
        c = jax.lax.axis_index("core")
        n = jax.lax.axis_size("core")
        right = jax.lax.rem(c + 1, n)
        left = jax.lax.rem(c + n - 1, n)
        pltpu.sync_copy(x_hbm.at[pl.ds(c * R, R)], cur)
        acc[...] = cur[...]

        def scoped(mailbox, recv, acked):
            def send():
                pltpu.sync_copy(cur, mailbox.at[right])
                pl.semaphore_signal(recv, 1, core_index=right)

            def step(s, carry):
                if ack:

                    @pl.when(s > 0)
                    def _():
                        pl.semaphore_wait(acked, 1)  # right has read its mailbox

                if send_first:
                    send()
                pl.semaphore_wait(recv, 1)
                if not send_first:
                    send()  # bug: every core waits for its left neighbour first
                pltpu.sync_copy(mailbox.at[c], cur)
                acc[...] = acc[...] + cur[...]
                if ack:

                    @pl.when(s < n - 2)
                    def _():
                        pl.semaphore_signal(acked, 1, core_index=left)

                return carry

            jax.lax.fori_loop(0, n - 1, step, None)

        pl.run_scoped(
            scoped,
            pltpu.VMEM_SHARED((cores, R, L), F32),
            pltpu.SemaphoreType.REGULAR,
            pltpu.SemaphoreType.REGULAR,
            collective_axes="core",
        )
        pltpu.sync_copy(acc, o_hbm.at[pl.ds(c * R, R)])

    out = [jax.ShapeDtypeStruct(x.shape, F32)]
    scratch = [pltpu.VMEM((R, L), F32), pltpu.VMEM((R, L), F32)]
    return _kernel(body, out, cores, scratch_types=scratch), (x,)


def _ring_allreduce_ref(cores, x):
    blocks = x.reshape(cores, R, L)
    outs = []
    for c in range(cores):
        acc = blocks[c]
        for s in range(1, cores):
            acc = acc + blocks[(c - s) % cores]
        outs.append(acc)
    return (np.concatenate(outs),)


# --- inclusive prefix sum of blocks (int32): publish, barrier, sum blocks 0..c ---


def _prefix_sum(cores):
    x = _ints(_rng("prefix", cores), (cores * R, L), -100, 100, np.int32)

    def body(x_hbm, o_hbm, tile):
        c = jax.lax.axis_index("core")

        def scoped(blocks, sem):
            pltpu.sync_copy(x_hbm.at[pl.ds(c * R, R)], blocks.at[c])
            pltpu.core_barrier(sem, core_axis_name="core")

            def add(k, acc):
                pltpu.sync_copy(blocks.at[k], tile)
                return acc + tile[...]

            tile[...] = jax.lax.fori_loop(0, c + 1, add, jnp.zeros((R, L), I32))
            pltpu.sync_copy(tile, o_hbm.at[pl.ds(c * R, R)])

        pl.run_scoped(
            scoped,
            pltpu.VMEM_SHARED((cores, R, L), I32),
            pltpu.SemaphoreType.REGULAR,
            collective_axes="core",
        )

    out = [jax.ShapeDtypeStruct(x.shape, I32)]
    return _kernel(body, out, cores, scratch_types=[pltpu.VMEM((R, L), I32)]), (x,)


def _prefix_sum_ref(cores, x):
    return (np.cumsum(x.reshape(cores, R, L), axis=0, dtype=np.int32).reshape(x.shape),)


# --- chained prefix sum (f32): core c waits for c-1's prefix, adds, hands on to c+1 ---


def _prefix_chain(cores):
    x = _ints(_rng("chain", cores), (cores * R, L), -30, 30)

    def body(x_hbm, o_hbm, mine, prev):
        c = jax.lax.axis_index("core")
        pltpu.sync_copy(x_hbm.at[pl.ds(c * R, R)], mine)

        def scoped(prefixes, ready):
            if cores > 1:

                @pl.when(c > 0)
                def _():
                    pl.semaphore_wait(ready, 1)
                    pltpu.sync_copy(prefixes.at[c - 1], prev)
                    mine[...] = prev[...] + mine[...]

            pltpu.sync_copy(mine, prefixes.at[c])
            if cores > 1:

                @pl.when(c < cores - 1)
                def _():
                    pl.semaphore_signal(ready, 1, core_index=c + 1)

        pl.run_scoped(
            scoped,
            pltpu.VMEM_SHARED((cores, R, L), F32),
            pltpu.SemaphoreType.REGULAR,
            collective_axes="core",
        )
        pltpu.sync_copy(mine, o_hbm.at[pl.ds(c * R, R)])

    out = [jax.ShapeDtypeStruct(x.shape, F32)]
    scratch = [pltpu.VMEM((R, L), F32), pltpu.VMEM((R, L), F32)]
    return _kernel(body, out, cores, scratch_types=scratch), (x,)


def _prefix_chain_ref(cores, x):
    blocks = x.reshape(cores, R, L)
    outs = [blocks[0]]
    for c in range(1, cores):
        outs.append(outs[-1] + blocks[c])
    return (np.concatenate(outs),)


# --- all-to-all (int32): chunk k of core c goes to core k, slot c ---


def _all_to_all(cores):
    x = _ints(_rng("alltoall", cores), (cores, cores * R, L), -500, 500, np.int32)

    def body(x_hbm, o_hbm, buf):
        c = jax.lax.axis_index("core")

        def scoped(inbox, sem):
            for k in range(cores):
                pltpu.sync_copy(x_hbm.at[c, pl.ds(k * R, R)], inbox.at[k, c])
            pltpu.core_barrier(sem, core_axis_name="core")
            pltpu.sync_copy(inbox.at[c], buf)
            buf[...] = buf[...] * 2 + c
            for j in range(cores):
                pltpu.sync_copy(buf.at[j], o_hbm.at[c, pl.ds(j * R, R)])

        pl.run_scoped(
            scoped,
            pltpu.VMEM_SHARED((cores, cores, R, L), I32),
            pltpu.SemaphoreType.REGULAR,
            collective_axes="core",
        )

    out = [jax.ShapeDtypeStruct(x.shape, I32)]
    return _kernel(body, out, cores, scratch_types=[pltpu.VMEM((cores, R, L), I32)]), (x,)


def _all_to_all_ref(cores, x):
    chunks = x.reshape(cores, cores, R, L)  # [sender, receiver]
    received = chunks.transpose(1, 0, 2, 3)  # [receiver, sender]
    received = received * np.int32(2) + np.arange(cores, dtype=np.int32)[:, None, None, None]
    return (received.reshape(x.shape),)
