"""Rules for ``reverse`` and ``pad``: elements moved, never computed, so exact by construction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from minipallas.ir.core import Op
from minipallas.ir.interpret.engine import Interpreter, rule


@rule("reverse")
def reverse(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    return (np.flip(np.asarray(args[0]), axis=op.attrs["dims"]),)


@rule("pad")
def pad(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    """Per dim: spread the elements ``interior + 1`` apart, then add (or, negative, cut off)
    ``low`` and ``high`` elements at the ends."""
    x, value = np.asarray(args[0]), np.asarray(args[1])
    low, high, interior = op.attrs["low"], op.attrs["high"], op.attrs["interior"]
    for d in range(x.ndim):
        n, step = x.shape[d], interior[d] + 1
        shape = list(x.shape)
        shape[d] = max(n + (n - 1) * interior[d], 0)
        spread = np.full(shape, value, x.dtype)
        at = [slice(None)] * x.ndim
        at[d] = slice(None, None, step)
        spread[tuple(at)] = x
        ends = [(0, 0)] * x.ndim
        ends[d] = (max(low[d], 0), max(high[d], 0))
        padded = np.pad(spread, ends, constant_values=value)
        at[d] = slice(max(-low[d], 0), padded.shape[d] - max(-high[d], 0))
        x = padded[tuple(at)]
    return (x,)
