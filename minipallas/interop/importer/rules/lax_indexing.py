"""Import rules for ``lax``'s indexing primitives: ``slice``, ``dynamic_slice``,
``dynamic_update_slice``, ``concatenate``, and ``gather`` / ``scatter`` / ``scatter-add`` in
the forms jnp indexing produces.

- ``slice`` is a static ``slice`` (of a PRNG key array, the trailing dims of its key data,
  which the params do not name, stay whole: ``jax.random.split``'s keys unpacked);
  ``dynamic_slice`` / ``dynamic_update_slice`` keep XLA's clamping, which minipallas's ops
  share (the negative-index wrap jnp adds is already ops in the jaxpr). Literal starts are
  clamped at import and become static.
- ``concatenate`` writes each operand into a zero array with static ``dynamic_update_slice``s.
- ``gather`` and ``scatter`` (without batching dimensions) become a minipallas ``gather`` /
  ``scatter`` / ``scatter_add`` whose every dimension is an index array over the result (the
  updates): each window's start is read from the index vector, clamped as XLA clamps it
  (gathers, and scatters in ``clip`` mode), and a window lane adds its offset. A gather in
  ``fill`` mode then puts the fill value where a start was out of range; a scatter drops a
  window whose start is out of range (XLA's rule) by sending it past the array's end.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from minipallas.interop.importer.avals import type_of
from minipallas.interop.importer.engine import ImportScope, rule
from minipallas.interop.importer.indexers import static_int
from minipallas.interop.importer.params import READ, NoEffect, Only
from minipallas.ir import dtypes
from minipallas.ir.core import Value
from minipallas.ir.indexing import Array, Dyn, Int, Slice
from minipallas.ir.types import ArrayType
from minipallas.lowering.compat.jax_private import core as jax_core
from minipallas.lowering.compat.jax_private import lax_slicing


@rule("slice", params={"start_indices": READ, "limit_indices": READ, "strides": READ})
def slice_(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    x = scope.read(eqn.invars[0])
    p = eqn.params
    strides = p.get("strides") or (1,) * len(p["start_indices"])
    entries = tuple(
        Slice(s, max(0, -(-(limit - s) // st)), st)
        for s, limit, st in zip(p["start_indices"], p["limit_indices"], strides, strict=True)
    )
    entries += tuple(Slice(0, d, 1) for d in x.type.shape[len(entries) :])  # key data
    if all(e == Slice(0, d, 1) for e, d in zip(entries, x.type.shape, strict=True)):
        return [x]
    return [scope.emit("slice", [x], indexer=entries)]


def _starts(
    scope: ImportScope, atoms: Sequence, shape: Sequence[int], sizes: Sequence[int]
) -> tuple:
    """XLA's clamped window starts: literal ones folded, the others ``Dyn`` operands."""
    entries, dyn = [], []
    for atom, dim, size in zip(atoms, shape, sizes, strict=True):
        s = static_int(atom)
        if s is None:
            dyn.append(scope.read(atom))
            entries.append(Slice(Dyn(len(dyn) - 1), size, 1))
        else:
            entries.append(Slice(min(max(s, 0), dim - size), size, 1))
    return tuple(entries), dyn


