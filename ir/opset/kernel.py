"""Kernel context: which grid point the current program instance is, and how many there are."""

from __future__ import annotations

from minipallas.ir.opdef import Attrs, Regions, Types, declare, require
from minipallas.ir.syntax import IntAttr
from minipallas.ir.types import ArrayType


def _axis_rule(types: Types, attrs: Attrs) -> Types:
    require(not types, "takes no operands")
    axis = attrs.get("axis")
    require(
        isinstance(axis, int) and not isinstance(axis, bool) and axis >= 0,
        f"attribute 'axis' must be a non-negative int, got {axis!r}",
    )
    return (ArrayType((), "int32"),)


@declare("program_id", operands=(), syntax=IntAttr("axis"), pure=False)
def program_id(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """This instance's index along a grid axis: ``%i = program_id axis 0 : i32[]``."""
    return _axis_rule(types, attrs)


@declare("num_programs", operands=(), syntax=IntAttr("axis"), pure=False)
def num_programs(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """The grid's size along an axis: ``%n = num_programs axis 0 : i32[]``."""
    return _axis_rule(types, attrs)
