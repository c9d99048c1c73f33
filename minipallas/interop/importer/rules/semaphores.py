"""Import rules for upstream's semaphore primitives: ``semaphore_signal``, ``semaphore_wait``,
``semaphore_read`` (``pl.semaphore_*``).

Each equation's operands are the leaves of the pytree its ``args_tree`` parameter describes:
the semaphore ref, its transforms (``sem.at[i]``), then the op's own arguments. The ref and
window come out as for a state op (``state.target``). In a kernel that spans devices
(``devices``) a signal with ``device_id`` signals the target device's row of the semaphore;
elsewhere a signal to another device has no counterpart (programs share semaphores through a
collective ``run_scoped``); a signal to another core of a mesh kernel (``core_index``)
signals that core's row of the allocation (``mesh``). A wait's ``decrement`` must be a constant.
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.interop.importer.engine import ImportScope, rule
from minipallas.interop.importer.params import READ
from minipallas.interop.importer.rules.devices_kernel import device_indices, target_row
from minipallas.interop.importer.rules.mesh import core_axis, core_row, in_device_kernel
from minipallas.interop.importer.rules.state import target
from minipallas.ir.core import Value
from minipallas.lowering.compat.jax_private import core as jax_core
from minipallas.lowering.compat.jax_private import tree_util


def _arguments(eqn: jax_core.JaxprEqn) -> list:
    return tree_util.tree_unflatten(eqn.params["args_tree"], eqn.invars)


@rule(
    "semaphore_signal",
    params={
        "args_tree": READ,
        # how a device_id is read: in a kernel that spans devices, the target device
        # (``devices``); in a core mesh a dict of its one axis names a core
        "device_id_type": READ,
    },
)
def semaphore_signal(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    sem, transforms, inc, device_id, core_index = _arguments(eqn)
    if device_id is not None and in_device_kernel(scope):  # ``devices_kernel``
        what = "a remote semaphore_signal"
        at = device_indices(scope, device_id, eqn.params["device_id_type"], what)
        ref, w = target(scope, sem, transforms, target_row(scope, sem, at, what))
        scope.emit_op("semaphore_signal", [ref, *w.dyn, scope.read(inc)], indexer=w.indexer)
        return []
    axis = core_axis(scope, device_id) if isinstance(device_id, dict) else None
    if core_index is None and axis is not None:
        device_id, core_index = None, device_id[axis]
    if device_id is not None:
        raise scope.error(
            "a semaphore_signal to another device (device_id) cannot be imported",
            fix="signal a semaphore of a collective run_scoped: every program of the group "
            "shares it; in a mesh kernel, signal another core with core_index",
        )
    other = None if core_index is None else core_row(scope, sem, core_index)
    ref, w = target(scope, sem, transforms, other)
    scope.emit_op("semaphore_signal", [ref, *w.dyn, scope.read(inc)], indexer=w.indexer)
    return []


@rule("semaphore_wait", params={"args_tree": READ})
def semaphore_wait(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    sem, transforms, value, decrement = _arguments(eqn)
    if not isinstance(decrement, jax_core.Literal | bool):
        raise scope.error("a semaphore_wait whose decrement is traced cannot be imported",
                          fix="pass decrement=True or decrement=False")  # fmt: skip
    ref, w = target(scope, sem, transforms)
    scope.emit_op("semaphore_wait", [ref, *w.dyn, scope.read(value)], indexer=w.indexer,
                  decrement=bool(getattr(decrement, "val", decrement)))  # fmt: skip
    return []


@rule("semaphore_read", params={"args_tree": READ})
def semaphore_read(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    sem, transforms = _arguments(eqn)
    ref, w = target(scope, sem, transforms)
    return [scope.emit("semaphore_read", [ref, *w.dyn], indexer=w.indexer)]
