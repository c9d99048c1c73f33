"""Mosaic rules for the pure indexed ops that scratch promotion leaves behind.

Promoting a scoped scratch buffer to registers (``lower_kernel(..., promote_scratch=True)``)
discharges its reads and writes into ``slice`` and ``dynamic_update_slice`` of an SSA vector.
Promotion only takes buffers whose every access is static, so these rules see static
indexers only:
- ``slice`` is ``vector.extract_strided_slice`` then a ``vector.shape_cast`` (or
  ``vector.extract`` for a scalar) dropping integer-indexed dimensions;
- ``dynamic_update_slice`` is a ``vector.shape_cast`` of the update back to the window's rank,
  then ``vector.insert_strided_slice``.
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir import indexing
from minipallas.ir.core import Op
from minipallas.ir.types import ArrayType
from minipallas.lowering.jaxlib_shim import ir, vector
from minipallas.lowering.tpu import emit
from minipallas.lowering.tpu.context import KernelContext, register, unsupported


def _static_window(op: Op) -> tuple[list[int], list[int], list[int]]:
    """Offsets, sizes and strides of a static indexer (integer entries have size 1)."""
    indexer = op.attrs["indexer"]
    if not indexing.is_static(indexer):
        raise unsupported(
            op,
            "a dynamic window of a register value has no Mosaic TPU lowering",
            fix="promote only scratch whose accesses are static (lower_kernel does)",
        )
    offsets, sizes, strides = [], [], []
    for entry in indexer:
        if isinstance(entry, indexing.Int):
            offsets.append(entry.index)
            sizes.append(1)
            strides.append(1)
        else:
            offsets.append(entry.start)
            sizes.append(entry.size)
            strides.append(entry.stride)
    return offsets, sizes, strides


@register("slice")
def slice_(ctx: KernelContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    src, out = op.operands[0].type, op.result.type
    offsets, sizes, strides = _static_window(op)
    if list(sizes) == list(src.shape):
        window = x
    else:
        window_type = emit.value_type(ArrayType(sizes, src.dtype))
        window = vector.extract_strided_slice(window_type, x, offsets, sizes, strides)
    return [emit.shape_cast(window, out)]


@register("dynamic_update_slice")
def update_slice(ctx: KernelContext, op: Op, x: ir.Value, update: ir.Value) -> Sequence[ir.Value]:
    src = op.operands[0].type
    offsets, sizes, strides = _static_window(op)
    window = emit.shape_cast(update, ArrayType(sizes, src.dtype))
    if list(sizes) == list(src.shape):
        return [window]
    return [vector.insert_strided_slice(window, x, offsets, strides)]
