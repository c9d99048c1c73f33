"""``axis_index`` and ``barrier``: what programs that run together ask of each other (issue 15).

``minipallas.axis_index("x")`` is ``lax.axis_index``: the program's index along the grid axis
named ``"x"`` (``pallas_call(..., grid_names=("x", ...))``). ``minipallas.barrier("x")`` waits
until every program along ``"x"`` has arrived. Both run under ``collectives="simulate"``
(``ir.interpret.programs``); see ``ir.opset.collective``.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Sequence

from minipallas.frontend.control import program_id
from minipallas.frontend.scopes import emit, mark_nonnegative, trace_error
from minipallas.frontend.values import TracedArray

# the names of the grid axes of the kernel being traced (pallas_call's grid_names), if any
_GRID_NAMES: contextvars.ContextVar[tuple[str, ...] | None] = contextvars.ContextVar(
    "grid_names", default=None
)


@contextlib.contextmanager
def named_grid(names: tuple[str, ...] | None) -> Iterator[None]:
    """While a kernel body is traced: ``axis_index(name)`` is ``program_id`` of that axis, so
    every backend that knows ``program_id`` runs it."""
    token = _GRID_NAMES.set(names)
    try:
        yield
    finally:
        _GRID_NAMES.reset(token)


def axis_index(name: str) -> TracedArray:
    """This program's index along the grid axis called ``name`` (an int32 scalar)."""
    if not isinstance(name, str) or not name:
        raise trace_error(
            f"axis_index takes an axis name (a str), got {name!r}",
            fix="name the grid axes: pallas_call(..., grid_names=('x', ...))",
        )
    names = _GRID_NAMES.get()
    if names is not None:
        if name not in names:
            raise trace_error(
                f"axis_index({name!r}): the grid's axes are named {names}",
                fix="use one of pallas_call's grid_names",
            )
        return program_id(names.index(name))
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
