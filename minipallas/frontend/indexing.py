"""Python indices to IR indexers: what ``ref[...]``, ``ref.at[...]`` and ``x[...]`` mean.

An index is one item or a tuple of items, one per dimension; ``...`` stands for as many full
slices as needed and missing trailing dimensions are full slices. Each item becomes one entry
of an ``ir.indexing`` indexer:

- a Python int (negative ones count from the end, as in Python): ``Int(i)``, bounds-checked;
- a static slice ``a:b:c`` (``None`` bounds allowed, positive steps): ``Slice(start, size, c)``;
- ``ds(start, size, stride)``: ``Slice`` whose start may be traced (``Dyn``);
- a traced integer scalar: ``Int(Dyn(k))``; a traced integer array or a numpy integer array:
  ``Array(Dyn(k))`` (gather/scatter).

Dynamic items become the op's index operands, ``Dyn(k)`` being the k-th. A negative traced
index counts once from the end, as in JAX (``lax.dynamic_slice``'s start, ``x[i]``, each entry
of an index array): ``Index.extents`` gives the dimension each operand wraps against, and the
caller emits the wrap as ops (``values.index_operands``), so the IR's own rule (dynamic indices
clamp, see ``minipallas.ir.indexing``) applies to the wrapped value. A ``ds`` with a stride wraps
its start; upstream wraps each position of such a window, which differs only when the window
crosses zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from minipallas.frontend.foreign import is_jax_tracer, jax_tracer_error
from minipallas.frontend.scopes import Tracer, trace_error
from minipallas.ir import dtypes, indexing
from minipallas.ir.indexing import Array, Dyn, Entry, Int, Slice

_INTS = (int, np.integer)


@dataclass(frozen=True)
class DSlice:
    """``ds(start, size, stride)``: ``size`` positions from a static or traced ``start``."""

    start: Any  # int or a traced integer scalar
    size: int
    stride: int = 1


@dataclass
class Index:
    """A normalized index: the indexer, its dynamic operands, and where ``None`` adds axes.

    ``dynamic`` holds tracers and numpy integer arrays (the caller makes constants of those);
    ``extents[k]`` is the size of the dimension a negative ``dynamic[k]`` counts back from, or
    None where nothing wraps (numpy arrays are wrapped here already).
    """

    indexer: tuple[Entry, ...] = ()
    dynamic: list[Any] = field(default_factory=list)
    extents: list[int | None] = field(default_factory=list)
    new_axes: list[int] = field(default_factory=list)


def normalize(
    idx: Any, shape: tuple[int, ...], *, arrays: bool = True, newaxis: bool = False
) -> Index:
    """Turns a Python index into an ``Index`` for an array or ref of ``shape``.

    ``arrays``: integer-array indices are allowed (not in views); ``newaxis``: ``None`` items
    are allowed (array indexing only) and recorded as new axes of the result.
    """
    items = list(idx) if isinstance(idx, tuple) else [idx]
    ellipsis = [i for i, item in enumerate(items) if item is Ellipsis]  # `is`: tracers overload ==
    if len(ellipsis) > 1:
        raise trace_error("an index can only have a single ellipsis ('...')")
    used = sum(item is not None and item is not Ellipsis for item in items)
    if used > len(shape):
        raise trace_error(
            f"too many indices: {used} for a value of rank {len(shape)} (shape {shape})",
            fix=f"give at most {len(shape)} indices",
        )
    fill = [slice(None)] * (len(shape) - used)
    if ellipsis:
        items[ellipsis[0] : ellipsis[0] + 1] = fill
    else:
        items += fill
    out = Index()
    entries: list[Entry] = []
    dim = 0
    for item in items:
        if item is None:
            if not newaxis:
                raise trace_error(
                    "'None' (new axis) cannot index a ref",
                    fix="read the ref, then reshape the value",
                )
            out.new_axes.append(sum(isinstance(e, Slice) for e in entries) + len(out.new_axes))
            continue
        entries.append(_entry(item, dim, shape[dim], out, arrays))
        dim += 1
    if out.new_axes and any(isinstance(e, Array) for e in entries):
        raise trace_error(
            "'None' (new axis) cannot be mixed with integer-array indices",
            fix="index first, then reshape the result",
        )
    out.indexer = tuple(entries)
    return out


def _entry(item: Any, dim: int, extent: int, out: Index, arrays: bool) -> Entry:
    where = f"dimension {dim} (size {extent})"
    if isinstance(item, np.ndarray) and item.ndim == 0:
        item = item[()]  # a numpy scalar
    if isinstance(item, bool | np.bool_):
        raise trace_error(
            f"{where}: a bool is not an index", fix="use an int, a slice or minipallas.ds"
        )
    if isinstance(item, _INTS):
        i = int(item) + extent if item < 0 else int(item)
        if not 0 <= i < extent:
            raise trace_error(
                f"{where}: index {int(item)} is out of bounds",
                fix=f"use an index from {-extent} to {extent - 1} (negative ones count from "
                "the end); an index known only at run time may be a traced int",
            )
        return Int(i)
    if isinstance(item, slice):
        return _slice(item, where, extent)
    if isinstance(item, DSlice):
        span = indexing.span(item)
        if span > extent:
            raise trace_error(
                f"{where}: ds of size {item.size} and stride {item.stride} "
                f"spans {span} positions and does not fit"
            )
        if isinstance(item.start, Tracer):
            return Slice(_dynamic(item.start, out, extent), item.size, item.stride)
        if not 0 <= item.start <= extent - span:
            raise trace_error(
                f"{where}: ds({item.start}, {item.size}, {item.stride}) is out of bounds",
                fix=f"start at most {extent - span}, or take fewer elements (size)",
            )
        return Slice(int(item.start), item.size, item.stride)
    if isinstance(item, Tracer):
        _check_index_type(item, where)
        if item.ndim == 0:
            return Int(_dynamic(item, out, extent))
        if not arrays:
            raise trace_error(
                f"{where}: a view cannot use an integer-array index",
                fix="index the ref directly (ref[idx]) for a gather or scatter",
            )
        return Array(_dynamic(item, out, extent))
    if isinstance(item, np.ndarray | list):
        return _numpy_index(np.asarray(item), where, extent, out, arrays)
    if is_jax_tracer(item):
        raise jax_tracer_error(item)
    raise trace_error(
        f"{where}: cannot index with {type(item).__name__} {item!r}",
        fix="use ints, slices, '...', minipallas.ds or integer arrays",
    )


def _slice(item: slice, where: str, extent: int) -> Slice:
    parts = (item.start, item.stop, item.step)
    if any(isinstance(p, Tracer) for p in parts):
        raise trace_error(
            f"{where}: slice bounds must be static Python ints",
            fix="use minipallas.ds(start, size) for a slice with a traced start",
        )
    if not all(p is None or isinstance(p, _INTS) for p in parts):
        raise trace_error(f"{where}: slice bounds must be ints or None, got {item}")
    if item.step is not None and item.step <= 0:
        raise trace_error(
            f"{where}: slice step must be positive, got {item.step}",
            fix="read the window with a positive step, then reverse the value",
        )
    positions = range(*item.indices(extent))
    return Slice(positions.start if positions else 0, len(positions), positions.step)


def _check_index_type(item: Tracer, where: str) -> None:
    if item.kind == "ref":
        raise trace_error(f"{where}: a ref cannot be an index", fix="read it first: idx_ref[...]")
    if item.type.dtype == "bool":
        raise trace_error(
            f"{where}: boolean masks are not indices",
            fix="use minipallas.load/store with mask=, or numpy.where",
        )
    if not dtypes.is_int(item.type.dtype):
        raise trace_error(
            f"{where}: an index must be an integer, got {item.type}",
            fix="convert it with .astype(minipallas.numpy.int32)",
        )


def _numpy_index(array: np.ndarray, where: str, extent: int, out: Index, arrays: bool) -> Entry:
    if array.dtype.kind not in "iu":
        raise trace_error(
            f"{where}: an index array must hold integers, got {array.dtype}",
            fix="use minipallas.load/store with mask= for boolean masks",
        )
    if not arrays:
        raise trace_error(
            f"{where}: a view cannot use an integer-array index",
            fix="index the ref directly (ref[idx]) for a gather or scatter",
        )
    array = np.where(array < 0, array + extent, array)
    if array.size and not (0 <= array.min() and array.max() < extent):
        raise trace_error(f"{where}: index array holds out-of-bounds positions")
    return Array(_dynamic(array.astype(np.int32), out))


def _dynamic(item: Any, out: Index, extent: int | None = None) -> Dyn:
    out.dynamic.append(item)
    out.extents.append(extent)
    return Dyn(len(out.dynamic) - 1)
