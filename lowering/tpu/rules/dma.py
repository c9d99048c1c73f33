"""Mosaic rules for the async copies: ``dma_start`` is ``tpu.enqueue_dma`` and ``dma_wait`` is
``tpu.wait_dma2``, as upstream lowers ``dma_start_p`` / ``dma_wait_p`` for a local copy.

Source, destination and semaphore are memrefs as the views made them (``ref.at`` is
``tpu.memref_slice`` + ``tpu.memref_squeeze``); a DMA semaphore is a 0-d memref of
``!tpu.dma_semaphore`` in ``semaphore_mem``. A kernel operand whose block squeezes a dimension
holds it as 1 in its memref; the copy squeezes it out first, so both ends have the shape the
kernel sees. Bool buffers are refused with upstream's message: Mosaic has no DMA of them.
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir.core import Op
from minipallas.lowering.compat.jaxlib_shim import tpu
from minipallas.lowering.tpu import emit
from minipallas.lowering.tpu.context import Bound, LoweringContext, MemRef, rule, unsupported


def buffer(op: Op, ref: MemRef) -> object:
    """The memref the copy names: ``ref``'s, its squeezed block dimensions squeezed out."""
    if ref.dtype == "bool":
        raise unsupported(
            op,
            "DMAs with bool dtypes are not supported.",
            fix="copy the bools as int32 (or int8) and compare after the wait",
        )
    if not any(ref.squeezed):
        return ref.value
    shape = [d for d, s in zip(ref.shape, ref.squeezed, strict=True) if not s]
    return tpu.memref_squeeze(emit.memref_type(shape, ref.dtype, ref.space), ref.value)


@rule("dma_start")
def dma_start(
    ctx: LoweringContext, op: Op, src: MemRef, dst: MemRef, sem: MemRef
) -> Sequence[Bound]:
    tpu.enqueue_dma(
        source=buffer(op, src), target=buffer(op, dst), target_semaphore=sem.value, priority=0
    )
    return []


@rule("dma_wait")
def dma_wait(
    ctx: LoweringContext, op: Op, src: MemRef, dst: MemRef, sem: MemRef
) -> Sequence[Bound]:
    tpu.wait_dma2(sem.value, buffer(op, src), buffer(op, dst))
    return []
