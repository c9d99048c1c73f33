"""Rules for the pure windowed ops discharge produces: slices, gathers and their updates.

They share ``windows`` with the state ops, so a discharged program clamps, drops and resolves
duplicates exactly as the stateful one did: reads (``slice``, ``dynamic_slice``, ``gather``)
return the window; writes (``dynamic_update_slice``, ``scatter``, ``scatter_add``) return a
copy of the array with the window replaced or added into.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from minipallas.ir.core import Op
from minipallas.ir.interpret.engine import Interpreter, rule
from minipallas.ir.interpret.windows import Access, accumulate, locate, read, write
from minipallas.ir.interpret.xla import numerics


def _window(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple[np.ndarray, Access]:
    x = np.asarray(args[0])
    return x, locate(interp, op, op.attrs["indexer"], x.shape, args[op.slices()["indices"]])


@rule("slice", "dynamic_slice", "gather")
def read_window(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    x, access = _window(interp, op, args)
    return (read(x, access),)


@rule("dynamic_update_slice", "scatter")
def write_window(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    x, access = _window(interp, op, args)
    out = x.copy()
    write(out, access, args[-1])
    return (out,)


@rule("scatter_add")
def add_window(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    x, access = _window(interp, op, args)
    out = x.copy()
    dtype = op.operands[0].type.dtype
    accumulate(out, access, args[-1], lambda old, new: numerics.add(old, new, dtype))
    return (out,)
