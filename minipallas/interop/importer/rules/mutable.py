"""Import rules for refs a program makes itself: ``new_ref``, ``empty_ref``, ``freeze`` and
``free_ref`` (``jax.new_ref``, ``jax.empty_ref``, ``jax.freeze``, ``jax.free_ref``).

A ref made inside a program lives from its ``new_ref`` to the end of the block that makes it
(upstream refuses to return one), which is minipallas's scoped allocation: the equations after
the ``new_ref`` import into the body of a ``run_scoped`` allocating the ref. ``new_ref`` first
stores its operand into the allocation; ``empty_ref`` leaves it uninitialized (it reads the
allocation's fill value; upstream's ``lax.empty`` is unspecified too). The body's operands are
the outer values the rest of the block reads; the block's outputs the body computes are the
``run_scoped``'s results. ``freeze`` reads the whole ref and ends its life, ``free_ref`` only
ends it: a later use of the ref is an error (upstream's discharge fails on one).
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.interop.importer.avals import type_of
from minipallas.interop.importer.engine import ImportScope, rule, scoped_rule
from minipallas.interop.importer.params import READ, NoEffect
from minipallas.ir.core import Value
from minipallas.ir.indexing import full
from minipallas.ir.types import RefType
from minipallas.lowering.compat.jax_private import core as jax_core


@scoped_rule(
    "new_ref",
    params={
        "memory_space": READ,  # through the ref's type, as empty_ref's ty
        "kind": NoEffect("how jax differentiates through the ref"),
    },
)
@scoped_rule("empty_ref", params={"ty": READ, "memory_space": READ})
def allocate(
    scope: ImportScope,
    eqn: jax_core.JaxprEqn,
    rest: Sequence[jax_core.JaxprEqn],
    outvars: Sequence[jax_core.Atom],
) -> list[Value]:
    """A ``run_scoped`` allocating the new ref, whose body imports ``rest``."""
    (ref_var,) = eqn.outvars
    alloc = Value(type_of(ref_var.aval, f"the ref made by '{eqn.primitive.name}'"))
    init = [scope.read(a) for a in eqn.invars]  # new_ref's initial value; none for empty_ref
    is_var = jax_core.Var.__instancecheck__
    live = list(dict.fromkeys(v for e in rest for v in e.invars if is_var(v) and v in scope.env))
    made = list(dict.fromkeys(v for v in outvars if is_var(v) and v not in scope.env))
    operands = [*init, *(scope.env[v] for v in live)]
    params = [Value(x.type) for x in operands]

    inner = scope.child()
    inner.used, inner.ended = scope.used, dict(scope.ended)
    for var, outer, param in zip(live, operands[len(init) :], params[len(init) :], strict=True):
        inner.bind(var, param)
        if outer in scope.nonnegative:
            inner.nonnegative.add(param)
    if init:
        inner.emit("swap", [alloc, params[0]], indexer=full(alloc.type.shape))
    inner.bind(ref_var, alloc)
    results = inner.run_eqns(rest, made)
    if any(isinstance(value.type, RefType) for value in results):
        raise scope.error(
            "the ref made here is returned from the block that makes it; a ref made inside a "
            "program lives until the end of that block",
            fix="return the ref's value, jax.freeze(ref), instead of the ref",
        )

    body = inner.builder.block([alloc, *params], results)
    op = scope.emit_op("run_scoped", operands, [body], collective_axes=())
    values = dict(zip(made, op.results, strict=True))
    return [values[v] if v in values else scope.read(v) for v in outvars]


def _end(scope: ImportScope, var: jax_core.Atom) -> None:
    """Ends the life of the ref ``var``: a later use is an error naming this equation."""
    scope.env.pop(var, None)  # type: ignore[call-overload]
    scope.ended[var] = f"'{scope.primitive}' at {scope.loc}"  # type: ignore[index]


@rule("freeze", params={})
def freeze(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    """The ref's whole value; the ref is not used again."""
    (ref_atom,) = eqn.invars
    ref = scope.read(ref_atom)
    value = scope.emit("get", [ref], indexer=full(ref.type.shape))
    _end(scope, ref_atom)
    return [value]


@rule("free_ref", params={})
def free_ref(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    """Nothing to compute: the ref is not used again."""
    (ref_atom,) = eqn.invars
    scope.read(ref_atom)
    _end(scope, ref_atom)
    return []
