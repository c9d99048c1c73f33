"""The windows of a batched grid: each operand's padded buffer viewed as ``(blocks, block)``
pairs per dimension, and the window of it that holds the blocks of all batched grid points
(step 3 of ``vectorized_grid``'s explanation). ``Operand`` and ``Plan`` say which grid axes
are batched and where each lands in an operand; the rest reads and writes those windows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from minipallas.frontend.control import call
from minipallas.frontend.values import (
    TracedArray,
    broadcast_to,
    constant,
    emit_array,
    wrap_negative,
)
from minipallas.ir.dtypes import fill_value
from minipallas.ir.indexing import Dyn, Int, Slice
from minipallas.ir.kernel_spec import TracedBlockSpec
from minipallas.kernels.programs.grid import padded_shape, surely_nonnegative
from minipallas.passes.batching import Layout


@dataclass(frozen=True)
class Operand:
    """One operand: per array dimension, the grid axis whose index is its block index when
    that axis is batched (else None: the index map computes it at each sequential point), and
    whether any block index it computes depends on a sequential axis (else its window is the
    same at every sequential point)."""

    spec: TracedBlockSpec
    axis_of_dim: tuple[int | None, ...]
    moves: bool = False

    @property
    def pairs(self) -> tuple[int, ...]:
        """The padded buffer's shape as (blocks, block) per dimension (block 1 if squeezed)."""
        blocks = [1 if b is None else b for b in self.spec.block_shape]
        counts = [p // b for p, b in zip(padded_shape(self.spec), blocks, strict=True)]
        return tuple(d for pair in zip(counts, blocks, strict=True) for d in pair)


@dataclass(frozen=True)
class Plan:
    batched: tuple[int, ...]  # the batched grid axes, in grid order
    operands: tuple[Operand, ...]  # inputs, then outputs

    def sizes(self, grid: Sequence[int]) -> tuple[int, ...]:
        return tuple(grid[a] for a in self.batched)


def paired(x: TracedArray, operand: Operand) -> TracedArray:
    """The array padded to whole blocks, viewed as ``(blocks, block)`` per dimension."""
    padded = padded_shape(operand.spec)
    if padded != x.shape:
        everywhere = tuple(Slice(0, n, 1) for n in x.shape)
        x = emit_array(
            "dynamic_update_slice", [filled(padded, x.type.dtype), x], indexer=everywhere
        )
    return x.reshape(*operand.pairs)


def unpaired(buffer: TracedArray, operand: Operand) -> TracedArray:
    spec = operand.spec
    padded = buffer.reshape(*padded_shape(spec))
    if padded.shape == spec.array.shape:
        return padded
    return emit_array("slice", [padded], indexer=tuple(Slice(0, n, 1) for n in spec.array.shape))


def filled(shape: Sequence[int], dtype: str) -> TracedArray:
    return broadcast_to(constant(fill_value(dtype), dtype), tuple(shape))


def window_layout(operand: Operand, plan: Plan) -> Layout:
    """The layout the window of the batched points' blocks has: the batched block-count
    dimensions (as batch axes) and the block's own dimensions, in memory order."""
    layout: list[int | None] = []
    for axis, b in zip(operand.axis_of_dim, operand.spec.block_shape, strict=True):
        if axis is not None:
            layout.append(plan.batched.index(axis))
        if b is not None:
            layout.append(None)
    return tuple(layout)


def window_indexer(
    operand: Operand,
    grid: Sequence[int],
    point: Sequence[TracedArray],
    spans: Mapping[int, tuple[int, int]] | None = None,
) -> tuple[tuple, list[TracedArray]]:
    """The indexer of the batched points' blocks in the ``(blocks, block)`` view, and its
    dynamic indices: a batched count is sliced whole up to the grid size (or over the
    ``(start, size)`` that ``spans`` gives its axis); any other count takes the block index
    the map gives at ``point``; a squeezed block dimension is dropped."""
    spec = operand.spec
    indices: tuple = (None,) * len(spec.block_shape)  # the map is called only when needed:
    counts = operand.pairs[0::2]  # for a dimension neither batched nor a single block
    if any(a is None and n != 1 for a, n in zip(operand.axis_of_dim, counts, strict=True)):
        out = call(spec.index_map, *point)
        indices = () if out is None else out if isinstance(out, tuple) else (out,)
    entries: list = []
    dyn: list[TracedArray] = []
    for axis, i, sure, count, b in zip(
        operand.axis_of_dim,
        indices,
        surely_nonnegative(spec.index_map),
        operand.pairs[0::2],
        spec.block_shape,
        strict=True,
    ):
        if axis is not None:
            start, size = (spans or {}).get(axis, (0, grid[axis]))
            entries.append(Slice(start, size, 1))
        elif count == 1:  # every index clamps to the one block
            entries.append(Int(0))
        else:
            entries.append(Int(Dyn(len(dyn))))
            dyn.append(i if sure else wrap_negative(i, count))
        entries.append(Int(0) if b is None else Slice(0, b, 1))
    return tuple(entries), dyn


def _covers(indexer: tuple, shape: Sequence[int]) -> bool:
    """Whether the window is the whole buffer (dropping only dimensions of size 1)."""
    return all(
        isinstance(e, Int) and n == 1 or isinstance(e, Slice) and e.size == n
        for e, n in zip(indexer, shape, strict=True)
    )


def read_window(
    buffer: TracedArray,
    operand: Operand,
    grid: Sequence[int],
    point: Sequence[TracedArray],
    spans: Mapping[int, tuple[int, int]] | None = None,
) -> TracedArray:
    indexer, dyn = window_indexer(operand, grid, point, spans)
    if _covers(indexer, buffer.shape):
        window = [e.size for e in indexer if isinstance(e, Slice)]
        return buffer.reshape(*window)
    return emit_array("dynamic_slice" if dyn else "slice", [buffer, *dyn], indexer=indexer)


def write_window(
    buffer: TracedArray,
    blocks: TracedArray,
    operand: Operand,
    grid: Sequence[int],
    point: Sequence[TracedArray],
) -> TracedArray:
    """``buffer`` with the window ``read_window`` reads replaced by ``blocks``."""
    indexer, dyn = window_indexer(operand, grid, point)
    if _covers(indexer, buffer.shape):
        return blocks.reshape(*buffer.shape)
    return emit_array("dynamic_update_slice", [buffer, *dyn, blocks], indexer=indexer)
