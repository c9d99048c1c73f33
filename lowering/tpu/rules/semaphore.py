"""Mosaic rules for the semaphore ops: ``tpu.sem_signal``, ``tpu.sem_wait``, ``tpu.sem_read``.

A semaphore ref is a ``memref`` of ``!tpu.semaphore`` in ``#tpu.memory_space<semaphore_mem>``:
a scratch operand of the kernel function, or a ``tpu.sem_alloc`` inside a ``run_scoped``'s
``tpu.region`` (``scoped``). The Mosaic ops take one semaphore, a 0-d memref, so an op that
names a counter of an array of them (its own indexer, or a ``ref.at`` view) first slices it out
as ``views`` does: ``tpu.memref_slice`` (i32 starts, clamped like any dynamic index), then
``tpu.memref_squeeze`` to rank 0. This is what upstream Pallas emits for ``pl.semaphore_*`` on
``sem.at[i]``.

A signal of another device's semaphore (a kernel that spans devices, ``remote``) names that
device: ``tpu.sem_signal %sem, %inc device_id %d``, as upstream's.

Mosaic's wait always decrements: a ``semaphore_wait ..., keep`` is refused with upstream's
message (upstream's rule has the check, but in jax 0.10.2 it never fires and emits a
decrementing wait: docs/guides/kernels.md, Mosaic TPU).
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir.core import Op
from minipallas.lowering.compat.jaxlib_shim import ir, tpu
from minipallas.lowering.tpu.context import Bound, LoweringContext, MemRef, rule, unsupported
from minipallas.lowering.tpu.device_context import signal_device
from minipallas.lowering.tpu.rules.views import sliced


def _semaphore(ctx: LoweringContext, op: Op, args: Sequence[Bound]) -> tuple[MemRef, list]:
    """The one semaphore ``op`` names, as a 0-d memref, and the op's value operands."""
    indices = op.slices()["indices"]  # ``args`` line up with the operands
    ref: MemRef = args[0]  # type: ignore[assignment]
    dyn, rest = list(args[indices]), list(args[indices.stop :])
    if op.attrs["indexer"]:
        ref = sliced(ctx, op, ref, dyn)
    return ref, rest


@rule("semaphore_signal")
def semaphore_signal(ctx: LoweringContext, op: Op, *args: Bound) -> Sequence[Bound]:
    sem, (inc,) = _semaphore(ctx, op, args)
    tpu.sem_signal(sem.value, inc, device_id=signal_device(ctx, op, args[0]))
    return []


@rule("semaphore_wait")
def semaphore_wait(ctx: LoweringContext, op: Op, *args: Bound) -> Sequence[Bound]:
    if not op.attrs.get("decrement", True):
        raise unsupported(
            op,
            "Non-decrementing wait is not supported.",
            fix="wait with decrement=True and signal the semaphore back (semaphore_signal) "
            "where the count must stay, or read it with semaphore_read",
        )
    sem, (value,) = _semaphore(ctx, op, args)
    tpu.sem_wait(sem.value, value)
    return []


@rule("semaphore_read")
def semaphore_read(ctx: LoweringContext, op: Op, *args: Bound) -> Sequence[ir.Value]:
    sem, _ = _semaphore(ctx, op, args)
    return [tpu.sem_read(sem.value)]
