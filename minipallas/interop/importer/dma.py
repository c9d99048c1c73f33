"""Import rules for upstream's async copies: ``dma_start`` and ``dma_wait``
(``pltpu.make_async_copy`` / ``async_copy``).

An equation's operands are the leaves of the ``tree`` parameter's pytree: ``(src, dst,
dst_sem, src_sem, device_id)``, each of the first three a ref or a ``TransformedRef`` whose
transforms are the ref's views (``x_ref.at[pl.ds(i, 8)]``): they import as ``ref.at`` /
``ref.reshape`` / ``ref.bitcast`` views (``state.apply_view``). A remote copy (``device_id``,
a source semaphore) has no minipallas counterpart; ``add=True`` has no rule upstream either,
and only priority 0 is kept (as the front end).
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.interop.importer.engine import ImportScope, rule
from minipallas.interop.importer.mesh import own_row
from minipallas.interop.importer.params import READ, NoEffect
from minipallas.interop.importer.state import apply_view
from minipallas.ir.core import Value
from minipallas.lowering.jax_private import core as jax_core
from minipallas.lowering.jax_private import state_types


def _ref(scope: ImportScope, leaf: object) -> Value:
    """The ref a DMA operand names: a ref atom, or its view through the transforms."""
    if not isinstance(leaf, state_types.TransformedRef):
        return own_row(scope, leaf)  # type: ignore[arg-type]
    ref = own_row(scope, leaf.ref)
    for transform in leaf.transforms:
        ref = apply_view(scope, ref, transform)
    return ref


def _operands(scope: ImportScope, eqn: jax_core.JaxprEqn) -> list[Value]:
    src, dst, sem, src_sem, device_id = eqn.params["tree"].unflatten(eqn.invars)
    if device_id is not None or src_sem is not None:
        raise scope.error(
            f"a remote {eqn.primitive.name} (make_async_remote_copy, device_id) cannot be imported",
            fix="copy locally (make_async_copy); programs share data through a collective "
            "run_scoped's memory",
        )
    return [_ref(scope, src), _ref(scope, dst), _ref(scope, sem)]


_DEVICE_ID_TYPE = NoEffect("how a device_id is read; remote copies, which have one, are refused")


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
    scope.emit_op("dma_start", _operands(scope, eqn))
    return []


@rule(
    "dma_wait",
    params={
        "tree": READ,
        "device_id_type": _DEVICE_ID_TYPE,
        "insert_dummy_device": NoEffect(
            "whether Mosaic names device 0 in a remote copy's wait (refused, as above)"
        ),
    },
)
def dma_wait(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    scope.emit_op("dma_wait", _operands(scope, eqn))
    return []
