"""Windows: where an indexer lands in an array at run time, and reading and writing there.

``locate`` resolves an indexer (``ir.indexing``) against an array shape and the op's dynamic
index values, applying upstream's out-of-range rules, or, with ``checks``, reporting them:

- a dynamic ``Int`` is clamped into ``[0, dim-1]``;
- a dynamic slice start is clamped into ``[0, dim-span]``, ``span = (size-1)*stride+1``
  (``lax.dynamic_slice``), so the window always fits;
- integer-array indices are clamped for reads (gather) and their out-of-range positions are
  dropped by writes (scatter): ``Access.valid`` marks the positions that were in range.

Without integer arrays a window is numpy basic indexing (a view). With them, the window is
built as explicit index arrays, one per dimension, all broadcast to the window's shape, so
numpy's own advanced-indexing placement rules never come into play: the window's layout is
``ir.indexing.window_layout`` by construction (integer and array indices broadcast together;
their dimensions go where the first of them stands if they are adjacent, first otherwise).

Writes through index arrays with duplicate positions keep the last one in row-major order of
the window; accumulation adds every duplicate, one after another in row-major order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from minipallas.ir import indexing
from minipallas.ir.core import Op
from minipallas.ir.indexing import Array, Dyn, Int, Slice
from minipallas.ir.interpret.engine import Interpreter, Ref

_CLAMP_NOTE = "without checks=True it is clamped into range, as lax.dynamic_slice does"


class Access:
    """A located window: a numpy ``index`` into the array, and how to use it.

    ``basic``: ``index`` is ints and slices (numpy basic indexing, a view). Otherwise ``index``
    is a tuple of integer arrays of the window's shape, and ``valid`` (None when all are) marks
    the positions whose array indices were in range; writes skip the others. ``joined``: the
    window is of a widening bitcast view (``Ref.joined``): ``index`` has a last dim more, the
    pieces each element of that dtype joins.
    """

    __slots__ = ("index", "basic", "valid", "joined")

    def __init__(
        self,
        index: tuple,
        basic: bool,
        valid: np.ndarray | None = None,
        joined: np.dtype | None = None,
    ) -> None:
        self.index = index
        self.basic = basic
        self.valid = valid
        self.joined = joined


def _dyn_int(interp: Interpreter, op: Op, value: Any, dim: int, size: int) -> int:
    i = int(value)
    if size == 0:
        raise interp.error(op, f"dimension {dim}: cannot take an index of a size-0 dimension")
    if not 0 <= i < size:
        if interp.checks:
            raise interp.error(
                op,
                f"dimension {dim}: index {i} is out of range for size {size}",
                fix=f"{_CLAMP_NOTE} ([0, {size - 1}])",
            )
        i = min(max(i, 0), size - 1)
    return i


def _dyn_start(interp: Interpreter, op: Op, value: Any, dim: int, size: int, span: int) -> int:
    start, last = int(value), size - span
    if not 0 <= start <= last:
        if interp.checks:
            raise interp.error(
                op,
                f"dimension {dim}: slice start {start} with span {span} is out of range for "
                f"size {size} (valid starts: 0..{last})",
                fix=f"{_CLAMP_NOTE} ([0, {last}])",
            )
        start = min(max(start, 0), last)
    return start


def _index_array(interp: Interpreter, op: Op, value: Any, dim: int, size: int) -> tuple:
    """Clamped int64 positions along ``dim`` and the mask of those that were in range."""
    raw = np.asarray(value).astype(np.int64)
    in_range = (raw >= 0) & (raw < size)
    if not in_range.all():
        bad = int(raw[~in_range].flat[0])
        if interp.checks:
            raise interp.error(
                op,
                f"dimension {dim}: array index {bad} is out of range for size {size}",
                fix="without checks=True reads clamp it into range and writes drop it",
            )
        if size == 0:
            raise interp.error(op, f"dimension {dim}: cannot gather from a size-0 dimension")
    return np.clip(raw, 0, max(size - 1, 0)), in_range


def locate(
    interp: Interpreter, op: Op, indexer: tuple, shape: Sequence[int], dyn: Sequence[Any]
) -> Access:
    """Resolve ``indexer`` on an array of ``shape``; ``dyn[k]`` is the value of ``Dyn(k)``."""
    resolved: list[Any] = []
    arrays = False
    for dim, (entry, size) in enumerate(zip(indexer, shape, strict=True)):
        kind = type(entry)
        if kind is Int:
            i = entry.index
            resolved.append(_dyn_int(interp, op, dyn[i.pos], dim, size) if type(i) is Dyn else i)
        elif kind is Slice:
            span = indexing.span(entry)
            start = entry.start
            if type(start) is Dyn:
                start = _dyn_start(interp, op, dyn[start.pos], dim, size, span)
            resolved.append(slice(start, start + span, entry.stride))
        else:
            resolved.append(_index_array(interp, op, dyn[entry.index.pos], dim, size))
            arrays = True
    if not arrays:
        return Access(tuple(resolved), True)
    return _advanced(indexer, resolved)


def _advanced(indexer: tuple, resolved: list[Any]) -> Access:
    """Explicit index arrays for a window with integer-array indices (see module docstring)."""
    layout = indexing.window_layout(
        [
            e.size if isinstance(e, Slice) else np.shape(r[0]) if isinstance(e, Array) else ()
            for e, r in zip(indexer, resolved, strict=True)
        ]
    )
    rank = len(layout.shape)

    def placed(array: Any, axes: tuple[int, ...]) -> np.ndarray:
        """``array`` with its dimensions on the window ``axes``, 1s elsewhere."""
        shape = [1] * rank
        for axis, n in zip(axes, np.shape(array), strict=True):
            shape[axis] = n
        return np.reshape(array, shape)

    index: list[np.ndarray] = []
    valid = np.ones((), np.bool_)
    for entry, r, axes in zip(indexer, resolved, layout.axes, strict=True):
        if isinstance(entry, Slice):
            index.append(placed(np.arange(r.start, r.stop, r.step, dtype=np.int64), axes))
        elif isinstance(entry, Array):
            positions, in_range = r
            index.append(placed(positions, axes))
            valid = valid & placed(in_range, axes)
        else:
            index.append(placed(np.int64(r), axes))
    full = np.broadcast_arrays(*index)
    shape = full[0].shape if full else ()
    all_valid = bool(valid.all())
    return Access(tuple(full), False, None if all_valid else np.broadcast_to(valid, shape))


def through(ref: Ref, access: Access) -> Access:
    """An access to ``ref.data`` for a window located in ``ref``'s own (view) coordinates."""
    if ref.positions is None:
        return access
    index = access.index if not access.basic else access.index + (Ellipsis,)
    flat = np.asarray(ref.positions[index])
    valid = access.valid
    if ref.joined is not None and valid is not None:
        valid = np.broadcast_to(valid[..., None], flat.shape)
    return Access(np.unravel_index(flat, ref.data.shape), False, valid, ref.joined)


