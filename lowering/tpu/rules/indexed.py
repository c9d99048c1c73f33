"""Mosaic rules for windows of register values: ``slice``, ``dynamic_slice`` and
``dynamic_update_slice``.

They come from scratch promotion (``lower_to_mosaic(..., promote_scratch=True)``, which takes only
buffers whose every access is static) and from loops over a value's rows, as a ``lax.scan``
with extensive inputs or outputs imports (upstream's Mosaic lowering rejects those scans:
"Scan with 1 extensive output(s) is not supported"). Dynamic starts are clamped as the IR
defines (``windows.clamp_start``).

- A static window is read with ``vector.extract_strided_slice`` and written as
  ``tpu.concatenate`` of pieces (``pieces``: Mosaic refuses ``vector.insert_strided_slice``),
  with a ``vector.shape_cast`` dropping or restoring integer-indexed dimensions. The extract
  verifies with unit strides only, so a strided window of a value is refused: a ref can read it
  (``tpu.strided_load``).
- A read at a dynamic start first rotates the value (``tpu.dynamic_rotate``, what ``pltpu.roll``
  lowers to) so that the window starts at 0 along that dimension, then reads it statically.
- A write at a dynamic start spreads the update over the whole value (``vector.broadcast`` of a
  one-position dimension, else a rotation of the zero-padded update) and keeps it where the
  position lies in the window (``tpu.iota`` compares, then ``arith.select``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from minipallas.ir import indexing
from minipallas.ir.core import Op
from minipallas.ir.types import ArrayType
from minipallas.lowering.compat.jaxlib_shim import arith, ir, tpu, vector
from minipallas.lowering.tpu import emit
from minipallas.lowering.tpu.context import LoweringContext, rule, unsupported
from minipallas.lowering.tpu.pieces import place
from minipallas.lowering.tpu.windows import clamp_start


@dataclass(frozen=True)
class _Dim:
    """One dimension of a window: its start (an int, or a clamped ``i32`` value) and how many
    consecutive positions it takes (1 for an integer entry) in a dimension of ``n``."""

    start: int | ir.Value
    size: int
    n: int

    @property
    def dynamic(self) -> bool:
        return not isinstance(self.start, int)


def _dims(ctx: LoweringContext, op: Op, dyn: Sequence[ir.Value]) -> list[_Dim]:
    dyn_values = op.group("indices")
    dims = []
    for entry, n in zip(op.attrs["indexer"], op.operands[0].type.shape, strict=True):
        if isinstance(entry, indexing.Int):
            start, size = entry.index, 1
        else:
            start, size = entry.start, entry.size
            if entry.stride != 1 and size > 1:
                raise unsupported(
                    op,
                    "a strided window of a register value has no Mosaic TPU lowering "
                    "(vector.extract_strided_slice and insert_strided_slice take unit strides)",
                    fix="read or write the strided window through a ref "
                    "(x_ref[pl.ds(start, size, stride=k)]) instead",
                )
        if isinstance(start, indexing.Dyn):  # a window as long as its dimension starts at 0
            pos = start.pos
            start = 0 if size == n else clamp_start(ctx, dyn_values[pos], dyn[pos], n - size)
        dims.append(_Dim(start, size, n))
    return dims


@rule("slice", "dynamic_slice")
def slice_(ctx: LoweringContext, op: Op, x: ir.Value, *dyn: ir.Value) -> Sequence[ir.Value]:
    src, out = op.operands[0].type, op.result.type
    dims = _dims(ctx, op, dyn)
    for axis, dim in enumerate(dims):
        if dim.dynamic:  # bring the window's start to 0: rotate by (n - start) mod n
            n = emit.i32(dim.n)
            x = tpu.dynamic_rotate(x, arith.remsi(arith.subi(n, dim.start), n), axis)
    sizes = [d.size for d in dims]
    if sizes != list(src.shape):
        offsets = [0 if d.dynamic else d.start for d in dims]
        window_type = emit.value_type(ArrayType(sizes, src.dtype))
        x = vector.extract_strided_slice(window_type, x, offsets, sizes, [1] * len(dims))
    return [emit.shape_cast(x, out)]


@rule("dynamic_update_slice")
def update_slice(ctx: LoweringContext, op: Op, x: ir.Value, *rest: ir.Value) -> Sequence[ir.Value]:
    *dyn, update = rest
    src = op.operands[0].type
    dims = _dims(ctx, op, dyn)
    sizes = [d.size for d in dims]
    window = emit.shape_cast(update, ArrayType(sizes, src.dtype))
    if not any(d.dynamic for d in dims):
        if sizes == list(src.shape):
            return [window]
        return [place(ctx, x, window, [d.start for d in dims])]
    # Placed statically: static dimensions at their start, dynamic ones at 0 (one position
    # stays one, to be broadcast), then rotated to their start.
    placed = [1 if d.dynamic and d.size == 1 else d.n for d in dims]
    if placed != sizes:
        zeros = emit.constant(0, ArrayType(placed, src.dtype))
        offsets = [0 if d.dynamic else d.start for d in dims]
        window = place(ctx, zeros, window, offsets)
    for axis, dim in enumerate(dims):
        if dim.dynamic and dim.size > 1:
            window = tpu.dynamic_rotate(window, dim.start, axis)
    window = emit.broadcast(window, src)
    return [arith.select(_inside(dims, src.shape), window, x)]


def _inside(dims: Sequence[_Dim], shape: Sequence[int]) -> ir.Value:
    """The ``i1`` mask of the positions of ``shape`` the window covers."""
    positions = ArrayType(tuple(shape), "int32")
    mask = None
    for axis, dim in enumerate(dims):
        if dim.size == dim.n:
            continue
        j = emit.iota(shape, axis)
        start = emit.broadcast(dim.start if dim.dynamic else emit.i32(dim.start), positions)
        if dim.size == 1:
            hit = arith.cmpi(arith.CmpIPredicate.eq, j, start)
        else:  # unsigned, so a position before the start (a negative offset) is outside too
            size = emit.constant(dim.size, positions)
            hit = arith.cmpi(arith.CmpIPredicate.ult, arith.subi(j, start), size)
        mask = hit if mask is None else arith.andi(mask, hit)
    return mask