@rule("dynamic_slice", params={"slice_sizes": READ})
def dynamic_slice(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    x = scope.read(eqn.invars[0])
    sizes = tuple(eqn.params["slice_sizes"])
    indexer, dyn = _starts(scope, eqn.invars[1:], x.type.shape, sizes)
    return [scope.emit("dynamic_slice" if dyn else "slice", [x, *dyn], indexer=indexer)]


@rule("dynamic_update_slice", params={})
def dynamic_update_slice(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    x, update = scope.read(eqn.invars[0]), scope.read(eqn.invars[1])
    indexer, dyn = _starts(scope, eqn.invars[2:], x.type.shape, update.type.shape)
    return [scope.emit("dynamic_update_slice", [x, *dyn, update], indexer=indexer)]


@rule("concatenate", params={"dimension": READ})
def concatenate(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    parts = [scope.read(a) for a in eqn.invars]
    if len(parts) == 1:
        return parts
    out = type_of(eqn.outvars[0].aval)
    axis = int(eqn.params["dimension"])
    result = scope.constant(0, out.dtype, out.shape)
    offset = 0
    for part in parts:
        indexer = tuple(
            Slice(offset if d == axis else 0, n, 1) for d, n in enumerate(part.type.shape)
        )
        result = scope.emit("dynamic_update_slice", [result, part], indexer=indexer)
        offset += part.type.shape[axis]
    return [result]


# --- gather and scatter ----------------------------------------------------------------------


def _mode(eqn: jax_core.JaxprEqn) -> lax_slicing.GatherScatterMode:
    return lax_slicing.GatherScatterMode.from_any(eqn.params.get("mode"))


def _column(scope: ImportScope, indices: Value, j: int) -> Value:
    """``indices[..., j]`` as int32."""
    batch = indices.type.shape[:-1]
    if indices.type.shape[-1] == 1:
        column = scope.emit("reshape", [indices], shape=batch)
    else:
        indexer = (*(Slice(0, d, 1) for d in batch), Int(j))
        column = scope.emit("slice", [indices], indexer=indexer)
    return scope.convert(column, "int32")


def _spread(scope: ImportScope, x: Value, shape: tuple[int, ...], axes: Sequence[int]) -> Value:
    """``x`` (one value per index vector) broadcast over the result, along ``axes``."""
    if x.type.shape == shape:
        return x
    return scope.emit("broadcast_in_dim", [x], shape=shape, dims=tuple(axes))


def _int32(scope: ImportScope, value: int, shape: tuple[int, ...]) -> Value:
    return scope.constant(value, "int32", shape)


def _window_positions(
    scope: ImportScope,
    operand: ArrayType,
    indices: Value,
    out_shape: tuple[int, ...],
    window_axes: Sequence[int],
    collapsed: Sequence[int],
    index_map: Sequence[int],
    sizes: Sequence[int],
    clamp: bool,
    check: bool,
) -> tuple[list[Value], Value | None]:
    """Positions (int32, shape ``out_shape``) of each result element in ``operand`` and, with
    ``check``, the bool array of elements whose window start is in range (None: all are)."""
    batch_axes = [a for a in range(len(out_shape)) if a not in window_axes]
    window_dims = [d for d in range(operand.ndim) if d not in collapsed]
    positions, valid = [], None
    for d, dim in enumerate(operand.shape):
        size = sizes[d]
        if d in index_map:
            start = _column(scope, indices, index_map.index(d))
            batch = start.type.shape
            low, high = _int32(scope, 0, batch), _int32(scope, dim - size, batch)
            if check:
                at_least = scope.emit("ge", [start, low])
                in_range = scope.emit("and", [at_least, scope.emit("le", [start, high])])
                valid = in_range if valid is None else scope.emit("and", [valid, in_range])
            if clamp:
                start = scope.emit("min", [scope.emit("max", [start, low]), high])
            start = _spread(scope, start, out_shape, batch_axes)
        else:
            start = _int32(scope, 0, out_shape)
        if d in window_dims:
            axis = window_axes[window_dims.index(d)]
            lane = scope.emit("iota", [], type=ArrayType(out_shape, "int32"), dimension=axis)
            start = scope.emit("add", [lane, start])
        positions.append(start)
    if valid is not None:
        valid = _spread(scope, valid, out_shape, batch_axes)
    return positions, valid


def _check_plain(scope: ImportScope, numbers: object) -> None:
    batching = ("operand_batching_dims", "start_indices_batching_dims")
    batching += ("scatter_indices_batching_dims",)
    if any(getattr(numbers, name, ()) for name in batching):
        raise scope.error("gather/scatter with batching dimensions cannot be imported")


def _fill(dtype: str, given: object) -> object:
    if given is not None:
        return given
    if dtypes.is_float(dtype):
        return np.nan
    if dtype == "bool":
        return True
    info = np.iinfo(dtypes.to_numpy(dtype))
    return info.min if dtypes.is_signed(dtype) else info.max


def _check_adds(scope: ImportScope, jaxpr: object, consts: object) -> None:
    """A ``scatter-add``'s combination is its operands' sum (jax's ``lax.scatter_add`` always
    binds that); refused if it is anything else."""
    eqns = getattr(jaxpr, "eqns", None)
    adds = (
        eqns is not None
        and not consts
        and len(eqns) == 1
        and eqns[0].primitive.name == "add"
        and list(eqns[0].invars) == list(jaxpr.invars)
        and list(jaxpr.outvars) == list(eqns[0].outvars)
    )
    if not adds:
        raise scope.error(
            f"a scatter-add whose update is not a sum cannot be imported: {jaxpr}",
            fix="scatter with x.at[i].add(y)",
        )


# Promises about the indices that let XLA pick a faster kernel; the import computes the
# result for any indices, one of those XLA may give when a promise is broken.
_PROMISE = NoEffect("a promise about the indices; the import holds for any indices")
_INDICES = {"indices_are_sorted": _PROMISE, "unique_indices": _PROMISE}


@rule(
    "gather",
    params={
        "dimension_numbers": READ,
        "slice_sizes": READ,
        "mode": READ,
        "fill_value": READ,
        **_INDICES,
    },
)
def gather(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    x, indices = scope.read(eqn.invars[0]), scope.read(eqn.invars[1])
    numbers = eqn.params["dimension_numbers"]
    _check_plain(scope, numbers)
    out = type_of(eqn.outvars[0].aval)
    positions, valid = _window_positions(
        scope,
        x.type,
        indices,
        out.shape,
        tuple(numbers.offset_dims),
        tuple(numbers.collapsed_slice_dims),
        tuple(numbers.start_index_map),
        tuple(eqn.params["slice_sizes"]),
        clamp=True,
        check=_mode(eqn) == lax_slicing.GatherScatterMode.FILL_OR_DROP,
    )
    indexer = tuple(Array(Dyn(k)) for k in range(len(positions)))
    result = scope.emit("gather", [x, *positions], indexer=indexer)
    if valid is not None:
        fill = scope.constant(_fill(out.dtype, eqn.params.get("fill_value")), out.dtype, out.shape)
        result = scope.emit("select", [valid, result, fill])
    return [result]


_SCATTER = {"dimension_numbers": READ, "mode": READ, **_INDICES}


@rule(
    "scatter",
    params={
        **_SCATTER,
        # lax.scatter_apply binds scatter with the function it applies: not a plain scatter
        "update_jaxpr": Only(None, fix="write the updated values with x.at[i].set(f(x[i]))"),
        "update_consts": Only((), fix="write the updated values with x.at[i].set(f(x[i]))"),
    },
)
@rule("scatter-add", params={**_SCATTER, "update_jaxpr": READ, "update_consts": READ})
def scatter(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    x, indices, updates = (scope.read(a) for a in eqn.invars)
    numbers = eqn.params["dimension_numbers"]
    _check_plain(scope, numbers)
    if eqn.primitive.name == "scatter-add":
        _check_adds(scope, eqn.params["update_jaxpr"], eqn.params["update_consts"])
    if x.type.ndim == 0:
        raise scope.error("a scatter into a scalar cannot be imported")
    window_axes = tuple(numbers.update_window_dims)
    inserted = tuple(numbers.inserted_window_dims)
    window_dims = [d for d in range(x.type.ndim) if d not in inserted]
    sizes = [1] * x.type.ndim
    for d, axis in zip(window_dims, window_axes, strict=True):
        sizes[d] = updates.type.shape[axis]
    clip = _mode(eqn) == lax_slicing.GatherScatterMode.CLIP
    positions, valid = _window_positions(
        scope,
        x.type,
        indices,
        updates.type.shape,
        window_axes,
        inserted,
        tuple(numbers.scatter_dims_to_operand_dims),
        sizes,
        clamp=clip,
        check=not clip,
    )
    if valid is not None:
        past_end = _int32(scope, x.type.shape[0], updates.type.shape)
        positions[0] = scope.emit("select", [valid, positions[0], past_end])
    name = "scatter_add" if eqn.primitive.name == "scatter-add" else "scatter"
    indexer = tuple(Array(Dyn(k)) for k in range(len(positions)))
    return [scope.emit(name, [x, *positions, updates], indexer=indexer)]
