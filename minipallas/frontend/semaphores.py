"""Semaphores in traced code: upstream's ``pl.semaphore_signal``, ``semaphore_wait`` and
``semaphore_read`` (``ir.opset.semaphore``).

A semaphore ref comes from ``run_scoped(body, tpu.SemaphoreType.REGULAR)`` (or ``REGULAR((n,))``
and ``sem.at[i]``), or from ``pallas_call(..., scratch_shapes=[...])``; shared by a group when the
``run_scoped`` has ``collective_axes``. Each function takes one semaphore: a scalar ref or view.
"""

from __future__ import annotations

from typing import Any

from minipallas.frontend.refs import TracedRef
from minipallas.frontend.scopes import emit, trace_error
from minipallas.frontend.values import TracedArray, asarray, emit_array
from minipallas.ir.types import DMA_SEMAPHORE, SEMAPHORE


def semaphore_signal(sem: TracedRef, inc: Any = 1) -> None:
    """Adds ``inc`` (an int32 scalar) to the semaphore."""
    emit(TracedArray, "semaphore_signal", [_one(sem, "semaphore_signal"), _count(inc, "inc")],
         {"indexer": ()})  # fmt: skip


def semaphore_wait(sem: TracedRef, value: Any = 1, *, decrement: bool = True) -> None:
    """Waits until the semaphore holds at least ``value``, then subtracts it (unless
    ``decrement=False``)."""
    if not isinstance(decrement, bool):
        raise trace_error(f"semaphore_wait: decrement must be a bool, got {decrement!r}")
    operands = [_one(sem, "semaphore_wait"), _count(value, "value")]
    emit(TracedArray, "semaphore_wait", operands, {"indexer": (), "decrement": decrement})


def semaphore_read(sem: TracedRef) -> TracedArray:
    """The semaphore's count, an int32 scalar (a DMA semaphore's too)."""
    return emit_array("semaphore_read", [_one(sem, "semaphore_read", dma=True)], indexer=())


def _one(sem: Any, what: str, dma: bool = False) -> TracedRef:
    spaces = (SEMAPHORE, DMA_SEMAPHORE) if dma else (SEMAPHORE,)
    if not isinstance(sem, TracedRef) or sem.memory_space not in spaces:
        raise trace_error(
            f"{what} takes a semaphore ref, got {getattr(sem, 'type', type(sem).__name__)}",
            fix="allocate one: run_scoped(body, minipallas.tpu.SemaphoreType.REGULAR)",
        )
    if sem.shape != ():
        raise trace_error(
            f"{what} takes one semaphore, got an array of them {sem.shape}",
            fix="pick one: sem.at[i]",
        )
    return sem


def _count(x: Any, what: str) -> TracedArray:
    value = x if isinstance(x, TracedArray) else asarray(x, "int32")
    if value.type.dtype != "int32" or value.shape != ():
        raise trace_error(
            f"a semaphore's {what} must be an int32 scalar, got {value.type}",
            fix=f"convert it: {what}.astype(jnp.int32)",
        )
    return value
