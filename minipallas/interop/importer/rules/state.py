"""Import rules for upstream's state primitives: ``get``, ``swap``, ``addupdate``, the
``broadcast_to`` that integer indexing inserts, and ``run_state``.

A state equation's operands are the ref, (for ``swap``/``addupdate``) the value, then the
leaves of its *transforms*, a pytree described by the ``tree`` parameter. Unflattening it with
the equation's atoms as leaves gives the transforms as upstream built them:

- an ``NDIndexer`` is ``ref.at[...]`` (a ``ref.at`` view) or, when it comes last, the indexer
  of the read or write itself (``indexers.window`` keeps upstream's index wrapping; a read's
  stride-0 slice is a broadcast, ``indexers.broadcast_read``);
- ``ReshapeTransform`` / ``BitcastTransform`` / ``TransposeTransform`` are ``ref.reshape`` /
  ``ref.bitcast`` / ``ref.transpose`` views (``ref.reshape(...)``, ``ref.bitcast(...)``,
  ``ref.T``). A bitcast of another width packs along the second-minor dim (upstream's TPU rule).

Upstream's discharge itself handles fewer of these: it rejects a write through a reshape,
bitcast or transpose view, ``addupdate`` through more than one transform, and a transpose view
anywhere. minipallas imports them all with the meaning of the views (writes land in the
underlying buffer), which the reference interpreter defines.
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.interop.importer.avals import dtype_of, type_of
from minipallas.interop.importer.engine import ImportScope, rule
from minipallas.interop.importer.indexers import Window, broadcast_read, window
from minipallas.interop.importer.params import READ, NoEffect
from minipallas.interop.importer.rules.mesh import own_row
from minipallas.ir.core import Value
from minipallas.ir.indexing import full
from minipallas.ir.types import RefType
from minipallas.lowering.compat.jax_private import core as jax_core
from minipallas.lowering.compat.jax_private import state_indexing as jax_indexing
from minipallas.lowering.compat.jax_private import state_types, tree_util


def transforms_of(eqn: jax_core.JaxprEqn, first: int) -> tuple:
    """The transforms of a state equation whose leaves start at operand ``first``."""
    return tuple(tree_util.tree_unflatten(eqn.params["tree"], eqn.invars[first:]))


def apply_view(scope: ImportScope, ref: Value, transform: object) -> Value:
    """The ref view one upstream transform makes of ``ref``."""
    if isinstance(transform, jax_indexing.NDIndexer):
        w = window(scope, transform, ref.type.shape, view=True)
        return scope.emit("ref.at", [ref, *w.dyn], indexer=w.indexer)
    if isinstance(transform, state_types.ReshapeTransform):
        return scope.emit("ref.reshape", [ref], shape=tuple(transform.shape))
    if isinstance(transform, state_types.BitcastTransform):
        dtype = dtype_of(transform.dtype, "a bitcast view")
        return scope.emit("ref.bitcast", [ref], dtype=dtype)
    if isinstance(transform, state_types.TransposeTransform):
        return scope.emit("ref.transpose", [ref], permutation=tuple(transform.permutation))
    raise scope.error(f"the ref transform {type(transform).__name__} cannot be imported")


def target(
    scope: ImportScope, ref_atom: jax_core.Atom, transforms: Sequence, ref: Value | None = None
) -> tuple[Value, Window]:
    """The ref a state equation acts on (views applied) and the window it reads or writes;
    ``ref``: the value to start from, when not ``ref_atom``'s own (a core's row, ``mesh``)."""
    ref = own_row(scope, ref_atom) if ref is None else ref
    views = list(transforms)
    last = views.pop() if views and isinstance(views[-1], jax_indexing.NDIndexer) else None
    for transform in views:
        ref = apply_view(scope, ref, transform)
    if last is None:
        return ref, Window.whole(ref.type.shape)
    return ref, window(scope, last, ref.type.shape)


@rule("get", params={"tree": READ})
def get(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    transforms, spread = broadcast_read(transforms_of(eqn, 1))
    ref, w = target(scope, eqn.invars[0], transforms)
    value = scope.emit("get", [ref, *w.dyn], indexer=w.indexer)
    return [value if spread is None else scope.broadcast(value, spread)]


@rule("swap", params={"tree": READ})
def swap(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    ref, w = target(scope, eqn.invars[0], transforms_of(eqn, 2))
    value = scope.read(eqn.invars[1])
    return [scope.emit("swap", [ref, *w.dyn, value], indexer=w.indexer)]


@rule("addupdate", params={"tree": READ})
def addupdate(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    ref, w = target(scope, eqn.invars[0], transforms_of(eqn, 2))
    value = scope.read(eqn.invars[1])
    scope.emit_op("addupdate", [ref, *w.dyn, value], indexer=w.indexer)
    return []


@rule("broadcast_to", params={"shape": READ})
def broadcast_to(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    """numpy-style broadcast (upstream inserts it to line up integer indices)."""
    return [scope.broadcast(scope.read(eqn.invars[0]), eqn.params["shape"])]


@rule(
    "run_state",
    params={
        "jaxpr": READ,
        "is_initialized": READ,
        "which_linear": NoEffect("which refs are linear, for jax's differentiation"),
    },
)
def run_state(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    """``run_state(f)(init)``: a ``run_scoped`` allocating one ref per array argument of ``f``.

    The body stores each initial value into its ref, imports ``f``, and yields every ref's
    final value. A ref upstream leaves uninitialized keeps the allocation's fill value. An
    argument that is already a ref (a nested ``run_state`` closing over an outer one) is not
    copied: ``f`` works on that ref itself, and upstream's result for it is the same ref.
    """
    jaxpr = eqn.params["jaxpr"]
    if jaxpr.constvars:
        raise scope.error("a run_state body with constvars cannot be imported")
    initialized = eqn.params["is_initialized"]
    args = iter([scope.read(a) for a in eqn.invars])
    outer = [next(args) if init else None for init in initialized]
    params = [Value(a.type) for a in outer if a is not None]
    allocs = {
        k: Value(type_of(v.aval, f"state variable {v}"))
        for k, (v, a) in enumerate(zip(jaxpr.invars, outer, strict=True))
        if a is None or not isinstance(a.type, RefType)
    }

    def prologue(inner: ImportScope, _: list[Value]) -> list[Value]:
        values, refs = iter(params), []
        for k, init in enumerate(initialized):
            value = next(values) if init else None
            ref = allocs.get(k, value)
            if value is not None and ref is not value:
                inner.emit("swap", [ref, value], indexer=full(ref.type.shape))
            refs.append(ref)
        return refs

    def epilogue(inner: ImportScope, outs: list[Value]) -> list[Value]:
        return [inner.emit("get", [ref], indexer=full(ref.type.shape)) for ref in allocs.values()]

    operands = [a for a in outer if a is not None]
    body = scope.region(jaxpr, None, [*allocs.values(), *params], prologue, epilogue)
    finals = iter(scope.emit_op("run_scoped", operands, [body], collective_axes=()).results)
    return [next(finals) if k in allocs else outer[k] for k in range(len(initialized))]
