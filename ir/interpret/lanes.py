"""Rules for upstream's TPU vector primitives: ``roll`` (``pltpu.roll``), as upstream's
interpret mode computes it (``jnp.roll`` with the shift taken modulo the dim's size)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

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
