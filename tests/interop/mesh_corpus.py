"""A corpus of multi-core Pallas TPU mesh kernels, written the way upstream JAX 0.10.2 writes them.

Each kernel is a ``pl.kernel`` over ``pltpu.create_tensorcore_mesh("core", num_cores=cores)``
whose cores talk through ``pl.run_scoped(..., collective_axes="core")`` allocations: one
``VMEM_SHARED`` buffer that every core sees, and semaphores of which every core has its own copy
(``pl.semaphore_signal(sem, 1, core_index=k)`` increments core k's). Upstream cannot run them:
its lowering and its interpret mode both raise on a collective ``run_scoped``. As real TensorCore
kernels must, they move data between HBM, ``VMEM_SHARED`` and per-core ``VMEM`` with DMAs
(``pltpu.sync_copy``, ``pltpu.make_async_copy``) and compute only on per-core VMEM (and SMEM
scalars). Every output is a one-element tuple (or longer), like the references.

``CASES`` registers every kernel at 2 cores (some also at 4) with what should happen when all cores
run concurrently: "ok" kernels come with a numpy reference (same float32 operations in the same
order; data are small integers, so sums and dots are exact whatever the order), "race" kernels
let two cores touch one element unordered (one writing), "deadlock" kernels leave some core
blocked in a barrier or wait. ``ONE_CORE`` holds the "ok" kernels built at one core, with
(8k, 128) f32/int32 blocks, for a real single-TensorCore chip. ``exact=False`` marks the kernels
that use ``exp`` or ``rsqrt``, whose results match their references only up to rounding.
"""

from __future__ import annotations

import dataclasses
import functools
import zlib
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

R = 8  # rows (sublanes) of one tile
L = 128  # lanes of one tile
EPS = 1e-5
F32 = jnp.float32
I32 = jnp.int32


@dataclasses.dataclass(frozen=True)
class MeshCase:
    name: str
    cores: int  # num_cores of the mesh
    build: Callable[[], tuple[Callable, tuple[np.ndarray, ...]]]  # -> (f, numpy args)
    reference: Callable[..., tuple[np.ndarray, ...]] | None  # numpy outputs; None unless "ok"
    expect: str = "ok"  # "ok", "race" or "deadlock"
    what: str = ""
    exact: bool = True  # False: exp/rsqrt inside, compare with a tolerance


def _mesh(cores):
    return pltpu.create_tensorcore_mesh("core", num_cores=cores)


def _kernel(body, out_type, cores, **kw):
    return jax.jit(pl.kernel(body, out_type=tuple(out_type), mesh=_mesh(cores), **kw))


def _rng(name, cores):
    return np.random.default_rng(zlib.crc32(f"{name}/{cores}".encode()))


def _ints(rng, shape, lo, hi, dtype=np.float32):
    """Integers in [lo, hi) as ``dtype``: exact under any summation order."""
    return rng.integers(lo, hi, shape).astype(dtype)


def _signal_all_but_me(sem, cores):
    """Core 0's broadcast: one signal to every other core's copy of ``sem``."""
    for k in range(1, cores):
        pl.semaphore_signal(sem, 1, core_index=k)


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


# --- registry ---


@dataclasses.dataclass(frozen=True)
class _Kernel:
    name: str
    builder: Callable[[int], tuple[Callable, tuple[np.ndarray, ...]]]
    reference: Callable[..., tuple[np.ndarray, ...]] | None
    cores: tuple[int, ...]
    what: str
    expect: str = "ok"
    exact: bool = True

    def at(self, cores: int) -> MeshCase:
        ref = None if self.reference is None else functools.partial(self.reference, cores)
        return MeshCase(
            name=f"{self.name}_x{cores}",
            cores=cores,
            build=functools.partial(self.builder, cores),
            reference=ref,
            expect=self.expect,
            what=self.what,
            exact=self.exact,
        )


def _bug(builder, **kw):
    return functools.partial(builder, **kw)


