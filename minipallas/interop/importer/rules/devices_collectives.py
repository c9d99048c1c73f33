"""Import rules for lax's collectives in the program of a device (``devices``): ``psum``,
``pmax``, ``pmin``, ``psum_invariant`` (``check_vma=True``'s psum), ``ppermute``,
``all_gather``, ``psum_scatter`` (``reduce_scatter``) and ``all_to_all``.

In one device's program a collective is an exchange through memory every device sees: a
``run_scoped`` collective over every mesh axis allocates a buffer with a row per device, each
device writes its value into its own row, all meet at a ``barrier``, each reads what the
collective gives it, and all meet again before the buffer is freed. What a device reads:

- ``psum``/``pmax``/``pmin`` over axes: the rows of the devices that differ from it only along
  those axes, reduced (a sum adds them in device order; XLA may add in another order, so float
  sums can differ in the last bit);
- ``ppermute``: the row of the device the permutation sends to it, zeros when none does (as
  upstream);
- ``all_gather``: those rows stacked at ``all_gather_dimension`` (merged into it when tiled);
- ``psum_scatter``: its own chunk of each of those rows, summed; ``all_to_all``: its own chunk
  of each, concatenated in device order.

Refused: ``axis_index_groups``, and all but the reductions over several axes at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from minipallas.interop.importer.engine import ImportScope, rule
from minipallas.interop.importer.params import READ, NoEffect, Only
from minipallas.interop.importer.rules import mesh as mesh_rules
from minipallas.ir.core import Value
from minipallas.ir.indexing import Dyn, Int, Slice, full
from minipallas.ir.types import RefType
from minipallas.lowering.compat.jax_private import core as jax_core

_GROUPS = Only(
    test=lambda groups: groups is None,
    accepted="no axis_index_groups",
    fix="reduce over whole mesh axes (axis_index_groups is deprecated upstream)",
)


def _exchange(
    scope: ImportScope, x: Value, read: Callable[[ImportScope, Value], Value], what: str
) -> Value:
    """``read(scope, rows)``'s value, once every device wrote ``x`` into its row of ``rows``."""
    devices = scope.importer.devices
    if devices is None or devices.kernel:
        raise scope.error(
            f"{what} is imported in the body of a shard_map over several devices only",
            fix="call it in the shard_map's body, outside any kernel",
        )
    names, sizes = devices.mesh
    rows, value = Value(RefType((*sizes, *x.type.shape), x.type.dtype)), Value(x.type)
    inner = scope.child()
    ids = [mesh_rules._axis_index(inner, a) for a in names]
    row = mesh_rules._row(inner, rows, ids)
    inner.emit("swap", [row, value], indexer=full(row.type.shape))
    inner.emit_op("barrier", [], axes=names)
    out = read(inner, rows)
    inner.emit_op("barrier", [], axes=names)
    block = inner.builder.block([rows, value], [out])
    return scope.emit_op("run_scoped", [x], [block], collective_axes=names).result


def _rows_along(scope: ImportScope, rows: Value, axes: Sequence[str], at: dict) -> Value:
    """The rows of ``rows`` at the device's own position, except along ``axes`` (all of them,
    in mesh order, in front) and where ``at`` gives another index."""
    names, sizes = scope.importer.devices.mesh
    dyn: list[Value] = []
    entries = []
    for a, n in zip(names, sizes, strict=True):
        if a in axes:
            entries.append(Slice(0, n, 1))
        else:
            dyn.append(at[a] if a in at else mesh_rules._axis_index(scope, a))
            entries.append(Int(Dyn(len(dyn) - 1)))
    shard = rows.type.shape[len(names) :]
    indexer = (*entries, *(Slice(0, d, 1) for d in shard))
    view = scope.emit("ref.at", [rows, *dyn], indexer=indexer)
    return scope.emit("get", [view], indexer=full(view.type.shape))


def _axes(scope: ImportScope, names: object) -> tuple[str, ...]:
    axes = tuple(str(a) for a in (names if isinstance(names, tuple | list) else (names,)))
    mesh = scope.importer.devices.mesh[0] if scope.importer.devices else ()
    unknown = [a for a in axes if a not in mesh]
    if unknown:
        raise scope.error(f"axes {unknown} are not axes of the shard_map's mesh {mesh}")
    return axes


_REDUCE = {"psum": "reduce_sum", "psum_invariant": "reduce_sum", "pmax": "reduce_max",
           "pmin": "reduce_min"}  # fmt: skip


