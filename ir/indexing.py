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
first otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.types import ArrayType, Type


class IndexError_(Exception):
    """An indexer does not fit its array; callers turn this into a located MiniPallasError."""


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


def _dyn_type(entry_ref: Dyn, dyn_types: Sequence[Type]) -> Type:
    if not 0 <= entry_ref.pos < len(dyn_types):
        raise IndexError_(
            f"indexer refers to dynamic index {entry_ref.pos}, but the op has {len(dyn_types)}"
        )
    return dyn_types[entry_ref.pos]


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
                t = _dyn_type(entry.index, dyn_types)
                if not (isinstance(t, ArrayType) and t.shape == () and dtypes.is_int(t.dtype)):
                    raise IndexError_(
                        f"dimension {dim}: a dynamic integer index must be an "
                        f"integer scalar, got {t}"
                    )
            elif not 0 <= entry.index < extent:
                raise IndexError_(
                    f"dimension {dim}: index {entry.index} is out of bounds for size {extent}"
                )
        elif isinstance(entry, Slice):
            if entry.size < 0 or entry.stride < 1:
                raise IndexError_(
                    f"dimension {dim}: slice size must be >= 0 and stride >= 1, "
                    f"got size {entry.size}, stride {entry.stride}"
                )
            span = (entry.size - 1) * entry.stride + 1 if entry.size else 0
            if isinstance(entry.start, Dyn):
                t = _dyn_type(entry.start, dyn_types)
                if not (isinstance(t, ArrayType) and t.shape == () and dtypes.is_int(t.dtype)):
                    raise IndexError_(
                        f"dimension {dim}: a dynamic slice start must be an integer scalar, got {t}"
                    )
                if span > extent:
                    raise IndexError_(
                        f"dimension {dim}: slice of {entry.size} with stride "
                        f"{entry.stride} does not fit in size {extent}"
                    )
            elif entry.start < 0 or entry.start + span > extent:
                raise IndexError_(
                    f"dimension {dim}: slice {entry.start}+{entry.size}"
                    f"*{entry.stride} is out of bounds for size {extent}"
                )
        elif isinstance(entry, Array):
            t = _dyn_type(entry.index, dyn_types)
            if not (isinstance(t, ArrayType) and dtypes.is_int(t.dtype)):
                raise IndexError_(
                    f"dimension {dim}: an array index must be an integer array, got {t}"
                )
        else:
            raise IndexError_(f"dimension {dim}: {entry!r} is not an indexer entry")


def result_shape(indexer: Indexer, dyn_types: Sequence[Type]) -> tuple[int, ...]:
    """Shape of the window an indexer selects (numpy's rules for advanced indexing)."""
    int_positions = [i for i, e in enumerate(indexer) if isinstance(e, Int | Array)]
    int_shapes = [
        _dyn_type(e.index, dyn_types).shape if isinstance(e, Array) else ()
        for e in indexer
        if isinstance(e, Int | Array)
    ]
    try:
        int_shape = np.broadcast_shapes(*int_shapes) if int_shapes else ()
    except ValueError:
        raise IndexError_(f"array indices of shapes {int_shapes} do not broadcast") from None
    slice_shape = [e.size for e in indexer if isinstance(e, Slice)]
    if not int_positions:
        return tuple(slice_shape)
    contiguous = int_positions == list(range(int_positions[0], int_positions[-1] + 1))
    if not contiguous:
        return tuple(int_shape) + tuple(slice_shape)
    first = int_positions[0]
    return tuple(slice_shape[:first]) + tuple(int_shape) + tuple(slice_shape[first:])
