"""``axis_index`` and ``barrier``: what programs that run together ask of each other (issue 15).

``minipallas.axis_index("x")`` is ``lax.axis_index``: the program's index along the grid axis
named ``"x"`` (``pallas_call(..., grid_names=("x", ...))``). ``minipallas.barrier("x")`` waits
until every program along ``"x"`` has arrived. Both run under ``collectives="simulate"``
(``ir.interpret.programs``); see ``ir.opset.collective``.
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.frontend.scopes import emit, mark_nonnegative, trace_error
from minipallas.frontend.values import TracedArray


def axis_index(name: str) -> TracedArray:
    """This program's index along the grid axis called ``name`` (an int32 scalar)."""
    if not isinstance(name, str) or not name:
        raise trace_error(
            f"axis_index takes an axis name (a str), got {name!r}",
            fix="name the grid axes: pallas_call(..., grid_names=('x', ...))",
        )
    (result,) = emit(TracedArray, "axis_index", [], {"name": name})
    mark_nonnegative(result)
    return result


def barrier(axes: str | Sequence[str]) -> None:
    """Wait until every program along ``axes`` (grid axis names) has arrived here."""
    names = (axes,) if isinstance(axes, str) else tuple(axes)
    if not names or not all(isinstance(a, str) and a for a in names):
        raise trace_error(
            f"barrier takes grid axis names, got {axes!r}",
            fix="minipallas.barrier('x') or minipallas.barrier(('x', 'y'))",
        )
    emit(TracedArray, "barrier", [], {"axes": names})
