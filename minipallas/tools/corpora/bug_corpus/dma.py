"""Manual DMAs and semaphores: a double-buffered pipeline over an ANY-space (HBM) input whose
copy is read before its wait, never waited, or sourced past the array's end; a prefetch into
the buffer still being read; two copies on one semaphore with one wait; a semaphore waited
twice (it hangs); a signal nobody waits for; an output copy never waited. Measured on a v5e:
a kernel that ends with a copy in flight or a semaphore not at zero halts the core
("RuntimeUnexpectedCoreHalt"), as a copy from past the end does; the read before the wait
varies, and the single buffer refilled while read gave the right values (latent)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from .common import Entry, S, call, normal

HBM = pl.BlockSpec(memory_space=pl.ANY)
VMEM = pl.BlockSpec(memory_space=pltpu.VMEM)


def _pipeline_kernel(x_hbm, o_ref, buf, sem, *, bug: str | None):
    n = x_hbm.shape[0] // 8

    def copy(c, slot):
        return pltpu.make_async_copy(x_hbm.at[pl.ds(c * 8, 8)], buf.at[slot], sem.at[slot])

    copy(0, 0).start()

    def body(c, carry):
        slot = c % 2
        if bug == "past-end":  # no guard: the last step prefetches chunk n, past the end
            copy(c + 1, 1 - slot).start()
        elif bug == "never-waited":  # clamped instead of guarded: one copy too many
            copy(jnp.minimum(c + 1, n - 1), 1 - slot).start()
        else:

            @pl.when(c + 1 < n)
            def _():
                copy(c + 1, 1 - slot).start()

        if bug == "read-before-wait":
            value = buf[slot]
            copy(c, slot).wait()
        else:
            copy(c, slot).wait()
            value = buf[slot]
        o_ref[pl.ds(pl.multiple_of(c * 8, 8), 8), :] = value * 2.0 + 1.0
        return carry

    jax.lax.fori_loop(0, n, body, 0)


def pipeline(x, *, interpret=False, bug: str | None = None):
    """``2 x + 1``, streamed from HBM in chunks of 8 rows through two VMEM buffers."""
    return call(
        functools.partial(_pipeline_kernel, bug=bug),
        S(x.shape, x.dtype),
        interpret,
        in_specs=[HBM],
        out_specs=VMEM,
        scratch_shapes=[pltpu.VMEM((2, 8, 128), jnp.float32), pltpu.SemaphoreType.DMA((2,))],
    )(x)


# ----- a single buffer refilled while it is read -----


def _single_buffer_kernel(x_hbm, o_ref, buf, sem):
    n = x_hbm.shape[0] // 8

    def copy(c):
        return pltpu.make_async_copy(x_hbm.at[pl.ds(c * 8, 8)], buf, sem)

    copy(0).start()

    def body(c, carry):
        copy(c).wait()

        @pl.when(c + 1 < n)
        def _():
            copy(c + 1).start()  # into the buffer read just below

        o_ref[pl.ds(pl.multiple_of(c * 8, 8), 8), :] = buf[...] * 2.0 + 1.0
        return carry

    jax.lax.fori_loop(0, n, body, 0)


def _single_buffer(x, *, interpret=False):
    return call(
        _single_buffer_kernel,
        S(x.shape, x.dtype),
        interpret,
        in_specs=[HBM],
        out_specs=VMEM,
        scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA(())],
    )(x)


# ----- two halves on one semaphore; waits: one, or two for one copy -----


def _halves_kernel(x_hbm, o_ref, top, bottom, sem, *, waits: str):
    half = x_hbm.shape[0] // 2
    a = pltpu.make_async_copy(x_hbm.at[pl.ds(0, half)], top, sem)
    b = pltpu.make_async_copy(x_hbm.at[pl.ds(half, half)], bottom, sem)
    a.start()
    if waits == "one":  # both signal sem; one wait lets the bottom be read before it lands
        b.start()
        a.wait()
    else:  # "twice": one copy, two waits: the second never returns
        a.wait()
        a.wait()
    o_ref[pl.ds(0, half), :] = top[...] + 1.0
    o_ref[pl.ds(half, half), :] = (bottom[...] if waits == "one" else top[...]) + 1.0


def _halves(x, *, interpret=False, waits: str):
    half = x.shape[0] // 2
    return call(
        functools.partial(_halves_kernel, waits=waits),
        S(x.shape, x.dtype),
        interpret,
        in_specs=[HBM],
        out_specs=VMEM,
        scratch_shapes=[
            pltpu.VMEM((half, 128), jnp.float32),
            pltpu.VMEM((half, 128), jnp.float32),
            pltpu.SemaphoreType.DMA(()),
        ],
    )(x)


# ----- a regular semaphore signalled and never waited -----


def _signal_kernel(x_ref, o_ref, sem):
    o_ref[...] = x_ref[...] * 2.0
    pl.semaphore_signal(sem, 1)  # a "done" flag left over from a two-core version


def _signal_only(x, *, interpret=False):
    return call(
        _signal_kernel,
        S(x.shape, x.dtype),
        interpret,
        in_specs=[VMEM],
        out_specs=VMEM,
        scratch_shapes=[pltpu.SemaphoreType.REGULAR(())],
    )(x)


# ----- the output written by a DMA that nobody waits for -----


def _store_kernel(x_ref, o_hbm, tmp, sem, *, wait: bool):
    tmp[...] = x_ref[...] * 2.0 + 1.0
    out = pltpu.make_async_copy(tmp, o_hbm, sem)
    out.start()
    if wait:
        out.wait()


def store_via_dma(x, *, interpret=False, wait: bool = False):
    """``2 x + 1`` computed in VMEM scratch and copied to an HBM output."""
    return call(
        functools.partial(_store_kernel, wait=wait),
        S(x.shape, x.dtype),
        interpret,
        in_specs=[VMEM],
        out_specs=HBM,
        scratch_shapes=[pltpu.VMEM(x.shape, jnp.float32), pltpu.SemaphoreType.DMA(())],
    )(x)


X = normal(31, 64, 128)
ENTRIES = [
    Entry(
        "dma_read_before_wait",
        functools.partial(pipeline, bug="read-before-wait"),
        (X,),
        lambda x: 2.0 * x + 1.0,
        "dma",
        "varies",
        "each chunk's buffer is read before its copy's wait, so possibly before it lands",
    ),
    Entry(
        "dma_never_waited",
        functools.partial(pipeline, bug="never-waited"),
        (X,),
        lambda x: 2.0 * x + 1.0,
        "dma",
        "halt",
        "the prefetch index is clamped instead of guarded: the last step starts a copy that "
        "is never waited",
    ),
    Entry(
        "dma_source_past_end",
        functools.partial(pipeline, bug="past-end"),
        (X,),
        lambda x: 2.0 * x + 1.0,
        "out-of-bounds",
        "halt",
        "the prefetch is not guarded: the last step copies chunk 8 of 8 from past the HBM "
        "array's end",
    ),
    Entry(
        "dma_into_busy_buffer",
        _single_buffer,
        (X,),
        lambda x: 2.0 * x + 1.0,
        "dma",
        "latent",
        "one buffer: the next chunk's copy is started into it before the current chunk is read",
    ),
    Entry(
        "two_copies_one_wait",
        functools.partial(_halves, waits="one"),
        (X,),
        lambda x: x + 1.0,
        "dma",
        "halt",
        "two copies signal one semaphore and one wait follows: the bottom half may be read "
        "before it lands (and the kernel ends with the semaphore not at 0)",
    ),
    Entry(
        "semaphore_waited_twice",
        functools.partial(_halves, waits="twice"),
        (X,),
        lambda x: np.concatenate([x[:32] + 1.0, x[:32] + 1.0]),
        "semaphore",
        "hang",
        "one copy, two waits on its semaphore: the second waits for a signal that never comes",
    ),
    Entry(
        "semaphore_signal_unwaited",
        _signal_only,
        (X,),
        lambda x: 2.0 * x,
        "semaphore",
        "halt",
        "a regular semaphore is signalled and never waited: it ends the kernel non-zero",
    ),
    Entry(
        "output_copy_never_waited",
        store_via_dma,
        (X,),
        lambda x: 2.0 * x + 1.0,
        "dma",
        "halt",
        "the copy of the result to the HBM output is started and never waited",
    ),
]
