"""Upstream ``NDIndexer``s as minipallas indexers, keeping upstream's out-of-range behaviour.

Upstream discharges ``x_ref[idx]`` (``jax/_src/state/discharge.py``) in one of two forms:

- *slice form*: every entry is a stride-1 slice or a scalar integer. Starts are converted to
  int32, a negative start gets the dimension added once (``lax.dynamic_slice``'s wrapper), and
  the window is clamped into the array. minipallas clamps dynamic ``Int`` and ``Slice`` entries
  the same way, so a dynamic start imports with ``select(i < 0, i + dim, i)`` in front of it and
  a literal one is folded: ``x_ref[-1]`` is row ``dim-1``, ``x_ref[9]`` of 4 rows is row 3.
  Static slices (upstream's ``lax.slice``, strided or not) are in bounds and import as they are.
- *gather form*: an integer array, or a strided slice next to a scalar. Every entry becomes an
  index array (a slice becomes ``iota * stride + start``), negative positions get the dimension
  added (numpy indexing), then reads clamp each position and writes drop the out-of-range
  ones. minipallas's gathers clamp and its scatters drop per position too, so an array imports
  as an ``Array`` entry behind the negative-wrap select, a dynamic scalar as a 0-d ``Array``
  (so that a write drops it rather than clamping it), and a slice whose start is dynamic or
  negative turns the whole indexer into position arrays computed as upstream computes them.

A view (``ref.at[...]`` followed by more transforms) must be a minipallas ``ref.at``, which
holds no arrays; its entries import in the slice form (a strided slice with a dynamic start
then clamps its window where upstream would clamp each position: a documented difference).

A stride-0 slice, ``pl.ds(i, n, stride=0)``, is Mosaic's broadcast read (``tpu.strided_load``
with stride 0): position ``i``, ``n`` times. A read imports as a read of ``pl.ds(i, 1)`` then a
broadcast (``broadcast_read``), so every target keeps strides >= 1; a write or a view through
one is refused. Upstream's interpret mode cannot run one (a static start divides by zero in
``lax.slice``; a dynamic one reads ``n`` positions from ``i``): the chip defines it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from minipallas.interop.importer.engine import ImportScope
from minipallas.ir import dtypes, indexing
from minipallas.ir.core import Value
from minipallas.ir.errors import MiniPallasError
from minipallas.ir.indexing import Array, Dyn, Int, Slice, full
from minipallas.ir.types import ArrayType
from minipallas.lowering.compat.jax_private import core as jax_core
from minipallas.lowering.compat.jax_private import state_indexing as jax_indexing


@dataclass
class Window:
    """A minipallas indexer and the dynamic index values its ``Dyn`` entries refer to."""

    indexer: tuple
    dyn: list[Value]

    @staticmethod
    def whole(shape: Sequence[int]) -> Window:
        return Window(full(shape), [])


def static_int(atom: object) -> int | None:
    """The value of a literal (or Python int) index, None for a variable."""
    if isinstance(atom, jax_core.Literal):
        return int(atom.val)
    if isinstance(atom, int | np.integer) and not isinstance(atom, bool):
        return int(atom)
    return None


def wrap_negative(scope: ImportScope, i: Value, dim: int) -> Value:
    """``select(i < 0, i + dim, i)``, elementwise in ``i``'s dtype; unsigned ``i`` unchanged."""
    dtype = i.type.dtype
    if not dtypes.is_signed(dtype) or i in scope.nonnegative:
        return i
    key = ("wrap", i, dim)
    if key not in scope.memo:
        shape = i.type.shape
        negative = scope.emit("lt", [i, scope.constant(0, dtype, shape)])
        shifted = scope.emit("add", [i, scope.constant(dim, dtype, shape)])
        scope.memo[key] = scope.emit("select", [negative, shifted, i])
    return scope.memo[key]


def _int32(scope: ImportScope, v: Value) -> Value:
    return scope.convert(v, "int32")


def _shape(atom: object) -> tuple[int, ...]:
    return tuple(getattr(getattr(atom, "aval", None), "shape", ()))


def _is_scalar(entry: object) -> bool:
    return not isinstance(entry, jax_indexing.Slice) and _shape(entry) == ()


def _check_entry(scope: ImportScope, entry: object) -> None:
    if isinstance(entry, jax_indexing.Slice):
        if not isinstance(entry.size, int) or not isinstance(entry.stride, int):
            raise scope.error("a slice of dynamic size cannot be imported")
        if entry.stride == 0:
            raise scope.error(
                "a stride-0 slice (pl.ds(i, n, stride=0)) is a broadcast read; only a read "
                "(x_ref[...], pltpu.load without a mask) takes one",
                fix="read the one position with pl.ds(i, 1) and broadcast it, or write "
                "through a slice of stride >= 1",
            )
    elif not isinstance(entry, jax_core.Var | jax_core.Literal):
        raise scope.error(f"index {entry!r} is not an integer, array or slice")
    elif not dtypes.is_int(_dtype(scope, entry)):
        raise scope.error(f"index {entry} must be an integer, got dtype {entry.aval.dtype}")


def _dtype(scope: ImportScope, atom: jax_core.Atom) -> str:
    try:
        return dtypes.canonicalize(np.dtype(atom.aval.dtype))
    except (MiniPallasError, TypeError):
        raise scope.error(f"index {atom} has unsupported dtype {atom.aval.dtype}") from None


def _static_in_bounds(entry: jax_indexing.Slice, dim: int) -> int | None:
    """The start of a slice that is static and in bounds, else None."""
    start = static_int(entry.start)
    if start is None or start < 0 or start + indexing.span(entry) > dim:
        return None
    return start


