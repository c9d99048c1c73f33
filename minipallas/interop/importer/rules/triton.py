"""Import rules for Pallas Triton's atomics: ``atomic_rmw`` (``plgpu.atomic_add``/``max``/
``min``) and ``atomic_cas``, as the ops of ``ir/opset/atomic.py``.

``atomic_rmw``'s operands are the ref, its transforms (views, then the window's indexer, as a
state equation's), the value and the mask. The window is ``ref[...]``'s (upstream's discharge
takes it with ``dynamic_slice``, or a gather for integer arrays). Upstream's discharge runs
only ``add``, ``max`` and ``min`` and no mask; ``xchg``/``and``/``or``/``xor`` are refused by
name, a mask imports as the op's mask (masked-off lanes keep their value, as on a GPU).
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.interop.importer.engine import ImportScope, rule
from minipallas.interop.importer.params import READ
from minipallas.interop.importer.rules.state import target
from minipallas.ir.core import Value
from minipallas.ir.opset.atomic import COMBINE
from minipallas.lowering.compat.jax_private import core as jax_core
from minipallas.lowering.compat.jax_private import tree_util

_OPS = {combine: name for name, combine in COMBINE.items()}  # "add" -> "atomic_add"


@rule("atomic_rmw", params={"args_tree": READ, "atomic_type": READ})
def atomic_rmw(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    kind = str(getattr(eqn.params["atomic_type"], "value", eqn.params["atomic_type"]))
    if kind not in _OPS:
        raise scope.error(
            f"atomic_{kind} is not imported (upstream's interpret mode has no rule for it)",
            fix="use atomic_add, atomic_max or atomic_min",
        )
    ref_atom, transforms, val, mask = tree_util.tree_unflatten(eqn.params["args_tree"], eqn.invars)
    ref, w = target(scope, ref_atom, transforms or ())
    value = scope.convert(scope.read(val), ref.type.dtype)
    shape = tuple(eqn.outvars[0].aval.shape)
    operands = [ref, *w.dyn, scope.broadcast(value, shape)]
    if mask is not None:
        operands.append(scope.broadcast(scope.read(mask), shape))
    return [scope.emit(_OPS[kind], operands, indexer=w.indexer, masked=mask is not None)]


@rule("atomic_cas", params={})
def atomic_cas(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    ref, cmp, val = (scope.read(a) for a in eqn.invars)
    dtype = ref.type.dtype
    operands = [ref, scope.convert(cmp, dtype), scope.convert(val, dtype)]
    return [scope.emit("atomic_cas", operands, indexer=())]
