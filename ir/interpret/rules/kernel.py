"""Rules for the kernel context: ``program_id`` and ``num_programs``.

The interpreter runs one program instance; which one, and the grid it belongs to, come from
``interpret(..., program_ids=..., grid=...)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from minipallas.ir.core import Op
from minipallas.ir.interpret.engine import Interpreter, rule


def _axis_value(interp: Interpreter, op: Op, given: tuple[int, ...] | None, option: str) -> tuple:
    axis = op.attrs["axis"]
    if given is None:
        raise interp.error(
            op,
            f"asks for axis {axis}, but no {option} were given",
            fix=f"pass {option}=(...) to minipallas.interpret, one int per grid axis",
        )
    if axis >= len(given):
        raise interp.error(
            op,
            f"asks for axis {axis}, but {option}={given} has {len(given)} axes",
            fix=f"give {option} at least {axis + 1} entries",
        )
    return (np.int32(given[axis]),)


@rule("program_id")
def program_id(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    return _axis_value(interp, op, interp.program_ids, "program_ids")


@rule("num_programs")
def num_programs(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    return _axis_value(interp, op, interp.grid, "grid")
