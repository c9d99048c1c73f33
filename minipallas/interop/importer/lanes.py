"""Import and ``to_jax`` rules for upstream's TPU vector primitives (``pltpu.roll``,
``pltpu.bitcast`` as ``packed_bitcast``) and for
``platform_index`` (``lax.platform_dependent``, which ``jnp.diagonal`` uses).

``roll``'s shift becomes an i32 scalar operand (a Python int in the jaxpr is a literal);
``to_jax`` computes it as upstream's interpret mode lowers it (``jnp.roll`` per slice of
``stride_axis``). ``platform_index`` keeps its branches' platforms: each lowering picks the
branch for its platform; ``to_jax`` binds upstream's primitive again, so JAX picks it for the
platform it lowers to.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
from jax import lax

from minipallas.interop.importer import ImportScope, dtype_of
from minipallas.interop.importer import rule as import_rule
from minipallas.interop.to_jax import rule as to_jax_rule
from minipallas.ir import dtypes
from minipallas.ir.core import Op, Value
from minipallas.lowering.jax_private import core as jax_core
from minipallas.lowering.jax_private import lax_control_flow


@import_rule("roll")
def roll(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    x, shift = (scope.read(a) for a in eqn.invars)
    p = eqn.params
    stride = () if p["stride"] is None else (int(p["stride"]), int(p["stride_axis"]))
    shift = scope.convert(shift, "int32")
    return [scope.emit("roll", [x, shift], axis=int(p["axis"]), stride=stride)]


@to_jax_rule("roll")
def roll_to_jax(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    x, shift = args
    axis = op.attrs["axis"]
    if not op.attrs["stride"]:
        return [jnp.roll(x, shift, axis)]
    stride, stride_axis = op.attrs["stride"]
    pieces = jnp.split(x, x.shape[stride_axis], stride_axis)
    rolled = [jnp.roll(p, shift + i * stride, axis) for i, p in enumerate(pieces)]
    return [jnp.concatenate(rolled, stride_axis)]


@import_rule("platform_index")
def platform_index(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    platforms = tuple(None if ps is None else tuple(map(str, ps)) for ps in eqn.params["platforms"])
    index = scope.emit("platform_index", [], platforms=platforms)
    scope.nonnegative.add(index)  # a branch number: the cond that reads it needs no wrap
    return [index]


@to_jax_rule("platform_index")
def platform_index_to_jax(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    return [lax_control_flow.platform_index_p.bind(platforms=op.attrs["platforms"])]


@import_rule("bitcast")
def bitcast(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    x = scope.read(eqn.invars[0])
    dtype = dtype_of(eqn.params["ty"], "the pltpu.bitcast value")
    return [scope.emit("packed_bitcast", [x], dtype=dtype)]


@to_jax_rule("packed_bitcast")
def packed_bitcast_to_jax(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    return [repack(args[0], op.results[0].type.dtype)]


def repack(x: Any, dtype: str) -> Any:
    """``x``'s bits as ``dtype``, packed along the second-minor dim (``packed_bitcast``), in
    ``jax.lax``: ``lax.bitcast_convert_type`` with the last two dims swapped around it."""
    target = dtypes.to_numpy(dtype)
    old, new = x.dtype.itemsize, jnp.dtype(target).itemsize
    if old == new:
        return lax.bitcast_convert_type(x, target)
    *lead, m, n = x.shape
    if old > new:
        pieces = lax.bitcast_convert_type(x, target)
        return jnp.swapaxes(pieces, -1, -2).reshape(*lead, m * (old // new), n)
    rows = jnp.swapaxes(x.reshape(*lead, m // (new // old), new // old, n), -1, -2)
    return lax.bitcast_convert_type(rows, target)
