"""Mosaic rules for ref views: a new ``memref`` aliasing part of, or reinterpreting, a ref.

As upstream's ref transforms lower:
- ``ref.at`` is ``tpu.memref_slice`` (starts are ``i32``, clamped like any dynamic index),
  then ``tpu.memref_squeeze`` for integer-indexed and squeezed dimensions;
- ``ref.reshape`` is ``tpu.memref_reshape``, ``ref.bitcast`` is ``tpu.memref_bitcast`` (across
  widths to the type with the second-minor dim scaled).
Strided views and ``ref.transpose`` have no memref form in Mosaic (upstream rejects them too).
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir import dtypes
from minipallas.ir.core import Op
from minipallas.lowering.compat.jaxlib_shim import ir, tpu
from minipallas.lowering.tpu import emit
from minipallas.lowering.tpu.context import Bound, LoweringContext, MemRef, rule, unsupported
from minipallas.lowering.tpu.windows import window


def _memref(ref: MemRef, shape: Sequence[int], dtype: str) -> ir.MemRefType:
    return emit.memref_type(shape, dtype, ref.space)


def sliced(ctx: LoweringContext, op: Op, ref: MemRef, dyn: Sequence[ir.Value]) -> MemRef:
    """The view of ``ref`` that ``op``'s indexer selects (``dyn``: its bound dynamic indices):
    ``tpu.memref_slice``, then ``tpu.memref_squeeze`` when dimensions drop."""
    w = window(ctx, op, ref, dyn, as_index=False)
    if w.strided:
        raise unsupported(
            op,
            "strided views of refs are not supported on TPU (as upstream)",
            fix="take the strided window with a load (x_ref[pl.ds(0, n, stride=k)]) instead",
        )
    view = tpu.memref_slice(_memref(ref, w.sizes, ref.dtype), ref.value, list(w.starts), [])
    if not all(w.kept):
        view = tpu.memref_squeeze(_memref(ref, w.result_shape, ref.dtype), view)
    return MemRef(view, ref.dtype, ref.space, (False,) * len(w.result_shape))


@rule("ref.at")
def at(ctx: LoweringContext, op: Op, ref: MemRef, *dyn: ir.Value) -> Sequence[Bound]:
    return [sliced(ctx, op, ref, dyn)]


@rule("ref.reshape")
def reshape(ctx: LoweringContext, op: Op, ref: MemRef) -> Sequence[Bound]:
    shape = op.attrs["shape"]
    if len(shape) < 2 or len(ref.shape) < 2 or any(ref.squeezed[-2:]):
        raise unsupported(
            op,
            "Mosaic reshapes refs of rank >= 2 only, with the last two dimensions not squeezed "
            "(as upstream)",
            fix="reshape the loaded value instead",
        )
    out = tpu.memref_reshape(_memref(ref, shape, ref.dtype), ref.value)
    return [MemRef(out, ref.dtype, ref.space, (False,) * len(shape))]


@rule("ref.bitcast")
def bitcast(ctx: LoweringContext, op: Op, ref: MemRef) -> Sequence[Bound]:
    """Across widths the second-minor dim scales (the memref's own, squeezed dims included)."""
    dtype = op.attrs["dtype"]
    shape = list(ref.shape)
    if dtypes.itemsize(dtype) != dtypes.itemsize(ref.dtype):
        if len(shape) < 2 or ref.squeezed[-2]:
            raise unsupported(
                op,
                "a bitcast view that changes the element width needs a second-minor dim that is "
                "not squeezed (upstream: 'Bitcast a ref whose 2nd minormost dimension is "
                "squeezed when bitwidth changes')",
                fix="keep the second-minor dim in the block shape, or load and pltpu.bitcast",
            )
        shape[-2] = shape[-2] * dtypes.itemsize(ref.dtype) // dtypes.itemsize(dtype)
    out = tpu.memref_bitcast(_memref(ref, shape, dtype), ref.value)
    return [MemRef(out, dtype, ref.space, ref.squeezed)]


@rule("ref.transpose")
def transpose(ctx: LoweringContext, op: Op, ref: MemRef) -> Sequence[Bound]:
    raise unsupported(
        op,
        "transposed views of refs have no Mosaic TPU lowering (upstream supports none either)",
        fix="load the window and transpose the value (jnp.transpose / x.T) instead",
    )
