"""Import rules for upstream's async copies: ``dma_start`` and ``dma_wait``
(``pltpu.make_async_copy`` / ``async_copy``).

An equation's operands are the leaves of the ``tree`` parameter's pytree: ``(src, dst,
dst_sem, src_sem, device_id)``, each of the first three a ref or a ``TransformedRef`` whose
transforms are the ref's views (``x_ref.at[pl.ds(i, 8)]``): they import as ``ref.at`` /
``ref.reshape`` / ``ref.bitcast`` views (``state.apply_view``). A remote copy (``device_id``,
a source semaphore) has no minipallas counterpart; ``add=True`` has no rule upstream either,
and only priority 0 is kept (as the front end).

In a kernel that spans devices (``devices``), a remote copy (``make_async_remote_copy``) is
read with its ``device_id_type``: its start copies the device's source into the *target's*
row of the destination and counts it on the target's row of the receive semaphore, then
copies the source onto itself on the device's send semaphore (what ``wait_send`` takes back;
the source stays busy until then); each wait acts on the waiting device's own rows: the
receive wait on its destination, the send wait on its source.

A wait moves nothing: it takes its window's size back from the semaphore, and upstream's TPU
interpret mode reads that size from the window at run time, which may be a slice of dynamic
size (``x_ref.at[pl.ds(0, 8 * n)]``, a descriptor made only to wait for ``n`` copies). minipallas's
refs have static shapes, so such a wait imports as a ``for`` loop of ``prod(sizes)`` waits, each
for one *piece*: the window with every dynamic size cut to 1 at its start. The pieces take what
the one wait takes, and block until it is there: only the waiting program waits on its own
semaphore, so nothing takes from it between them. A copy of dynamic size is still refused, and
so is a wait whose descriptor's two windows differ in bytes (upstream's interpret mode counts
the first window, a receive wait the copy's source; minipallas the window it waits for).
A copy over a ``pl.select_ref`` is one copy per option under a ``cond`` (``dma_select``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from minipallas.interop.importer.dma_select import with_selects
from minipallas.interop.importer.engine import ImportScope, rule
from minipallas.interop.importer.params import READ, NoEffect
from minipallas.interop.importer.rules.devices_kernel import device_indices, target_row
from minipallas.interop.importer.rules.mesh import in_device_kernel, own_row
from minipallas.interop.importer.rules.state import apply_view
from minipallas.ir.core import Value
from minipallas.ir.types import ArrayType
from minipallas.lowering.compat.jax_private import core as jax_core
from minipallas.lowering.compat.jax_private import state_indexing as jax_indexing
from minipallas.lowering.compat.jax_private import state_types


def _ref(scope: ImportScope, leaf: object) -> Value:
    """The ref a DMA operand names: a ref atom, or its view through the transforms."""
    if not isinstance(leaf, state_types.TransformedRef):
        return own_row(scope, leaf)  # type: ignore[arg-type]
    ref = own_row(scope, leaf.ref)
    for transform in leaf.transforms:
        ref = apply_view(scope, ref, transform)
    return ref


def _ref_at(scope: ImportScope, leaf: object, indices: list[Value], what: str) -> Value:
    """The target device's row of what a DMA operand names, its views applied."""
    atom = leaf.ref if isinstance(leaf, state_types.TransformedRef) else leaf
    ref = target_row(scope, atom, indices, what)
    for transform in getattr(leaf, "transforms", ()):
        ref = apply_view(scope, ref, transform)
    return ref


def _remote(scope: ImportScope, eqn: jax_core.JaxprEqn) -> bool:
    """Whether ``eqn`` is a remote copy's start or wait in a kernel that spans devices."""
    *_, src_sem, device_id = eqn.params["tree"].unflatten(eqn.invars)
    remote = device_id is not None or src_sem is not None
    return remote and in_device_kernel(scope)


def _operands(scope: ImportScope, eqn: jax_core.JaxprEqn, leaves: Sequence) -> list[Value]:
    """A local copy's ``[src, dst, sem]`` from the leaves of its ``tree``."""
    src, dst, sem, src_sem, device_id = leaves
    if device_id is not None or src_sem is not None:
        raise scope.error(
            f"a remote {eqn.primitive.name} (make_async_remote_copy, device_id) cannot be imported",
            fix="copy locally (make_async_copy); programs share data through a collective "
            "run_scoped's memory",
        )
    return [_ref(scope, src), _ref(scope, dst), _ref(scope, sem)]


_DEVICE_ID_TYPE = READ  # how a remote copy's device_id is read (``devices``)


