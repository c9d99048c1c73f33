"""Index arithmetic: where a state op's or a view's indexer lands in a ``memref``.

An indexer has one entry per dimension the kernel sees; the memref may have more (squeezed
block dimensions, which are 1). ``window`` walks the memref's dimensions and gives, for each,
the start, the size, the stride, and whether it survives into the result (a squeezed
dimension or an ``Int`` entry is read with size 1 and dropped afterwards).

Static starts become constants. A dynamic start is clamped the way minipallas defines it (an
``Int`` into ``[0, dim - 1]``, a slice start into ``[0, dim - span]``) with ``arith.maxsi`` /
``arith.minsi`` — each bound only when ``ranges`` cannot show it already holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from minipallas.ir import dtypes, indexing
from minipallas.ir.core import Op, Value
from minipallas.lowering.compat.jaxlib_shim import arith, ir
from minipallas.lowering.tpu import emit
from minipallas.lowering.tpu.context import LoweringContext, MemRef, unsupported


@dataclass(frozen=True)
class Window:
    """Per memref dimension: start (``index`` or ``i32``), size, stride, kept in the result."""

    starts: tuple[ir.Value, ...]
    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    kept: tuple[bool, ...]

    @property
    def strided(self) -> bool:
        return any(s != 1 for s in self.strides)

    @property
    def result_shape(self) -> tuple[int, ...]:
        return tuple(s for s, k in zip(self.sizes, self.kept, strict=True) if k)


def window(
    ctx: LoweringContext,
    op: Op,
    ref: MemRef,
    dyn: Sequence[ir.Value],
    *,
    as_index: bool = True,
) -> Window:
    """The window ``op``'s ``indexer`` selects in ``ref``; ``dyn`` are the bound dynamic index
    operands (operands ``1 .. 1+n`` of ``op``). Starts are ``index`` values for loads and
    stores, ``i32`` for ``tpu.memref_slice`` (``as_index=False``)."""
    indexer = op.attrs["indexer"]
    if indexing.has_arrays(indexer):
        raise unsupported(
            op,
            "integer-array indexing of a ref has no Mosaic TPU lowering "
            "(upstream: 'Cannot do int indexing on TPU')",
            fix="load a window with slices and select from the loaded value instead",
        )
    dyn_values = op.group("indices")
    entries = iter(indexer)
    starts, sizes, strides, kept = [], [], [], []
    for dim, squeezed in zip(ref.shape, ref.squeezed, strict=True):
        if squeezed:
            starts.append(_static(0, as_index))
            sizes.append(1)
            strides.append(1)
            kept.append(False)
            continue
        entry = next(entries)
        if isinstance(entry, indexing.Int):
            start, size, stride, keep = entry.index, 1, 1, False
        else:
            start, size, stride, keep = entry.start, entry.size, entry.stride, True
        if isinstance(start, indexing.Dyn):
            span = (size - 1) * stride + 1
            v, x = dyn_values[start.pos], dyn[start.pos]
            starts.append(clamp_start(ctx, v, x, dim - span, as_index))
        else:
            starts.append(_static(start, as_index))
        sizes.append(size)
        strides.append(stride)
        kept.append(keep)
    return Window(tuple(starts), tuple(sizes), tuple(strides), tuple(kept))


def _static(value: int, as_index: bool) -> ir.Value:
    return emit.index(value) if as_index else emit.i32(value)


def clamp_start(
    ctx: LoweringContext, v: Value, x: ir.Value, hi: int, as_index: bool = False
) -> ir.Value:
    """``x`` (the value of ``v``) clamped into ``[0, hi]`` where that may change it; ``i32``,
    or ``index`` when ``as_index``."""
    dtype = v.type.dtype
    known = ctx.range_of(v)
    x = emit.to_i32(x, dtype)
    unsigned = dtypes.is_unsigned(dtype)
    if not unsigned and (known is None or known[0] < 0):
        x = arith.maxsi(x, emit.i32(0))
    if known is None or known[1] > hi:
        x = (arith.minui if unsigned else arith.minsi)(x, emit.i32(hi))
    if not as_index:
        return x
    return emit.to_index(x, "uint32" if unsigned else "int32")
