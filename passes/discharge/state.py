"""State ops on discharged refs become pure windowed reads and writes.

Each rule keeps the op's ``indexer`` attribute and dynamic index operands as they are, and picks
the pure op that holds that indexer kind (``read_op_for`` / ``write_op_for``):

- ``get``: read the window (``slice`` / ``dynamic_slice`` / ``gather``);
- ``swap``: read the old window, then write the new one (``dynamic_update_slice`` / ``scatter``);
- ``addupdate``: read, ``add``, write back; with an integer-array index a single ``scatter_add``,
  which adds every update, duplicate positions included;
- ``load``: read, then with a mask ``select(mask, window, fill)``. ``fill`` is ``other``
  (broadcast when it is a scalar) or, without ``other``, the uninitialized fill value (NaN, the
  integer minimum, False) broadcast to the window: the value the reference interpreter gives
  masked-off lanes, so both agree bit for bit. (Upstream Pallas returns the window's current
  contents there; both are "unspecified" lanes.)
- ``store``: write; with a mask ``select(mask, new, old)`` over the old window first. With an
  integer-array index a position may repeat, and a masked-off lane must not overwrite what a
  masked-on lane wrote there; so such a store becomes one ``scatter`` whose every dimension is
  an index array over the window, with masked-off lanes sent out of range (and so dropped).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from minipallas.ir import dtypes, indexing
from minipallas.ir.core import Op, Value
from minipallas.ir.indexing import Array as ArrayIndex
from minipallas.ir.indexing import Dyn, Int, Slice
from minipallas.ir.literal import Literal
from minipallas.ir.location import Location
from minipallas.ir.types import ArrayType
from minipallas.passes.discharge.engine import DischargeScope, rule
from minipallas.passes.discharge.views import Access
from minipallas.passes.indexer_facts import IndexerFacts, facts


def split(
    scope: DischargeScope, op: Op
) -> tuple[Access, IndexerFacts, Sequence[Value], Sequence[Value]]:
    """The access to the op's ref, its indexer's facts, new dynamic indices and new value
    operands (those after the indices)."""
    operands = op.operands
    known = facts(op.attrs["indexer"])
    access = Access(scope, scope.handles[operands[0]], op.loc)
    if len(operands) == 1:  # a read through a static window
        return access, known, (), ()
    try:
        news = (None, *map(scope.env.__getitem__, operands[1:]))  # lined up with the operands
    except KeyError:  # a discharged ref or an undefined value: ``value`` raises the error
        news = (None, *(scope.value(v) for v in operands[1:]))
    indices = op.slices()["indices"]
    return access, known, news[indices], news[indices.stop :]


def _broadcast(scope: DischargeScope, x: Value, shape: tuple[int, ...], loc: Location) -> Value:
    if x.type.shape == shape:
        return x
    return scope.emit("broadcast_in_dim", [x], loc, shape=shape, dims=())


def _fill(scope: DischargeScope, window: ArrayType, loc: Location) -> Value:
    """The uninitialized fill value of ``window``'s dtype, as an array of its shape."""
    scalar = scope.emit(
        "constant", [], loc, value=Literal.of(dtypes.fill_value(window.dtype), window.dtype)
    )
    return _broadcast(scope, scalar, window.shape, loc)


@rule("get")
def _get(scope: DischargeScope, op: Op) -> Sequence[Value]:
    access, known, dyn, _ = split(scope, op)
    return [access.read(known, dyn, op.results[0].type)]


@rule("swap")
def _swap(scope: DischargeScope, op: Op) -> Sequence[Value]:
    access, known, dyn, (new,) = split(scope, op)
    old = access.read(known, dyn, new.type)
    access.write_window(known, dyn, new)
    return [old]


@rule("addupdate")
def _addupdate(scope: DischargeScope, op: Op) -> Sequence[Value]:
    access, known, dyn, (delta,) = split(scope, op)
    if known.arrays:
        access.write_window(known, dyn, delta, accumulate=True)
    else:
        old = access.read(known, dyn, delta.type)
        total = scope.emit_typed("add", [old, delta], delta.type, op.loc)
        access.write_window(known, dyn, total)
    return []


