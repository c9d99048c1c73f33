"""Import rules for the structural ``lax`` primitives real ``jnp`` programs use.

One minipallas op each: ``rev`` (``jnp.flip``) as ``reverse``; ``pad`` (``jnp.pad`` with a
constant, ``lax.pad``) as ``pad``; ``cumsum`` / ``cumprod`` / ``cummax`` / ``cummin`` /
``cumlogsumexp`` as the op of the same name; ``reduce_prod`` (``jnp.prod``); ``argmax`` /
``argmin``; ``sort`` (``jnp.sort``, ``jnp.argsort``; always stable, which an unstable sort may
also give); ``top_k`` (its axis moved last and back, as upstream's lowering does).

Compositions of existing ops: ``stack`` (each operand given a size-1 axis, then written into
the result as ``concatenate`` is), ``split`` (static slices), ``unstack`` (static slices that
drop the axis). ``jnp.roll`` is already slices and a ``concatenate`` in the jaxpr.
``tile`` (``jnp.tile``) is upstream's lowering: a ``broadcast_in_dim`` that puts a size-``rep``
dim before each dim, then a ``reshape`` merging each pair.
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.interop.importer.avals import dtype_of, type_of
from minipallas.interop.importer.engine import ImportScope, rule
from minipallas.interop.importer.params import READ, NoEffect
from minipallas.ir.core import Value
from minipallas.ir.indexing import Int, Slice, along
from minipallas.lowering.compat.jax_private import core as jax_core


@rule("rev", params={"dimensions": READ})
def rev(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    x = scope.read(eqn.invars[0])
    dims = tuple(int(d) for d in eqn.params["dimensions"])
    return [scope.emit("reverse", [x], dims=dims) if dims else x]


@rule("pad", params={"padding_config": READ})
def pad(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    x, value = (scope.read(a) for a in eqn.invars)
    config = [tuple(int(n) for n in dim) for dim in eqn.params["padding_config"]]
    low, high, interior = (tuple(c[j] for c in config) for j in range(3))
    return [scope.emit("pad", [x, value], low=low, high=high, interior=interior)]


@rule(
    "cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp", params={"axis": READ, "reverse": READ}
)
def cumulative(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    x = scope.read(eqn.invars[0])
    axis, reverse = int(eqn.params["axis"]), bool(eqn.params["reverse"])
    return [scope.emit(eqn.primitive.name, [x], axis=axis, reverse=reverse)]


@rule("reduce_prod", params={"axes": READ})
def reduce_prod(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    x = scope.read(eqn.invars[0])
    axes = tuple(int(a) for a in eqn.params["axes"])
    return [scope.emit("reduce_prod", [x], axes=axes) if axes else x]


@rule("argmax", "argmin", params={"axes": READ, "index_dtype": READ})
def argmax(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    x = scope.read(eqn.invars[0])
    (axis,) = eqn.params["axes"]
    dtype = dtype_of(eqn.params["index_dtype"], f"the index of {eqn.primitive.name}")
    return [scope.emit(eqn.primitive.name, [x], axis=int(axis), dtype=dtype)]


@rule(
    "sort",
    params={
        "dimension": READ,
        "num_keys": READ,
        "is_stable": NoEffect(
            "a stable sort gives one of the orders an unstable one may give (equal keys "
            "keep their order)"
        ),
    },
)
def sort(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    xs = [scope.read(a) for a in eqn.invars]
    op = scope.emit_op(
        "sort", xs, dimension=int(eqn.params["dimension"]), num_keys=int(eqn.params["num_keys"])
    )
    return list(op.results)


@rule("top_k", params={"k": READ, "axis": READ})
def top_k(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    x = scope.read(eqn.invars[0])
    last, axis = x.type.ndim - 1, int(eqn.params.get("axis", x.type.ndim - 1))
    perm = list(range(x.type.ndim))
    perm[axis], perm[last] = last, axis
    if axis != last:
        x = scope.emit("transpose", [x], permutation=tuple(perm))
    op = scope.emit_op("top_k", [x], k=int(eqn.params["k"]))
    if axis == last:
        return list(op.results)
    return [scope.emit("transpose", [r], permutation=tuple(perm)) for r in op.results]


@rule("tile", params={"reps": READ})
def tile(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    x = scope.read(eqn.invars[0])
    reps = tuple(int(r) for r in eqn.params["reps"])
    shape = x.type.shape
    pairs = tuple(k for r, n in zip(reps, shape, strict=True) for k in (r, n))
    spread = scope.emit(
        "broadcast_in_dim", [x], shape=pairs, dims=tuple(range(1, 2 * len(shape), 2))
    )
    tiled = tuple(r * n for r, n in zip(reps, shape, strict=True))
    return [scope.emit("reshape", [spread], shape=tiled)]


@rule("stack", params={"axis": READ})
def stack(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    out = type_of(eqn.outvars[0].aval)
    axis = int(eqn.params["axis"])
    result = scope.constant(0, out.dtype, out.shape)
    for k, atom in enumerate(eqn.invars):
        part = scope.read(atom)
        shape = (*part.type.shape[:axis], 1, *part.type.shape[axis:])
        part = scope.emit("reshape", [part], shape=shape)
        indexer = tuple(Slice(k if d == axis else 0, n, 1) for d, n in enumerate(shape))
        result = scope.emit("dynamic_update_slice", [result, part], indexer=indexer)
    return [result]


@rule("split", params={"sizes": READ, "axis": READ})
def split(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    x = scope.read(eqn.invars[0])
    axis, start, parts = int(eqn.params["axis"]), 0, []
    for size in (int(s) for s in eqn.params["sizes"]):
        indexer = along(x.type.shape, axis, Slice(start, size, 1))
        parts.append(x if size == x.type.shape[axis] else scope.emit("slice", [x], indexer=indexer))
        start += size
    return parts


@rule("unstack", params={"axis": READ})
def unstack(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    x = scope.read(eqn.invars[0])
    axis = int(eqn.params["axis"])
    return [
        scope.emit("slice", [x], indexer=along(x.type.shape, axis, Int(k)))
        for k in range(x.type.shape[axis])
    ]
