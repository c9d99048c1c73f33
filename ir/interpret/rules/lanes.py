"""Rules for upstream's TPU vector primitives, as upstream's interpret mode computes them:
``roll`` (``pltpu.roll``) is ``jnp.roll`` with the shift taken modulo the dim's size;
``packed_bitcast`` (``pltpu.bitcast``) is ``repack``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.core import Op
from minipallas.ir.interpret.engine import Interpreter, rule


@rule("roll")
def roll(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    """Slice ``i`` along ``stride_axis`` rolls by ``shift + i * stride``, that sum wrapping in
    int32 as upstream's traced ``shift`` does, then taken modulo the size (floor, so a negative
    shift rolls backwards)."""
    x, axis = np.asarray(args[0]), op.attrs["axis"]
    n = max(x.shape[axis], 1)
    if not op.attrs["stride"]:
        return (np.roll(x, int(args[1]) % n, axis),)
    stride, stride_axis = op.attrs["stride"]
    slices = []
    for i, piece in enumerate(np.split(x, x.shape[stride_axis], stride_axis)):
        shift = int(np.int64(int(args[1]) + i * stride).astype(np.int32))
        slices.append(np.roll(piece, shift % n, axis))
    return (np.concatenate(slices, stride_axis) if slices else x,)


def repack(x: np.ndarray, dtype: str) -> np.ndarray:
    """``x``'s bits as ``dtype``, packed along the second-minor dim: narrowing by ``r``, wide
    row ``i`` becomes narrow rows ``i * r .. i * r + r - 1``, its low piece first; widening is
    the inverse (upstream's ``state.utils.bitcast``)."""
    x, target = np.ascontiguousarray(x), dtypes.to_numpy(dtype)
    old, new = x.dtype.itemsize, np.dtype(target).itemsize
    if old == new:
        return x.view(target)
    *lead, m, n = x.shape
    if old > new:
        r = old // new
        pieces = x.view(target).reshape(*lead, m, n, r)
        return np.ascontiguousarray(np.swapaxes(pieces, -1, -2)).reshape(*lead, m * r, n)
    r = new // old
    rows = np.swapaxes(x.reshape(*lead, m // r, r, n), -1, -2)
    return np.ascontiguousarray(rows).view(target).reshape(*lead, m // r, n)


@rule("packed_bitcast")
def packed_bitcast(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    return (repack(np.asarray(args[0]), op.results[0].type.dtype),)