@rule("load")
def _load(scope: DischargeScope, op: Op) -> Sequence[Value]:
    access, known, dyn, rest = split(scope, op)
    window = access.read(known, dyn, op.result.type)
    if not op.attrs.get("masked"):
        return [window]
    mask = rest[0]
    if op.attrs.get("has_other"):
        fill = _broadcast(scope, rest[1], window.type.shape, op.loc)
    else:
        fill = _fill(scope, window.type, op.loc)
    return [scope.emit_typed("select", [mask, window, fill], window.type, op.loc)]


@rule("store")
def _store(scope: DischargeScope, op: Op) -> Sequence[Value]:
    access, known, dyn, rest = split(scope, op)
    masked_write(
        scope, access, known, dyn, rest[0], rest[1] if op.attrs.get("masked") else None, op
    )
    return []


def masked_write(
    scope: DischargeScope,
    access: Access,
    known: IndexerFacts,
    dyn: Sequence[Value],
    new: Value,
    mask: Value | None,
    op: Op,
) -> None:
    """Write ``new`` to the window, where ``mask`` (if any) is true."""
    if mask is not None:
        if known.arrays:
            _masked_scatter(scope, access, known.indexer, dyn, new, mask, op.loc)
            return
        old = access.read(known, dyn, new.type)
        new = scope.emit_typed("select", [mask, new, old], new.type, op.loc)
    access.write_window(known, dyn, new)


def _masked_scatter(
    scope: DischargeScope,
    access: Access,
    indexer: tuple,
    dyn: Sequence[Value],
    new: Value,
    mask: Value,
    loc: Location,
) -> None:
    """A masked store through an indexer with integer arrays, exactly: one ``scatter`` whose
    indices name every window lane's position, masked-off lanes pointing out of range.

    Dynamic slice starts and integers are clamped first (as the store would); array indices
    keep their values, so out-of-range ones are still dropped.
    """
    window = new.type.shape
    shape = access.handle.type.shape
    layout = indexing.layout(indexer, [v.type.shape for v in dyn])

    def splat(value: int) -> Value:
        return _broadcast(scope, _constant(scope, value, "int32", loc), window, loc)

    def clamped(v: Value, high: int) -> Value:
        high = min(high, int(np.iinfo(dtypes.to_numpy(v.type.dtype)).max))
        zero, top = (
            _constant(scope, 0, v.type.dtype, loc),
            _constant(scope, high, v.type.dtype, loc),
        )
        v = scope.emit("min", [scope.emit("max", [v, zero], loc), top], loc)
        return _int32(scope, v, loc)

    positions = []
    for e, dim, axes in zip(indexer, shape, layout.axes, strict=True):
        if isinstance(e, Slice):
            span = indexing.span(e)
            start = (
                splat(e.start)
                if isinstance(e.start, int)
                else _broadcast(scope, clamped(dyn[e.start.pos], dim - span), window, loc)
            )
            lane = scope.emit("iota", [], loc, type=ArrayType(window, "int32"), dimension=axes[0])
            if e.stride != 1:
                lane = scope.emit("mul", [lane, splat(e.stride)], loc)
            positions.append(scope.emit("add", [lane, start], loc))
        elif isinstance(e, Int):
            positions.append(
                splat(e.index)
                if isinstance(e.index, int)
                else _broadcast(scope, clamped(dyn[e.index.pos], dim - 1), window, loc)
            )
        else:
            index = _int32(scope, dyn[e.index.pos], loc)
            if index.type.shape != window:
                index = scope.emit("broadcast_in_dim", [index], loc, shape=window, dims=axes)
            positions.append(index)
    positions[0] = scope.emit("select", [mask, positions[0], splat(shape[0])], loc)
    every = tuple(ArrayIndex(Dyn(k)) for k in range(len(shape)))
    access.write(scope.emit("scatter", [access.value(), *positions, new], loc, indexer=every))


def _constant(scope: DischargeScope, value: object, dtype: str, loc: Location) -> Value:
    return scope.emit("constant", [], loc, value=Literal.of(value, dtype))


def _int32(scope: DischargeScope, v: Value, loc: Location) -> Value:
    return v if v.type.dtype == "int32" else scope.emit("convert", [v], loc, dtype="int32")
