"""Indexers: how a state op (or a pure gather/scatter) picks a window out of an array.

An indexer has one entry per dimension of the indexed array, always fully expanded (the front
end turns ``...`` and missing trailing dimensions into full slices):

- ``Int(i)``: one position; the dimension is dropped. ``i`` is a static int or ``Dyn(k)``.
- ``Slice(start, size, stride)``: ``size`` positions ``start, start+stride, ...``; ``start`` may
  be ``Dyn(k)`` (Pallas ``ds(start, size)``). A full slice is ``Slice(0, dim, 1)``.
- ``Array(Dyn(k))``: an integer array of positions (gather / scatter).

``Dyn(k)`` stands for the k-th dynamic index operand of the op, so indexers are static,
hashable attributes and every SSA value an op uses is one of its operands.

The result shape follows numpy (and upstream JAX's ``NDIndexer``): integer and array indexers
broadcast together; their shape goes where the first of them stood when they are adjacent, and
first otherwise. ``window_layout`` is that rule, the one every pass, target and importer uses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.types import ArrayType, Type

T = TypeVar("T")


class IndexError_(Exception):
    """An indexer does not fit its array; callers turn this into a located MiniPallasError."""

    def __init__(self, message: str, fix: str | None = None) -> None:
        super().__init__(message)
        self.fix = fix


@dataclass(frozen=True)
class Dyn:
    """The k-th dynamic index operand of the op that holds the indexer."""

    pos: int


@dataclass(frozen=True)
class Int:
    index: int | Dyn


@dataclass(frozen=True)
class Slice:
    start: int | Dyn
    size: int
    stride: int = 1


@dataclass(frozen=True)
class Array:
    index: Dyn


Entry = Int | Slice | Array
Indexer = tuple[Entry, ...]


def full(shape: Sequence[int]) -> Indexer:
    """The indexer that selects a whole array."""
    return tuple(Slice(0, d, 1) for d in shape)


def along(shape: Sequence[int], axis: int, entry: Entry) -> Indexer:
    """The indexer that selects a whole array but ``entry`` on ``axis`` (an ``Int`` drops it)."""
    return tuple(entry if d == axis else Slice(0, n, 1) for d, n in enumerate(shape))


def dyn_positions(indexer: Indexer) -> list[int]:
    """The ``Dyn`` positions an indexer uses, in order of appearance."""
    found = []
    for entry in indexer:
        ref = entry.index if isinstance(entry, Int | Array) else entry.start
        if isinstance(ref, Dyn):
            found.append(ref.pos)
    return found


def num_dyn(indexer: Indexer) -> int:
    return len(dyn_positions(indexer))


def is_static(indexer: Indexer) -> bool:
    return num_dyn(indexer) == 0


def has_arrays(indexer: Indexer) -> bool:
    return any(isinstance(e, Array) for e in indexer)


def _dyn(entry_ref: Dyn, per_dyn: Sequence[T]) -> T:
    """What ``per_dyn`` (types or shapes of the op's dynamic indices) holds for ``entry_ref``."""
    if not 0 <= entry_ref.pos < len(per_dyn):
        raise IndexError_(
            f"indexer refers to dynamic index {entry_ref.pos}, but the op has {len(per_dyn)}"
        )
    return per_dyn[entry_ref.pos]


def check(indexer: Indexer, shape: Sequence[int], dyn_types: Sequence[Type]) -> None:
    """Rank, static bounds and index types; raises ``IndexError_`` with a plain message."""
    if len(indexer) != len(shape):
        raise IndexError_(f"indexer has {len(indexer)} entries for an array of rank {len(shape)}")
    if sorted(dyn_positions(indexer)) != list(range(len(dyn_types))):
        raise IndexError_(
            f"indexer uses dynamic indices {dyn_positions(indexer)}, "
            f"but the op has {len(dyn_types)}"
        )
    for dim, (entry, extent) in enumerate(zip(indexer, shape, strict=True)):
        if isinstance(entry, Int):
            if isinstance(entry.index, Dyn):
                t = _dyn(entry.index, dyn_types)
                if not (isinstance(t, ArrayType) and t.shape == () and dtypes.is_int(t.dtype)):
                    raise IndexError_(
                        f"dimension {dim}: a dynamic integer index must be an "
                        f"integer scalar, got {t}"
                    )
            elif not 0 <= entry.index < extent:
                raise IndexError_(
                    f"dimension {dim}: index {entry.index} is out of bounds for size {extent}",
                    fix=f"use an index from 0 to {extent - 1}, or a dynamic index operand "
                    "(ds(%i, 1)) for one known only at run time",
                )
        elif isinstance(entry, Slice):
            if entry.size < 0 or entry.stride < 1:
                raise IndexError_(
                    f"dimension {dim}: slice size must be >= 0 and stride >= 1, "
                    f"got size {entry.size}, stride {entry.stride}"
                )
            if isinstance(entry.start, Dyn):
                t = _dyn(entry.start, dyn_types)
                if not (isinstance(t, ArrayType) and t.shape == () and dtypes.is_int(t.dtype)):
                    raise IndexError_(
                        f"dimension {dim}: a dynamic slice start must be an integer scalar, got {t}"
                    )
                if span(entry) > extent:
                    raise IndexError_(
                        f"dimension {dim}: slice of {entry.size} with stride "
                        f"{entry.stride} does not fit in size {extent}"
                    )
            elif entry.start < 0 or entry.start + span(entry) > extent:
                raise IndexError_(
                    f"dimension {dim}: slice {entry.start}+{entry.size}"
                    f"*{entry.stride} is out of bounds for size {extent}",
                    fix=f"make the slice end by {extent}: start + (size - 1) * stride must be "
                    f"below {extent}",
                )
        elif isinstance(entry, Array):
            t = _dyn(entry.index, dyn_types)
            if not (isinstance(t, ArrayType) and dtypes.is_int(t.dtype)):
                raise IndexError_(
                    f"dimension {dim}: an array index must be an integer array, got {t}"
                )
        else:
            raise IndexError_(f"dimension {dim}: {entry!r} is not an indexer entry")


def span(entry: Int | Slice) -> int:
    """How many positions of its dimension an entry reaches, first to last: 1 for an integer,
    ``(size-1)*stride+1`` for a slice (0 when empty). A dynamic start is clamped into
    ``[0, dim - span]`` so the window fits. Upstream's slices (``size``, ``stride``) work too."""
    if isinstance(entry, Int):
        return 1
    return (entry.size - 1) * entry.stride + 1 if entry.size else 0


@dataclass(frozen=True)
class WindowLayout:
    """Where each entry of an indexer lands in the window it selects (numpy's placement rule).

    The integer and integer-array entries broadcast together into one block of dimensions,
    ``block_shape``. When they stand next to each other, the block goes where the first of them
    stood; when a slice separates them, it goes first (there is no single place for it). The
    slices keep their order around it, one window axis each.

    - ``shape``: the window's shape;
    - ``block``: the window axis where the block starts;
    - ``axes[d]``: the window axes entry ``d`` spans: one for a slice, none for an integer, and
      the block's last ``ndim`` for an array of rank ``ndim`` (broadcasting aligns trailing axes).
    """

    shape: tuple[int, ...]
    block: int
    block_shape: tuple[int, ...]
    axes: tuple[tuple[int, ...], ...]


def window_layout(entries: Sequence[int | tuple[int, ...]]) -> WindowLayout:
    """The layout of a window from one item per indexed dimension: a slice's size (an int), or
    the shape of an integer or integer-array index (a tuple; ``()`` for an integer).

    The items, not an ``Indexer``, so that importers can place upstream's entries too. Raises
    ``IndexError_`` when the index shapes do not broadcast.
    """
    indexed = [d for d, e in enumerate(entries) if isinstance(e, tuple)]
    index_shapes = [entries[d] for d in indexed]
    try:
        block_shape = tuple(np.broadcast_shapes(*index_shapes))
    except ValueError:
        raise IndexError_(f"array indices of shapes {index_shapes} do not broadcast") from None
    adjacent = indexed == list(range(indexed[0], indexed[-1] + 1)) if indexed else False
    block = indexed[0] if adjacent else 0  # only slices stand before an adjacent block
    n_block = len(block_shape)
    axes: list[tuple[int, ...]] = []
    n_slices = 0
    for entry in entries:
        if isinstance(entry, tuple):
            axes.append(tuple(range(block + n_block - len(entry), block + n_block)))
        else:
            axes.append((n_slices if n_slices < block else n_slices + n_block,))
            n_slices += 1
    sizes = [e for e in entries if not isinstance(e, tuple)]
    shape = (*sizes[:block], *block_shape, *sizes[block:])
    return WindowLayout(shape, block, block_shape, tuple(axes))


def layout(indexer: Indexer, dyn_shapes: Sequence[tuple[int, ...]]) -> WindowLayout:
    """``window_layout`` of a minipallas indexer; ``dyn_shapes[k]`` is the shape of the value
    ``Dyn(k)`` stands for."""
    return window_layout([_item(e, dyn_shapes) for e in indexer])


def _item(entry: Entry, dyn_shapes: Sequence[tuple[int, ...]]) -> int | tuple[int, ...]:
    if isinstance(entry, Slice):
        return entry.size
    return tuple(_dyn(entry.index, dyn_shapes)) if isinstance(entry, Array) else ()


def result_shape(indexer: Indexer, dyn_types: Sequence[Type]) -> tuple[int, ...]:
    """Shape of the window an indexer selects (numpy's rules for advanced indexing)."""
    return layout(indexer, [t.shape for t in dyn_types]).shape