_KERNELS = [
    _Kernel("allreduce_sum", _allreduce_sum, _allreduce_sum_ref, (2, 4),
            "each core sums its 4 tiles, partials through VMEM_SHARED, barrier, all read all"),
    _Kernel("splitk_matmul", _splitk_matmul, _splitk_matmul_ref, (2, 4),
            "core c multiplies K-block c into VMEM_SHARED, barrier, each core sums its row block"),
    _Kernel("producer_consumer", _producer_consumer, _producer_consumer_ref, (2, 4),
            "core 0 streams 4 tiles to the last core through 2 shared slots, full/empty sems"),
    _Kernel("layer_norm", _layer_norm, _layer_norm_ref, (2,),
            "features split across cores; row sum and sum of squares exchanged; normalize",
            exact=False),
    _Kernel("double_buffer", _double_buffer, _double_buffer_ref, (2,),
            "per-core double-buffered HBM->VMEM pipeline with async copies and DMA sems"),
    _Kernel("all_gather", _all_gather, _all_gather_ref, (2, 4),
            "int32 all-gather through VMEM_SHARED; core c writes gathered + c"),
    _Kernel("reduce_scatter", _reduce_scatter, _reduce_scatter_ref, (2, 4),
            "int32 reduce-scatter: contributions in VMEM_SHARED, core c sums block c"),
    _Kernel("ring_allreduce", _ring_allreduce, _ring_allreduce_ref, (2, 4),
            "ring all-reduce: tile to right neighbour's mailbox, remote recv signal, acks left"),
    _Kernel("prefix_sum", _prefix_sum, _prefix_sum_ref, (2, 4),
            "int32 inclusive scan of blocks: publish, barrier, fori_loop over 0..c"),
    _Kernel("prefix_chain", _prefix_chain, _prefix_chain_ref, (2, 4),
            "scan as a chain: core c waits for c-1's prefix, adds its block, signals c+1"),
    _Kernel("histogram", _histogram, _histogram_ref, (2,),
            "int32 per-lane histogram of 8 bins; core 0 sums every core's counts"),
    _Kernel("softmax", _softmax, _softmax_ref, (2, 4),
            "row softmax with columns split across cores: max and sum exchanged, 2 barriers",
            exact=False),
    _Kernel("gather_rows", _gather_rows, _gather_rows_ref, (2,),
            "embedding gather: indices and per-core scales DMA'd to SMEM, row DMAs"),
    _Kernel("all_to_all", _all_to_all, _all_to_all_ref, (2, 4),
            "int32 all-to-all: chunk k of core c to core k's inbox slot c, barrier"),
    _Kernel("shared_weight_matmul", _shared_weight_matmul, _shared_weight_matmul_ref, (2,),
            "core 0 async-copies the weight into VMEM_SHARED, barrier, every core relu(x @ w)"),
    _Kernel("broadcast_tile", _broadcast_tile, _broadcast_tile_ref, (2, 4),
            "core 0 DMAs a bias tile to VMEM_SHARED, waits, remote-signals every other core"),
    # Races.
    _Kernel("race_allreduce_no_barrier", _bug(_allreduce_sum, barrier=False), None, (2,),
            "allreduce_sum without the core_barrier: cores read partials others still write",
            expect="race"),
    _Kernel("race_softmax_reused_stats", _bug(_softmax, separate_sum_buffer=False), None, (2,),
            "softmax writing row sums into the maxes buffer other cores may still be reading",
            expect="race"),
    _Kernel("race_signal_before_dma_wait", _bug(_broadcast_tile, signal_early=True), None, (2,),
            "broadcast_tile signalling before the DMA into VMEM_SHARED is waited on",
            expect="race"),
    _Kernel("race_gather_same_rows", _bug(_all_gather, offset=False), None, (2,),
            "all_gather where every core writes its (different) copy over out[0]",
            expect="race"),
    _Kernel("race_ring_no_ack", _bug(_ring_allreduce, ack=False), None, (4,),
            "ring_allreduce without acks: a core refills a mailbox its owner has not read",
            expect="race"),
    # Deadlocks.
    _Kernel("deadlock_barrier_in_when", _bug(_histogram, barrier_everywhere=False), None,
            (2,), "histogram with the core_barrier inside pl.when(core == 0)",
            expect="deadlock"),
    _Kernel("deadlock_wait_too_many", _bug(_broadcast_tile, wait_value=2), None, (2,),
            "broadcast_tile whose receivers wait for 2 signals; core 0 sends each one",
            expect="deadlock"),
    _Kernel("deadlock_ring_recv_first", _bug(_ring_allreduce, send_first=False), None, (2,),
            "ring_allreduce where every core waits for its left neighbour before sending",
            expect="deadlock"),
    _Kernel("deadlock_signal_self", _bug(_producer_consumer, remote=False), None, (2,),
            "producer_consumer whose producer signals its own semaphore (no core_index)",
            expect="deadlock"),
]  # fmt: skip

CASES: list[MeshCase] = [k.at(cores) for k in _KERNELS for cores in k.cores]
ONE_CORE: list[MeshCase] = [k.at(1) for k in _KERNELS if k.expect == "ok"]
_BY_NAME = {k.name: k for k in _KERNELS}


def one_core(case: MeshCase) -> MeshCase:
    """``case``'s kernel built at one core (its references are written for any core count)."""
    return _BY_NAME[case.name.rsplit("_x", 1)[0]].at(1)


def _check(case: MeshCase) -> str:
    f, args = case.build()
    closed = jax.make_jaxpr(f)(*args)
    outs = jax.eval_shape(f, *args)
    assert isinstance(outs, (tuple, list)), case.name
    if case.reference is None:
        assert case.expect in ("race", "deadlock"), case.name
        return f"{case.name}: traced ({len(closed.jaxpr.eqns)} eqns), expect {case.expect}"
    assert case.expect == "ok", case.name
    refs = case.reference(*args)
    assert isinstance(refs, tuple) and len(refs) == len(outs), case.name
    for got, want in zip(refs, outs, strict=True):
        assert got.shape == want.shape and got.dtype == want.dtype, (case.name, got, want)
        assert np.all(np.isfinite(got)), case.name
    return f"{case.name}: traced, reference {[r.shape for r in refs]}"


if __name__ == "__main__":
    names = [c.name for c in CASES + ONE_CORE]
    assert len(set(names)) == len(names)
    for case in CASES + ONE_CORE:
        print(_check(case))
    counts = {e: sum(c.expect == e for c in CASES) for e in ("ok", "race", "deadlock")}
    print(f"{len(CASES)} cases {counts}, {len(ONE_CORE)} one-core cases")
