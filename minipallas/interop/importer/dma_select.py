"""Async copies over ``pl.select_ref``: one of several refs, picked by a run-time index, as a
copy's source, destination or semaphore (``pltpu.async_copy(pl.select_ref(i, a, b), ...)``).

minipallas's refs are values of the program, one per name, so a ref picked at run time has no
value of its own. Upstream's Mosaic lowering turns a select into nested ``scf.if``s, one copy
per option: ``i == 0`` takes the first, else ``i - 1 == 0`` the second, ..., and any other
index the last (its interpret modes have no rule for it). The import does the same with one
``cond`` per select: branch ``k`` holds the copy with option ``k``; an index at or past the last
option, or negative, takes the last (``cond`` clamps at the top; a negative index is sent to
the last branch first). Several selects in one copy nest, one ``cond`` inside another.

Each branch is a closed region: it takes every variable the equation reads (the refs of every
option, the indices, the device id) as parameters and imports the copy over them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from minipallas.interop.importer.engine import ImportScope
from minipallas.ir.core import Value
from minipallas.lowering.compat.jax_private import core as jax_core
from minipallas.lowering.compat.jax_private import state_types

Emit = Callable[[ImportScope, tuple], None]  # imports the copy over leaves with no select


def with_selects(scope: ImportScope, eqn: jax_core.JaxprEqn, leaves: Sequence, emit: Emit) -> None:
    """``emit(scope, leaves)`` with each select in ``leaves`` resolved by a ``cond`` (module
    doc); without a select, just ``emit``."""
    k = next((i for i, leaf in enumerate(leaves) if _is_select(leaf)), None)
    if k is None:
        emit(scope, tuple(leaves))
        return
    select = leaves[k]
    options = tuple(select.ref)
    index = _branch(scope, select.transforms[0].idx, len(options))
    atoms = list(dict.fromkeys(a for a in eqn.invars if isinstance(a, jax_core.Var)))
    values = [scope.read(a) for a in atoms]
    regions = []
    for option in options:
        inner = scope.child()
        params = [Value(v.type) for v in values]
        for atom, param in zip(atoms, params, strict=True):
            inner.bind(atom, param)
        with_selects(inner, eqn, [*leaves[:k], option, *leaves[k + 1 :]], emit)
        regions.append(inner.builder.block(params, []))
    scope.emit_op("cond", [index, *values], regions)


def _is_select(leaf: object) -> bool:
    transforms = getattr(leaf, "transforms", ())
    return bool(transforms) and isinstance(transforms[0], state_types.SelectTransform)


def _branch(scope: ImportScope, idx: jax_core.Atom, n: int) -> Value:
    """The branch Mosaic's nested ifs take for ``idx``: ``idx`` when in ``0..n-2``, else the
    last (``cond`` clamps the top; a negative index is sent there here)."""
    i = scope.convert(scope.read(idx), "int32")
    negative = scope.emit("lt", [i, scope.constant(0, "int32")])
    return scope.emit("select", [negative, scope.constant(n - 1, "int32"), i])
