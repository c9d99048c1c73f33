"""Import rules for Pallas primitives: ``run_scoped``, masked ``load``/``swap`` (``pl.load``,
``pl.store``, ``pl.swap``), ``program_id`` and ``num_programs``.

``run_scoped``'s body is an open jaxpr: its invars are the allocations and its constvars the
outer values it uses, which are the equation's operands. That is minipallas's layout already
(body parameters: allocations, then one per operand); ``collective_axes`` carries over.

Pallas ``load``/``swap`` follow upstream's discharge rules (``jax/_src/pallas/primitives.py``):

- A mask without ``other`` does nothing to a load (upstream returns the memory's contents), so
  it imports as an unmasked ``load``; with ``other``, masked-off lanes read ``other``.
- A masked store writes only the enabled lanes; ``pl.swap``'s result has the stored value in
  the disabled ones, as upstream's has.
- Windows of stride-1 slices and scalars: upstream pads the ref with fill values (NaN, the
  integer minimum, False) past its end before taking the window, so a window that runs off the
  end reads fill values there and drops the writes there, instead of shifting back inside as
  ``lax.dynamic_slice`` would; a negative start gets the padded size added once. With the
  default ``pallas_oob="pad"`` the import reproduces this: a window known to fit stays a plain
  window; any other reads and writes through position arrays (past-the-end positions are
  clamped by reads and then replaced by the fill value, dropped by writes). ``pallas_oob=
  "clamp"`` imports such windows as plain windows instead, clamped like ``ref[...]``'s.
- A stride-0 slice is a broadcast read, as for ``ref[...]`` (``indexers.broadcast_read``),
  its window clamped as ``ref[...]``'s (upstream's discharge cannot run one to pad it).
- Windows of integer arrays (and scalars) are jnp indexing, as for ``ref[...]``. Upstream
  rejects strided slices and slices mixed with arrays here; minipallas imports them with the
  meaning ``ref[...]`` gives them.
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.interop.importer.avals import type_of
from minipallas.interop.importer.engine import ImportScope, rule
from minipallas.interop.importer.indexers import Window, broadcast_read, static_int, window
from minipallas.interop.importer.params import READ, NoEffect
from minipallas.interop.importer.rules.mesh import allocation_type, collective_axes, own_row
from minipallas.interop.importer.rules.state import apply_view
from minipallas.ir.core import Value
from minipallas.ir.dtypes import fill_value
from minipallas.ir.indexing import Array, Dyn, Int, Slice
from minipallas.ir.types import ArrayType
from minipallas.lowering.compat.jax_private import core as jax_core
from minipallas.lowering.compat.jax_private import state_indexing as jax_indexing
from minipallas.lowering.compat.jax_private import tree_util


@rule(
    "run_scoped",
    params={
        "jaxpr": READ,
        "collective_axes": READ,
        "ref_transforms": NoEffect(
            "the allocations' transforms, which the body applies itself at each use"
        ),
    },
)
def run_scoped(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    jaxpr = eqn.params["jaxpr"]
    args = [scope.read(a) for a in eqn.invars]
    types = [type_of(v.aval, f"scoped allocation {v}") for v in jaxpr.invars]
    axes = collective_axes(scope, tuple(str(a) for a in eqn.params.get("collective_axes", ())),
                           types)  # fmt: skip
    allocs = [Value(allocation_type(scope, t, bool(axes))) for t in types]
    params = [Value(a.type) for a in args]

    def prologue(inner: ImportScope, _: list[Value]) -> list[Value]:
        for var, param in zip(jaxpr.constvars, params, strict=True):
            inner.bind(var, param)
        return list(allocs)

    body = scope.region(jaxpr, None, [*allocs, *params], prologue)
    return list(scope.emit_op("run_scoped", args, [body], collective_axes=axes).results)


@rule("program_id", "num_programs", params={"axis": READ})
def grid_query(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    """A grid index or size: >= 0, so indexing with it needs no negative wrap. In a kernel
    that spans devices the grid's axes follow the mesh's (``devices_grid``)."""
    devices = scope.importer.devices
    offset = len(devices.mesh[0]) if devices is not None and devices.kernel else 0
    out = scope.emit(eqn.primitive.name, [], axis=offset + int(eqn.params["axis"]))
    scope.nonnegative.add(out)
    return [out]


# --- masked load and swap ------------------------------------------------------------------


class Lanes:
    """Where a Pallas load or store lands: a window, and (padded windows only) the bool
    array of its lanes that fall inside the ref, or None when all do."""

    def __init__(self, window: Window, inside: Value | None = None) -> None:
        self.window = window
        self.inside = inside


def _target(
    scope: ImportScope, ref_atom: jax_core.Atom, transforms: Sequence, pad: bool = True
) -> tuple[Value, Lanes]:
    """``pad=False``: the window imports as ``ref[...]``'s, clamped (no upstream padding)."""
    ref = own_row(scope, ref_atom)
    views = list(transforms)
    last = views.pop() if views and isinstance(views[-1], jax_indexing.NDIndexer) else None
    for transform in views:
        ref = apply_view(scope, ref, transform)
    shape = ref.type.shape
    if last is None:
        return ref, Lanes(Window.whole(shape))
    entries = last.indices
    padded = all(
        (isinstance(e, jax_indexing.Slice) and e.stride == 1) or not _array_shape(e)
        for e in entries
    )
    if not padded or not pad or scope.importer.pallas_oob == "clamp":
        return ref, Lanes(window(scope, last, shape))
    return ref, _padded(scope, entries, shape)


