"""Rules for ``axis_index`` and ``barrier``: programs that run together (``programs``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from minipallas.ir.core import Op
from minipallas.ir.interpret.engine import Interpreter, rule

_SIMULATE = (
    "run every program together: minipallas.interpret(fn, ..., grid=..., grid_names=..., "
    "collectives='simulate'), or pallas_call(..., grid_names=..., collectives='simulate')"
)


@rule("axis_index")
def axis_index(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    name = op.attrs["name"]
    names = interp.grid_names
    if names is None or interp.program_ids is None:
        raise interp.error(
            op,
            f"asks for axis {name!r}, but no grid_names were given",
            fix=f"name the grid axes: {_SIMULATE}",
        )
    if name not in names:
        raise interp.error(
            op,
            f"asks for axis {name!r}, but the grid's axes are {names}",
            fix="use one of grid_names",
        )
    return (np.int32(interp.program_ids[names.index(name)]),)


@rule("barrier")
def barrier(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    if interp.together is None:
        raise interp.error(
            op, "a barrier needs the other programs of its group running", fix=_SIMULATE
        )
    interp.together.barrier(interp, op)
    return ()
