"""The body of a fused grid step: the old body run once per sub-step, in order.

Sub-step ``s`` of fused step ``k`` is old step ``k * factor + s``. It gets a view of each
operand's window (the ``s``-th block of a window that moves, the whole block of one that stays
put; scratch and scalar-prefetch refs as they are) and calls a copy of the old body in which
``program_id`` of the axis reads ``program_id * factor + s`` and ``num_programs`` the old size.
Each sub-step therefore runs exactly the ops the old step ran, on the same elements, in the
same order: the results are the old ones bit for bit. When ``factor`` does not divide the axis,
the sub-steps past its old end are skipped (a ``cond`` on the old step index).

Every function made here has a name of its own, so the fused kernel's text parses back as a
module: the old body a sub-step calls is ``@NAME_substep`` (``@NAME_substepS`` for sub-step
``S``'s copy when it asks for its grid position), and a callee copied for sub-step ``S`` is
``@CALLEE_substepS``; the fused body keeps the old body's name.
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir.builder import Builder, params
from minipallas.ir.core import Function, Value
from minipallas.ir.types import Type
from minipallas.passes.kernel.grid_fusion.carried import Threading
from minipallas.passes.kernel.grid_fusion.index_maps import Motion
from minipallas.passes.kernel.grid_fusion.looped import loop_over
from minipallas.passes.kernel.grid_fusion.position import GridPosition, i32, old_index, view


def fused_body(
    body: Function,
    param_types: Sequence[Type],
    moves: Sequence[Motion],
    where: tuple[int, int, int],
    threaded: Sequence[bool] = (),
    loop: bool = False,
) -> Function:
    """The body of a step that runs ``factor`` old steps of grid ``axis`` (``where``: the axis,
    the factor, the axis's old size). ``param_types``: the new body's refs; ``moves``: how each
    one's block moves; ``threaded``: per ref, whether its value is threaded through the
    sub-steps (``carried``); ``loop``: sub-steps 1 on in a loop (``looped``)."""
    axis, factor, size = where
    b = Builder()
    refs = params(param_types)
    thread = Threading(threaded)
    same = Function(f"{body.name}_substep", body.body)  # the sub-steps that do not ask

    def substep(s: int) -> tuple[list[Value], Function]:
        views = [view(b, ref, move, factor, s) for ref, move in zip(refs, moves, strict=True)]
        step = GridPosition(axis, factor, s, size).substitute(body)
        return views, same if step is body else step

    views, step = substep(0)  # as written: its reset of the carried state writes memory first
    b.create("call", views, {"callee": step})
    values = thread.load(b, refs)
    for s in range(1, 1 if loop else factor):
        views, step = substep(s)
        args, step = thread.arguments(views, values), thread.step(step)
        if size % factor and s >= size % factor:
            values = _call_while_in_grid(b, step, args, thread.positions, (axis, factor, s, size))
        else:
            values = b.create("call", args, {"callee": step}).results
    if loop:
        values = loop_over(b, thread.step(same), refs, moves, where, thread, values)
    thread.store(b, refs, values)
    return b.function(body.name, refs, [])


def _call_while_in_grid(
    b: Builder, step: Function, args: list[Value], threaded: list[int], where: tuple
) -> tuple[Value, ...]:
    """``call step(args)`` when old step ``program_id * factor + s`` is before ``size``
    (``where``: axis, factor, s, size); the threaded arguments (positions ``threaded``) pass
    through unchanged when it is not."""
    axis, factor, s, size = where
    index = old_index(b, axis, factor, s)
    end = i32(b, size)
    inside = b.create("convert", [b.create("lt", [index, end]).result], {"dtype": "int32"})
    skip, run = Builder(), Builder()
    skip_params, run_params = params([a.type for a in args]), params([a.type for a in args])
    ran = run.create("call", run_params, {"callee": step}).results
    regions = [
        skip.block(skip_params, [skip_params[k] for k in threaded]),
        run.block(run_params, ran),
    ]
    return b.create("cond", [inside.result, *args], {}, regions).results
