"""Ops of programs that run together: ``axis_index`` and ``barrier`` (issue 15).

A kernel's grid axes may be named (``pallas_call(..., grid_names=("x",))``). Programs that
differ only along some named axes can share scratch (``run_scoped(..., collective_axes=...)``)
and meet at a ``barrier`` over those axes. Only the multi-program interpreter
(``ir.interpret.programs``, ``collectives="simulate"``) runs them; every other path rejects a
collective ``run_scoped`` with upstream's messages (``ir.collectives``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from minipallas.ir.opdef import Attrs, Regions, Types, declare, require
from minipallas.ir.syntax import Parsed, Pieces
from minipallas.ir.types import ArrayType

if TYPE_CHECKING:
    from minipallas.ir.core import Op
    from minipallas.ir.parser import Parser
    from minipallas.ir.printer import Printer


def _names(value: object, what: str) -> None:
    require(
        isinstance(value, tuple) and bool(value) and all(isinstance(a, str) for a in value),
        f"{what} must be a non-empty tuple of axis names, got {value!r}",
    )


class AxisNames:
    """``keyword ("x", "y")``: a tuple of axis names, no operands."""

    def __init__(self, keyword: str, single: bool = False) -> None:
        self.keyword = keyword
        self.single = single

    def print(self, p: Printer, op: Op) -> Pieces:
        value = op.attrs.get(self.keyword)
        names = (value,) if self.single else value
        return [f" ({', '.join(json.dumps(a) for a in names)})"]

    def parse(self, r: Parser) -> Parsed:
        names = r.string_tuple("after the op name")
        value = names[0] if self.single and len(names) == 1 else names
        return Parsed([], {self.keyword: value})


@declare("axis_index", operands=(), syntax=AxisNames("name", single=True), pure=False)
def axis_index(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """This program's index along a named grid axis: ``%i = axis_index ("x") : i32[]``
    (``lax.axis_index``; in a kernel, ``program_id`` of the axis with that name)."""
    require(not types, "takes no operands")
    name = attrs.get("name")
    require(isinstance(name, str) and bool(name), f"'name' must be an axis name, got {name!r}")
    return (ArrayType((), "int32"),)


@declare("barrier", operands=(), syntax=AxisNames("axes"), pure=False, observable=True)
def barrier(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """Wait until every program along the named axes has arrived: ``barrier ("x")``.

    Programs that differ only along ``axes`` form one group; all of a group's programs must
    reach the same barriers in the same order (a barrier some never reach is a deadlock)."""
    require(not types, "takes no operands")
    _names(attrs.get("axes"), "'axes'")
    return ()
