"""``to_jax`` rules for the TPU vector ops and ``platform_index`` (their import:
``importer/rules/lanes.py``).

``roll`` is computed as upstream's interpret mode lowers it (``jnp.roll`` per slice of
``stride_axis``); ``packed_bitcast`` is ``repack``; ``platform_index`` binds upstream's
primitive again, so JAX picks the branch for the platform it lowers to.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
from jax import lax

from minipallas.interop.exporter.engine import rule
from minipallas.ir import dtypes
from minipallas.ir.core import Op
from minipallas.lowering.compat.jax_private import lax_control_flow


@rule("roll")
def roll_to_jax(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    x, shift = args
    axis = op.attrs["axis"]
    if not op.attrs["stride"]:
        return [jnp.roll(x, shift, axis)]
    stride, stride_axis = op.attrs["stride"]
    pieces = jnp.split(x, x.shape[stride_axis], stride_axis)
    rolled = [jnp.roll(p, shift + i * stride, axis) for i, p in enumerate(pieces)]
    return [jnp.concatenate(rolled, stride_axis)]


@rule("platform_index")
def platform_index_to_jax(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    return [lax_control_flow.platform_index_p.bind(platforms=op.attrs["platforms"])]


@rule("packed_bitcast")
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
