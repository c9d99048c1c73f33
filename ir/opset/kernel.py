"""Kernel context: which grid point the current program instance is, and how many there are."""

from __future__ import annotations

from minipallas.ir.opdef import declare, require
from minipallas.ir.types import ArrayType


def _axis_rule(types, attrs) -> tuple:
    require(not types, "takes no operands")
    axis = attrs.get("axis")
    require(isinstance(axis, int) and not isinstance(axis, bool) and axis >= 0,
            f"attribute 'axis' must be a non-negative int, got {axis!r}")
    return (ArrayType((), "int32"),)


@declare("program_id", pure=False)
def program_id(types, attrs, regions):
    """This instance's index along a grid axis: ``%i = program_id axis 0 : i32[]``."""
    return _axis_rule(types, attrs)


@declare("num_programs", pure=False)
def num_programs(types, attrs, regions):
    """The grid's size along an axis: ``%n = num_programs axis 0 : i32[]``."""
    return _axis_rule(types, attrs)