def broadcast_read(transforms: tuple) -> tuple[tuple, tuple[int, ...] | None]:
    """``transforms`` with the stride-0 slices of a final indexer read once (size 1, stride 1),
    and the shape that read broadcasts to (upstream's window shape); None when there are none."""
    last = transforms[-1] if transforms else None
    if not isinstance(last, jax_indexing.NDIndexer) or not any(
        isinstance(e, jax_indexing.Slice) and e.stride == 0 for e in last.indices
    ):
        return transforms, None
    once = tuple(
        jax_indexing.Slice(e.start, 1, 1)
        if isinstance(e, jax_indexing.Slice) and e.stride == 0
        else e
        for e in last.indices
    )
    nd = jax_indexing.NDIndexer(once, last.shape, last.int_indexer_shape)
    return (*transforms[:-1], nd), tuple(last.get_indexer_shape())


def window(
    scope: ImportScope, nd: jax_indexing.NDIndexer, shape: Sequence[int], view: bool = False
) -> Window:
    """The minipallas window of ``nd`` on an array or ref of ``shape`` (see the module doc)."""
    if len(nd.indices) != len(shape):
        raise scope.error(f"indexer has {len(nd.indices)} entries for rank {len(shape)}")
    for entry in nd.indices:
        _check_entry(scope, entry)
    slice_form = all(
        (isinstance(e, jax_indexing.Slice) and e.stride == 1) or _is_scalar(e) for e in nd.indices
    )
    if view or slice_form:
        if view and not all(isinstance(e, jax_indexing.Slice) or _is_scalar(e) for e in nd.indices):
            raise scope.error(
                "a ref view (ref.at[...]) with an integer-array index cannot be imported",
                fix="index with the array in the final read or write instead",
            )
        return _slice_form(scope, nd.indices, shape)
    positions = any(
        isinstance(e, jax_indexing.Slice) and _static_in_bounds(e, d) is None
        for e, d in zip(nd.indices, shape, strict=True)
    )
    if positions:
        return _positions(scope, nd.indices, shape)
    return _gather_form(scope, nd.indices, shape)


def _slice_form(scope: ImportScope, entries: Sequence[object], shape: Sequence[int]) -> Window:
    indexer, dyn = [], []
    for entry, dim in zip(entries, shape, strict=True):
        if isinstance(entry, jax_indexing.Slice):
            span = indexing.span(entry)
            start = _static_in_bounds(entry, dim)
            if start is None:
                start = static_int(entry.start)
                if start is not None:  # a literal start out of bounds: fold the wrap and clamp
                    start = min(max(start + dim if start < 0 else start, 0), dim - span)
                else:
                    dyn.append(wrap_negative(scope, _int32(scope, scope.read(entry.start)), dim))
                    start = Dyn(len(dyn) - 1)
            indexer.append(Slice(start, entry.size, entry.stride))
        else:
            i = static_int(entry)
            if i is not None:
                indexer.append(Int(min(max(i + dim if i < 0 else i, 0), dim - 1)))
            else:
                dyn.append(wrap_negative(scope, _int32(scope, scope.read(entry)), dim))
                indexer.append(Int(Dyn(len(dyn) - 1)))
    return Window(tuple(indexer), dyn)


def _gather_form(scope: ImportScope, entries: Sequence[object], shape: Sequence[int]) -> Window:
    """Static in-bounds slices stay slices; integers and arrays become wrapped ``Array``s.

    A literal scalar stays a static ``Int`` (upstream's discharge rejects one here)."""
    indexer, dyn = [], []
    for entry, dim in zip(entries, shape, strict=True):
        if isinstance(entry, jax_indexing.Slice):
            indexer.append(Slice(static_int(entry.start), entry.size, entry.stride))
            continue
        i = static_int(entry)
        if i is not None:
            indexer.append(Int(min(max(i + dim if i < 0 else i, 0), dim - 1)))
        else:
            dyn.append(wrap_negative(scope, scope.read(entry), dim))
            indexer.append(Array(Dyn(len(dyn) - 1)))
    return Window(tuple(indexer), dyn)


def _positions(scope: ImportScope, entries: Sequence[object], shape: Sequence[int]) -> Window:
    """Every entry as an int position array of the window's shape, as upstream's gather form
    computes them (``iota * stride + start`` for slices), with negative positions wrapped."""
    layout = indexing.window_layout(
        [e.size if isinstance(e, jax_indexing.Slice) else _shape(e) for e in entries]
    )
    win = layout.shape
    dyn: list[Value] = []
    for entry, dim, axes in zip(entries, shape, layout.axes, strict=True):
        if isinstance(entry, jax_indexing.Slice):
            lane = scope.emit("iota", [], type=ArrayType(win, "int32"), dimension=axes[0])
            if entry.stride != 1:
                lane = scope.emit("mul", [lane, scope.constant(entry.stride, "int32", win)])
            start = static_int(entry.start)
            if start is None:
                begin = scope.broadcast(_int32(scope, scope.read(entry.start)), win)
            else:
                begin = scope.constant(start, "int32", win)
            dyn.append(wrap_negative(scope, scope.emit("add", [lane, begin]), dim))
        else:
            index = wrap_negative(scope, scope.read(entry), dim)
            if index.type.shape != win:
                index = scope.emit("broadcast_in_dim", [index], shape=win, dims=axes)
            dyn.append(index)
    return Window(tuple(Array(Dyn(k)) for k in range(len(dyn))), dyn)