def read(array: np.ndarray, access: Access) -> Any:
    """A copy of the window's contents (reads never see later writes)."""
    out = array[access.index]
    if access.joined is not None:
        return np.ascontiguousarray(out).view(access.joined).reshape(out.shape[:-1])
    return out.copy() if access.basic else out


def _split(array: np.ndarray, access: Access, values: Any, mask: Any) -> tuple[Any, Any]:
    """For a widening view's window: ``values`` as their pieces in ``array``'s dtype (a bool
    shadow's flag repeated), and ``mask`` for each piece."""
    shape = access.index[0].shape
    if array.dtype == np.bool_:
        values = np.expand_dims(values, -1) if np.ndim(values) else values
    else:
        wide = np.ascontiguousarray(np.broadcast_to(values, shape[:-1]), access.joined)
        values = wide.view(array.dtype).reshape(shape)
    return values, None if mask is None else np.expand_dims(mask, -1)


def _selected(access: Access, values: Any, mask: Any) -> tuple[tuple, np.ndarray]:
    """The window positions a write really touches, and the values that go there."""
    shape = access.index[0].shape
    keep = access.valid
    if mask is not None:
        keep = np.broadcast_to(mask, shape) if keep is None else keep & mask
    values = np.broadcast_to(values, shape)
    if keep is None:
        return tuple(i.ravel() for i in access.index), values.ravel()
    return tuple(i[keep] for i in access.index), values[keep]


def write(array: np.ndarray, access: Access, values: Any, mask: Any = None) -> None:
    """Store ``values`` into the window where ``mask`` (if any) is true; last duplicate wins."""
    if access.joined is not None:
        values, mask = _split(array, access, values, mask)
    if access.basic:
        if mask is None:
            array[access.index] = values
        else:
            np.copyto(array[access.index + (Ellipsis,)], values, where=mask)
        return
    index, values = _selected(access, values, mask)
    flat = np.ravel_multi_index(index, array.shape)
    _, first_from_end = np.unique(flat[::-1], return_index=True)
    last = len(flat) - 1 - first_from_end
    array[tuple(i[last] for i in index)] = values[last]


def accumulate(
    array: np.ndarray, access: Access, values: Any, add: Callable[[Any, Any], Any]
) -> None:
    """``window = add(window, values)`` in place. Positions that occur several times in an
    index-array window take each of their updates in turn, in row-major order."""
    if access.joined is not None:  # a widening view's elements: read, add, write back
        write(array, access, add(read(array, access), values))
        return
    if access.basic:
        view = array[access.index + (Ellipsis,)]
        view[...] = add(view, values)
        return
    index, values = _selected(access, values, None)
    flat = np.ravel_multi_index(index, array.shape)
    order = np.argsort(flat, kind="stable")
    firsts = np.flatnonzero(np.r_[True, flat[order][1:] != flat[order][:-1]])
    repeat = np.empty(len(flat), np.int64)  # how many earlier updates hit the same position
    repeat[order] = np.arange(len(flat)) - np.repeat(firsts, np.diff(np.r_[firsts, len(flat)]))
    for k in range(int(repeat.max(initial=-1)) + 1):
        now = tuple(i[repeat == k] for i in index)
        array[now] = add(array[now], values[repeat == k])


def unwritten(ref: Ref, access: Access, mask: Any = None) -> tuple[int, ...] | None:
    """The first window position (row-major) read but never written, or None."""
    seen = np.asarray(ref.written[access.index])
    if access.joined is not None:  # an element is written when all its pieces are
        seen = seen.all(-1)
    if mask is not None:
        seen = seen | ~np.asarray(mask)
    if seen.all():
        return None
    return tuple(int(i) for i in np.argwhere(~seen)[0])