def _array_shape(entry: object) -> tuple[int, ...]:
    return tuple(getattr(getattr(entry, "aval", None), "shape", ()))


def _padded(scope: ImportScope, entries: Sequence, shape: Sequence[int]) -> Lanes:
    """Upstream's padded window: start ``s`` (a negative one plus ``dim + size``) clamped into
    ``[0, dim]``, lanes ``s .. s+size-1``, those from ``dim`` on outside the ref. Made once
    per block for the same starts, sizes and shape."""
    key = ("pallas window", tuple(shape), *(_entry_key(scope, e) for e in entries))
    if key not in scope.memo:
        scope.memo[key] = _padded_lanes(scope, entries, shape)
    return scope.memo[key]


def _entry_key(scope: ImportScope, entry: object) -> tuple:
    is_slice = isinstance(entry, jax_indexing.Slice)
    atom = entry.start if is_slice else entry
    s = static_int(atom)
    return (is_slice, entry.size if is_slice else 1, s if s is not None else scope.read(atom))


def _padded_lanes(scope: ImportScope, entries: Sequence, shape: Sequence[int]) -> Lanes:
    starts: list[int | Value] = []
    sizes = []
    for entry, dim in zip(entries, shape, strict=True):
        is_slice = isinstance(entry, jax_indexing.Slice)
        size = entry.size if is_slice else 1
        atom = entry.start if is_slice else entry
        s = static_int(atom)
        if s is not None:
            starts.append(min(max(s + dim + size if s < 0 else s, 0), dim))
        else:
            v = scope.convert(scope.read(atom), "int32")
            zero = scope.constant(0, "int32")
            negative = scope.emit("lt", [v, zero])
            shifted = scope.emit("add", [v, scope.constant(dim + size, "int32")])
            wrapped = scope.emit("select", [negative, shifted, v])
            low = scope.emit("max", [wrapped, zero])
            starts.append(scope.emit("min", [low, scope.constant(dim, "int32")]))
        sizes.append(size)
    fits = all(
        isinstance(s, int) and s + n <= d for s, n, d in zip(starts, sizes, shape, strict=True)
    )
    if fits:
        indexer = tuple(
            Slice(s, n, 1) if isinstance(e, jax_indexing.Slice) else Int(s)
            for e, s, n in zip(entries, starts, sizes, strict=True)
        )
        return Lanes(Window(indexer, []))
    win = tuple(n for e, n in zip(entries, sizes, strict=True) if isinstance(e, jax_indexing.Slice))
    positions, inside = [], None
    axis = 0
    for e, s, n, dim in zip(entries, starts, sizes, shape, strict=True):
        start = scope.constant(s, "int32", win) if isinstance(s, int) else scope.broadcast(s, win)
        if isinstance(e, jax_indexing.Slice):
            lane = scope.emit("iota", [], type=ArrayType(win, "int32"), dimension=axis)
            start = scope.emit("add", [lane, start])
            axis += 1
        positions.append(start)
        if not isinstance(s, int) or s + n > dim:
            lane_inside = scope.emit("lt", [start, scope.constant(dim, "int32", win)])
            inside = lane_inside if inside is None else scope.emit("and", [inside, lane_inside])
    indexer = tuple(Array(Dyn(k)) for k in range(len(positions)))
    return Lanes(Window(indexer, positions), inside)


