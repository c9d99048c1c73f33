"""Asynchronous copies in traced code: upstream's ``pltpu.make_async_copy`` and
``pltpu.async_copy`` (``ir.opset.dma``).

``make_async_copy(src, dst, sem)`` describes a copy between two refs of one shape and dtype
in any memory spaces (a window is a view: ``x_ref.at[pl.ds(i, 8)]``), counted by one DMA
semaphore (``tpu.SemaphoreType.DMA`` in ``scratch_shapes`` or ``run_scoped``; ``sem.at[i]`` of
an array of them). ``.start()`` issues it (``dma_start``) and ``.wait()`` waits for it
(``dma_wait``); ``async_copy`` is both the description and its start. Remote copies (to
another device) have no minipallas counterpart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from minipallas.frontend.refs import TracedRef
from minipallas.frontend.scopes import emit, trace_error
from minipallas.frontend.values import TracedArray
from minipallas.ir.types import DMA_SEMAPHORE, is_semaphore


@dataclass(frozen=True)
class AsyncCopyDescriptor:
    """One copy of ``src`` into ``dst`` counted by ``sem`` (upstream's descriptor, local
    copies only): start it, then wait for it, as often as the kernel likes."""

    src_ref: TracedRef
    dst_ref: TracedRef
    dst_sem: TracedRef

    def start(self, priority: int = 0, *, add: bool = False) -> None:
        """Issues the copy. Only upstream's defaults: ``add=True`` (accumulate into ``dst``)
        has no discharge or Mosaic rule upstream, and the IR keeps no priority (Mosaic gets
        upstream's default, 0)."""
        if add:
            raise trace_error(
                "async copy start: add=True is not supported (nor upstream)",
                op="dma_start",
                fix="copy, then add the values in the kernel",
            )
        if priority != 0:
            raise trace_error(
                f"async copy start: priority {priority!r} is not supported",
                op="dma_start",
                fix="leave priority at 0",
            )
        self._emit("dma_start")

    def wait(self) -> None:
        """Waits until the copy has landed in ``dst``."""
        self._emit("dma_wait")

    wait_recv = wait  # upstream's name for the receiving side's wait

    def _emit(self, name: str) -> None:
        emit(TracedArray, name, [self.src_ref, self.dst_ref, self.dst_sem])


def make_async_copy(src_ref: Any, dst_ref: Any, sem: Any) -> AsyncCopyDescriptor:
    """Describes a copy of ``src_ref`` into ``dst_ref`` that ``sem`` counts."""
    for what, ref in (("source", src_ref), ("destination", dst_ref)):
        if not isinstance(ref, TracedRef) or is_semaphore(ref.type):
            raise trace_error(
                f"make_async_copy: the {what} must be a ref of memory, got "
                f"{getattr(ref, 'type', type(ref).__name__)}",
                fix="pass kernel refs, scratch refs or their windows (x_ref.at[pl.ds(i, n)])",
            )
    if (src_ref.shape, src_ref.type.dtype) != (dst_ref.shape, dst_ref.type.dtype):
        raise trace_error(
            f"make_async_copy: the source {src_ref.type} and destination {dst_ref.type} must "
            "have one shape and dtype",
            fix="copy between windows of one shape (ref.at[...]); convert dtypes after the wait",
        )
    if not isinstance(sem, TracedRef) or sem.memory_space != DMA_SEMAPHORE:
        raise trace_error(
            "make_async_copy: the semaphore must be a DMA semaphore, got "
            f"{getattr(sem, 'type', type(sem).__name__)}",
            fix="allocate one: scratch_shapes=[minipallas.tpu.SemaphoreType.DMA] or "
            "run_scoped(body, minipallas.tpu.SemaphoreType.DMA((n,)))",
        )
    if sem.shape != ():
        raise trace_error(
            f"make_async_copy: takes one semaphore, got an array of them {sem.shape}",
            fix="pick one: sem.at[i]",
        )
    return AsyncCopyDescriptor(src_ref, dst_ref, sem)


def async_copy(
    src_ref: Any, dst_ref: Any, sem: Any, *, priority: int = 0, add: bool = False
) -> AsyncCopyDescriptor:
    """Starts a copy of ``src_ref`` into ``dst_ref``; returns it to wait for."""
    copy = make_async_copy(src_ref, dst_ref, sem)
    copy.start(priority, add=add)
    return copy


def make_async_remote_copy(*args: Any, **kwargs: Any) -> None:
    """Upstream's copy to another device's memory: refused (module docstring)."""
    raise trace_error(
        "remote async copies (make_async_remote_copy, device_id) are not supported",
        op="dma_start",
        fix="copy locally (make_async_copy) and share data among programs through a "
        "collective run_scoped's memory (collectives='simulate')",
    )


async_remote_copy = make_async_remote_copy
