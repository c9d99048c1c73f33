"""Mosaic rules for ``reverse`` and ``pad``, as far as upstream Pallas TPU lowers them.

``pad`` is upstream's: per dim, a splat of the padding value ``tpu.concatenate``d before
(``low``) and after (``high``) the block. Upstream has no form for interior padding
(``NotImplementedError``) or for negative amounts (it builds a vector of negative size, which
MLIR rejects), so minipallas rejects both with a fix. Upstream has no ``rev`` rule at all.
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir.core import Op
from minipallas.ir.types import ArrayType
from minipallas.lowering.compat.jaxlib_shim import ir, tpu
from minipallas.lowering.tpu import emit
from minipallas.lowering.tpu.context import LoweringContext, rule, unsupported


@rule("reverse")
def reverse(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    raise unsupported(
        op,
        "reverse (lax.rev, jnp.flip) has no Mosaic TPU lowering (upstream Pallas TPU has no "
        "rule for rev)",
        fix="flip the array outside the kernel, or read the block through a reversed index map",
    )


@rule("pad")
def pad(ctx: LoweringContext, op: Op, x: ir.Value, value: ir.Value) -> Sequence[ir.Value]:
    t: ArrayType = op.operands[0].type
    low, high, interior = op.attrs["low"], op.attrs["high"], op.attrs["interior"]
    if any(interior):
        raise unsupported(
            op,
            f"pad with interior padding {tuple(interior)} has no Mosaic TPU lowering "
            "(upstream: 'Not implemented: interior padding')",
            fix="pad outside the kernel, or write the elements to strided slices of a scratch ref",
        )
    if min((*low, *high), default=0) < 0:
        raise unsupported(
            op,
            f"pad with negative amounts (low {tuple(low)}, high {tuple(high)}) has no Mosaic "
            "TPU lowering (upstream builds a vector of negative size)",
            fix="slice the block (x[a:b]) instead of padding it by a negative amount",
        )
    shape = list(t.shape)
    for axis, (before, after) in enumerate(zip(low, high, strict=True)):
        if before:
            x = tpu.concatenate([_splat(value, shape, axis, before, t.dtype), x], axis)
            shape[axis] += before
        if after:
            x = tpu.concatenate([x, _splat(value, shape, axis, after, t.dtype)], axis)
            shape[axis] += after
    return [x]


def _splat(value: ir.Value, shape: list[int], axis: int, n: int, dtype: str) -> ir.Value:
    """The padding value broadcast to ``shape`` with ``n`` elements along ``axis``."""
    piece = [*shape[:axis], n, *shape[axis + 1 :]]
    return emit.broadcast(value, ArrayType(tuple(piece), dtype))