@rule(
    "dma_start",
    params={"tree": READ, "add": READ, "priority": READ, "device_id_type": _DEVICE_ID_TYPE},
)
def dma_start(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    if eqn.params.get("add"):
        raise scope.error("a dma_start with add=True cannot be imported (upstream has no "
                          "discharge or Mosaic rule for it)", fix="copy, then add")  # fmt: skip
    if eqn.params.get("priority", 0) != 0:
        raise scope.error(f"a dma_start with priority {eqn.params['priority']} cannot be "
                          "imported", fix="start the copy with priority 0")  # fmt: skip
    with_selects(scope, eqn, eqn.params["tree"].unflatten(eqn.invars),
                 lambda inner, leaves: _start(inner, eqn, leaves))  # fmt: skip
    return []


def _start(scope: ImportScope, eqn: jax_core.JaxprEqn, leaves: Sequence) -> None:
    if not _remote(scope, eqn):
        scope.emit_op("dma_start", _operands(scope, eqn, leaves))
        return
    src, dst, recv, send, device_id = leaves
    what = "a remote dma_start"
    target = device_indices(scope, device_id, eqn.params["device_id_type"], what)
    source = _ref(scope, src)
    scope.emit_op("dma_start", [source, _ref_at(scope, dst, target, what),
                                _ref_at(scope, recv, target, what)])  # fmt: skip
    scope.emit_op("dma_start", [source, source, _ref(scope, send)])  # the send side


@rule(
    "dma_wait",
    params={
        "tree": READ,
        "device_id_type": _DEVICE_ID_TYPE,
        "insert_dummy_device": NoEffect(
            "whether Mosaic names device 0 in a remote copy's wait; a wait acts on the "
            "waiting device's own rows either way"
        ),
    },
)
def dma_wait(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    with_selects(scope, eqn, eqn.params["tree"].unflatten(eqn.invars),
                 lambda inner, leaves: _wait(inner, eqn, leaves))  # fmt: skip
    return []


def _wait(scope: ImportScope, eqn: jax_core.JaxprEqn, leaves: Sequence) -> None:
    src, mine, sem, *rest = leaves  # wait_send swaps them
    sizes = _dynamic_sizes(mine)  # what the wait counts: its second operand's window
    src, mine = _unit(src), _unit(mine)
    if _bytes(src) != _bytes(mine):
        raise scope.error(
            f"waits on a descriptor whose windows differ in size ({_bytes(src)} and "
            f"{_bytes(mine)} bytes, a piece of each where sizes are dynamic): upstream's TPU "
            "interpret mode takes its first window's size, minipallas the one the wait is for",
            fix="wait with a descriptor whose source and destination have one size (the "
            "copy's own: copy.wait_recv(), copy.wait_send())",
        )
    if _remote(scope, eqn):
        own = _ref(scope, mine)
        operands = [own, own, _ref(scope, sem)]
    else:
        operands = _operands(scope, eqn, (src, mine, sem, *rest))
    if not sizes:
        scope.emit_op("dma_wait", operands)
        return
    _wait_pieces(scope, operands, sizes)


def _wait_pieces(scope: ImportScope, operands: list[Value], sizes: list) -> None:
    """``for i in range(prod(sizes))``: a wait for one piece (module doc)."""
    pieces = [scope.convert(scope.read(size), "int32") for size in sizes]
    n = pieces[0]
    for piece in pieces[1:]:
        n = scope.emit("mul", [n, piece])
    inner = scope.child()
    params = [Value(v.type) for v in operands]
    inner.emit_op("dma_wait", params)
    body = inner.builder.block([Value(ArrayType((), "int32")), *params], [])
    lower = scope.constant(0, "int32")
    scope.emit_op("for", [lower, n, *operands], [body], num_consts=len(operands))


def _bytes(leaf: object) -> int:
    """The bytes of the window a DMA operand names (its views' type, as upstream types it)."""
    ref = getattr(leaf, "ref", leaf)
    aval = ref.aval
    for transform in getattr(leaf, "transforms", ()):
        aval = transform.transform_type(aval)
    return int(np.prod(aval.shape)) * np.dtype(aval.dtype).itemsize


def _dynamic_sizes(leaf: object) -> list:
    """The dynamic sizes of the slices in a DMA operand's views (``x_ref.at[pl.ds(0, 8 * n)]``)."""
    return [
        entry.size
        for transform in getattr(leaf, "transforms", ())
        if isinstance(transform, jax_indexing.NDIndexer)
        for entry in transform.indices
        if isinstance(entry, jax_indexing.Slice) and not isinstance(entry.size, int)
    ]


def _unit(leaf: object) -> object:
    """``leaf`` with each slice of dynamic size cut to one element at its start: one piece of
    a wait of dynamic size (module doc)."""
    if not _dynamic_sizes(leaf):
        return leaf
    transforms = tuple(
        dataclasses.replace(t, indices=tuple(map(_unit_entry, t.indices)))
        if isinstance(t, jax_indexing.NDIndexer)
        else t
        for t in leaf.transforms  # type: ignore[attr-defined]
    )
    return state_types.TransformedRef(leaf.ref, transforms)  # type: ignore[attr-defined]


def _unit_entry(entry: object) -> object:
    if isinstance(entry, jax_indexing.Slice) and not isinstance(entry.size, int):
        return jax_indexing.Slice(entry.start, 1, 1)
    return entry