def _read(scope: ImportScope, ref: Value, lanes: Lanes) -> Value:
    w = lanes.window
    return _filled(scope, scope.emit("load", [ref, *w.dyn], indexer=w.indexer), lanes)


def _filled(scope: ImportScope, value: Value, lanes: Lanes) -> Value:
    """What a read of ``lanes`` gives upstream: ``value``, with the fill value past the end."""
    if lanes.inside is None:
        return value
    fill = scope.constant(fill_value(value.type.dtype), value.type.dtype, value.type.shape)
    return scope.emit("select", [lanes.inside, value, fill])


def _lanes_of(scope: ImportScope, atom: jax_core.Atom, like: Value) -> Value:
    """A mask or ``other`` operand broadcast to the window (and ``other`` in its dtype)."""
    x = scope.read(atom)
    if x.type.dtype != "bool":
        x = scope.convert(x, like.type.dtype)
    return scope.broadcast(x, like.type.shape)


_CACHE = NoEffect("a hint to Triton's compiler on how to cache the memory")


@rule(
    "masked_load",
    params={
        "args_tree": READ,
        "cache_modifier": _CACHE,
        "eviction_policy": _CACHE,
        "is_volatile": NoEffect(
            "Triton reads memory again rather than from a cache; a load here reads memory as "
            "it is when it runs"
        ),
    },
)
def masked_load(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    ref_atom, transforms, mask, other = tree_util.tree_unflatten(
        eqn.params["args_tree"], eqn.invars
    )
    transforms, spread = broadcast_read(tuple(transforms or ()))
    ref, lanes = _target(scope, ref_atom, transforms, pad=spread is None)
    if mask is None or other is None:
        value = _read(scope, ref, lanes)
        return [value if spread is None else scope.broadcast(value, spread)]
    if spread is not None:
        raise scope.error(
            "a masked load through a stride-0 slice cannot be imported (Mosaic lowers none)",
            fix="load without the mask and select with jnp.where",
        )
    result = type_of(eqn.outvars[0].aval)
    like = Value(result)
    m, o = _lanes_of(scope, mask, like), _lanes_of(scope, other, like)
    if lanes.inside is None:
        w = lanes.window
        operands = [ref, *w.dyn, m, o]
        return [scope.emit("load", operands, indexer=w.indexer, masked=True, has_other=True)]
    return [scope.emit("select", [m, _read(scope, ref, lanes), o])]


@rule("masked_swap", params={"args_tree": READ, "eviction_policy": _CACHE})
def masked_swap(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    ref_atom, transforms, val, mask = tree_util.tree_unflatten(eqn.params["args_tree"], eqn.invars)
    ref, lanes = _target(scope, ref_atom, transforms or ())
    new = scope.read(val)
    w = lanes.window
    used = scope.is_used(eqn.outvars[0])
    if used and mask is None:  # a swap, so that its effect is upstream's: a write only
        old = scope.emit("swap", [ref, *w.dyn, new], indexer=w.indexer)
        return [_filled(scope, old, lanes)]
    old = _read(scope, ref, lanes) if used else new
    if mask is None:
        scope.emit_op("store", [ref, *w.dyn, new], indexer=w.indexer)
        return [old]
    m = _lanes_of(scope, mask, new)
    scope.emit_op("store", [ref, *w.dyn, new, m], indexer=w.indexer, masked=True)
    return [scope.emit("select", [m, old, new]) if used else new]
