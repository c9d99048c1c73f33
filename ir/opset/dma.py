"""Asynchronous copies: ``dma_start`` and ``dma_wait`` (upstream's ``pltpu.make_async_copy``,
``async_copy``: ``dma_start_p`` / ``dma_wait_p``).

Each takes the source ref, the destination ref and one DMA semaphore (memory space
``dma_semaphore``, ``tpu.SemaphoreType.DMA``); a window of any of them is a ``ref.at`` view:

    dma_start %src, %dst, %sem     // copy src into dst; sem += copy_count(dst)
    dma_wait %src, %dst, %sem      // wait until sem >= copy_count(dst), then sem -= it

Source and destination have one shape and dtype and may live in any memory space (ANY/HBM,
VMEM, SMEM). The semaphore counts elements, as upstream's discharge rules count them: at most
``COUNT_MAX`` (the int16 maximum, upstream's interpret-mode semaphore dtype) per copy. The copy
happens at the start in every minipallas meaning (interpreter, discharge), as upstream's
discharge and interpret mode have it; on the chip the destination is only defined after the
wait, so a correct kernel never reads it (or writes the source) in between.
"""

from __future__ import annotations

from minipallas.ir.opdef import ACCUM, READ, WRITE, Attrs, Regions, Types, declare, require
from minipallas.ir.syntax import Operands
from minipallas.ir.types import DMA_SEMAPHORE, RefType, is_semaphore

COUNT_MAX = 32767


def copy_count(t: RefType) -> int:
    """What one copy of a ``t``-shaped window adds to (and its wait takes from) its semaphore."""
    return min(t.value_type.size, COUNT_MAX)


def _copy(types: Types) -> Types:
    require(len(types) == 3, f"expected 3 operands (src, dst, sem), got {len(types)}")
    src, dst, sem = types
    for name, t in (("src", src), ("dst", dst)):
        require(isinstance(t, RefType) and not is_semaphore(t),
                f"operand '{name}' must be a ref of memory, got {t}")  # fmt: skip
    require(
        (src.shape, src.dtype) == (dst.shape, dst.dtype),  # type: ignore[union-attr]
        f"src {src} and dst {dst} must have one shape and dtype",
    )
    require(
        isinstance(sem, RefType) and sem.memory_space == DMA_SEMAPHORE,
        f"operand 'sem' must be a DMA semaphore ref, got {sem}",
    )
    require(sem.shape == (), f"operand 'sem' must be one semaphore (sem.at[i]), got {sem}")  # type: ignore[union-attr]
    return ()


@declare(
    "dma_start",
    operands=("src", "dst", "sem"),
    syntax=Operands(),
    effect=(READ, WRITE, ACCUM),
    pure=False,
)
def dma_start(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """Start copying ``src`` into ``dst``; ``sem`` counts it when it lands:
    ``dma_start %src, %dst, %sem``."""
    return _copy(types)


@declare(
    "dma_wait",
    operands=("src", "dst", "sem"),
    syntax=Operands(),
    effect=(READ, WRITE, ACCUM),
    pure=False,
)
def dma_wait(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """Wait for a copy into ``dst`` to land, taking its count back from ``sem``:
    ``dma_wait %src, %dst, %sem``. Its effects are ``dma_start``'s, as upstream's are: no
    pass may move an access to ``src`` or ``dst`` across it."""
    return _copy(types)