@rule("psum", "pmax", "pmin", params={"axes": READ, "axis_index_groups": _GROUPS})
@rule("psum_invariant", params={"axes": READ})
def reduce(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    """Each operand reduced over the devices along ``axes`` (module doc)."""
    axes = _axes(scope, eqn.params["axes"])
    op = _REDUCE[eqn.primitive.name]

    def read(inner: ImportScope, rows: Value) -> Value:
        together = _rows_along(inner, rows, axes, {})
        return inner.emit(op, [together], axes=tuple(range(len(axes))))

    what = eqn.primitive.name
    return [_exchange(scope, scope.read(a), read, what) for a in eqn.invars]


@rule("ppermute", params={"axis_name": READ, "perm": READ})
def ppermute(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    """Each device's value from the device the permutation sends to it, else zeros."""
    (axis,) = _single(scope, eqn.params["axis_name"], "ppermute")
    n = dict(zip(*scope.importer.devices.mesh, strict=True))[axis]
    source = np.full(n, -1, np.int32)
    for src, dst in eqn.params["perm"]:
        source[int(dst)] = int(src)

    def read(inner: ImportScope, rows: Value) -> Value:
        me = mesh_rules._axis_index(inner, axis)
        table = inner.constant(np.maximum(source, 0), "int32")
        frm = inner.emit("dynamic_slice", [table, me], indexer=(Int(Dyn(0)),))
        got = _rows_along(inner, rows, (), {axis: frm})
        if (source >= 0).all():
            return got
        has = inner.emit("dynamic_slice", [inner.constant(source >= 0, "bool"), me],
                         indexer=(Int(Dyn(0)),))  # fmt: skip
        zeros = inner.constant(0, got.type.dtype, got.type.shape)
        return inner.emit("select", [inner.broadcast(has, got.type.shape), got, zeros])

    return [_exchange(scope, scope.read(a), read, "ppermute") for a in eqn.invars]


@rule(
    "all_gather",
    params={
        "axis_name": READ,
        "all_gather_dimension": READ,
        "axis_size": READ,  # the mesh axis's size, as the mesh says
        "tiled": READ,
        "axis_index_groups": _GROUPS,
    },
)
def all_gather(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    """The devices' values along an axis, stacked at ``all_gather_dimension`` (or merged
    into it when ``tiled``)."""
    (axis,) = _single(scope, eqn.params["axis_name"], "all_gather")
    dim, tiled = int(eqn.params["all_gather_dimension"]), bool(eqn.params["tiled"])

    def read(inner: ImportScope, rows: Value) -> Value:
        return _stack(inner, _rows_along(inner, rows, (axis,), {}), dim, tiled)

    (x,) = eqn.invars
    return [_exchange(scope, scope.read(x), read, "all_gather")]


def _stack(scope: ImportScope, got: Value, dim: int, merge: bool) -> Value:
    """``got``'s leading (device) dimension moved to ``dim``, merged into the next when
    ``merge`` (device-major)."""
    rank = got.type.ndim - 1
    perm = (*range(1, dim + 1), 0, *range(dim + 1, rank + 1))
    if perm != tuple(range(rank + 1)):
        got = scope.emit("transpose", [got], permutation=perm)
    if not merge:
        return got
    shape = list(got.type.shape)
    shape[dim : dim + 2] = [shape[dim] * shape[dim + 1]]
    return scope.emit("reshape", [got], shape=tuple(shape))


def _my_chunk(scope: ImportScope, got: Value, axis: str, dim: int) -> Value:
    """The device's chunk of every device's value (``got``: device first) along ``dim``."""
    n = got.type.shape[0]
    chunk = got.type.shape[dim + 1] // n
    start = scope.emit("mul", [mesh_rules._axis_index(scope, axis), scope.constant(chunk, "int32")])
    indexer = tuple(
        Slice(Dyn(0), chunk, 1) if d == dim + 1 else Slice(0, size, 1)
        for d, size in enumerate(got.type.shape)
    )
    return scope.emit("dynamic_slice", [got, start], indexer=indexer)


@rule(
    "reduce_scatter",
    params={
        "axis_name": READ,
        "scatter_dimension": READ,
        "axis_size": READ,  # the mesh axis's size, as the mesh says
        "tiled": READ,
        "axis_index_groups": _GROUPS,
    },
)
def reduce_scatter(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    """``lax.psum_scatter``: the sum over the devices of each one's chunk ``i`` along
    ``scatter_dimension``, on device ``i`` (its dimension dropped unless ``tiled``)."""
    (axis,) = _single(scope, eqn.params["axis_name"], "psum_scatter")
    dim, tiled = int(eqn.params["scatter_dimension"]), bool(eqn.params["tiled"])

    def read(inner: ImportScope, rows: Value) -> Value:
        part = _my_chunk(inner, _rows_along(inner, rows, (axis,), {}), axis, dim)
        total = inner.emit("reduce_sum", [part], axes=(0,))
        if tiled:
            return total
        shape = tuple(n for d, n in enumerate(total.type.shape) if d != dim)
        return inner.emit("reshape", [total], shape=shape)

    (x,) = eqn.invars
    return [_exchange(scope, scope.read(x), read, "psum_scatter")]


@rule(
    "all_to_all",
    params={
        "axis_name": READ,
        "split_axis": READ,
        "concat_axis": READ,
        "tiled": NoEffect(
            "how lax.all_to_all shaped the operand: the primitive always splits split_axis "
            "into a chunk per device and concatenates along concat_axis"
        ),
        "axis_index_groups": _GROUPS,
    },
)
def all_to_all(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    """Chunk ``i`` along ``split_axis`` of device ``j``'s value lands on device ``i``, at
    place ``j`` along ``concat_axis``."""
    (axis,) = _single(scope, eqn.params["axis_name"], "all_to_all")
    split, concat = int(eqn.params["split_axis"]), int(eqn.params["concat_axis"])

    def read(inner: ImportScope, rows: Value) -> Value:
        part = _my_chunk(inner, _rows_along(inner, rows, (axis,), {}), axis, split)
        return _stack(inner, part, concat, True)

    (x,) = eqn.invars
    return [_exchange(scope, scope.read(x), read, "all_to_all")]


def _single(scope: ImportScope, names: object, what: str) -> tuple[str]:
    axes = _axes(scope, names)
    if len(axes) != 1:
        raise scope.error(f"a {what} over the axes {axes} at once cannot be imported",
                          fix=f"{what} over one mesh axis at a time")  # fmt: skip
    return axes  # type: ignore[return-value]
