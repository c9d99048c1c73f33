"""A static window written into a register value, as ``tpu.concatenate`` of pieces.

Mosaic's layout inference refuses ``vector.insert_strided_slice`` ("Unsupported operation"),
so a static ``dynamic_update_slice`` (what a concatenation, a stack, a wrap padding or a
promoted scratch write imports as) is built from pieces instead, one axis at a time:

1. along the first axis the window does not cover whole, the value is cut into the part
   before the window, the part the window spans and the part after it
   (``vector.extract_strided_slice``; an empty part is left out);
2. the window is placed into the middle part the same way, on the axes after this one;
3. the parts are joined with ``tpu.concatenate``, upstream's op for ``lax.concatenate``.

``LoweringContext.pieces`` remembers each joined value's parts, so cutting a later window out
of it takes parts back instead of slicing, and joining a joined value splices its parts. So a
concatenation written as zeros then one write per operand (the jaxpr importer's form) comes out
as one ``tpu.concatenate`` of the operands, upstream's module; the unused zeros are dropped by
the canonicalizer.
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.lowering.compat.jaxlib_shim import ir, tpu, vector
from minipallas.lowering.tpu.context import LoweringContext


def place(ctx: LoweringContext, x: ir.Value, window: ir.Value, starts: Sequence[int]) -> ir.Value:
    """``x`` with ``window`` (a vector of ``x``'s rank) written at the static ``starts``."""
    shape, sizes = _shape(x), _shape(window)
    for axis, (start, size, n) in enumerate(zip(starts, sizes, shape, strict=True)):
        if size == n:
            continue
        middle = place(ctx, cut(ctx, x, axis, start, size), window, [0] * len(shape))
        parts = [
            cut(ctx, x, axis, 0, start),
            middle,
            cut(ctx, x, axis, start + size, n - start - size),
        ]
        return join(ctx, [p for p in parts if p is not None], axis)
    return window


def cut(ctx: LoweringContext, x: ir.Value, axis: int, start: int, size: int) -> ir.Value | None:
    """``x[start:start+size]`` along ``axis`` (None when empty): parts of a joined value when
    the range falls on their boundaries, else a strided-slice extract."""
    if size == 0:
        return None
    shape = _shape(x)
    if size == shape[axis]:
        return x
    joined = ctx.pieces.get(x)
    if joined is not None and joined[0] == axis:
        picked, offset = [], 0
        for part in joined[1]:
            length = _shape(part)[axis]
            if start <= offset and offset + length <= start + size:
                picked.append(part)
            offset += length
        if sum(_shape(p)[axis] for p in picked) == size:  # the parts inside cover the range
            return join(ctx, picked, axis)
    offsets = [start if a == axis else 0 for a in range(len(shape))]
    sizes = [size if a == axis else d for a, d in enumerate(shape)]
    out = ir.VectorType.get(sizes, ir.VectorType(x.type).element_type)
    return vector.extract_strided_slice(out, x, offsets, sizes, [1] * len(shape))


def join(ctx: LoweringContext, parts: Sequence[ir.Value], axis: int) -> ir.Value:
    """``parts`` concatenated along ``axis``, a joined part's own parts spliced in."""
    flat = []
    for part in parts:
        joined = ctx.pieces.get(part)
        flat.extend(joined[1] if joined is not None and joined[0] == axis else [part])
    if len(flat) == 1:
        return flat[0]
    out = tpu.concatenate(flat, axis)
    ctx.pieces[out] = (axis, tuple(flat))
    return out


def _shape(x: ir.Value) -> list[int]:
    return list(ir.VectorType(x.type).shape)
