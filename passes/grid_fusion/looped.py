"""The sub-steps of a fused grid step as a loop over them, instead of unrolled.

Unrolled (``substeps.fused_body``), the ``factor`` copies of the old body are one block of
straight-line code. Flash attention ran 0.77x of its unfused kernel so on a v5e at every
factor, whether its scratch went through VMEM or values (``carried``), and 1.01-1.04x in a
loop with the same ops: likely the chip's scheduler interleaves unrolled sub-steps (a
sub-step's ``q @ k.T`` does not wait for the running max) until their live values overflow
the vector registers. A ``for`` runs each sub-step in turn, in code one sub-step long; the
threaded scratch, if any, is the loop's carry.

1. ``loopable``: ``factor`` divides the axis, and the body asks its grid position only in
   its own block, not inside a region or a callee (only there can ``program_id`` read the
   loop's index).
2. The loop body: each window's block at ``s * block`` (``ref.at`` at a dynamic start), the
   old body (discharged of the threaded scratch) copied in with ``program_id`` read as
   ``program_id * factor + s``, and the scratch's new values yielded.

Each sub-step runs the old step's ops in the old order, as unrolled: the bits stay.
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir.builder import Builder, params
from minipallas.ir.core import Function, Value
from minipallas.ir.types import ArrayType, Type
from minipallas.passes.grid_fusion.carried import Threading
from minipallas.passes.grid_fusion.index_maps import Motion
from minipallas.passes.grid_fusion.substeps import GridPosition, i32, view

INDEX = ArrayType((), "int32")


def loopable(body: Function, axis: int, factor: int, size: int) -> bool:
    """Whether ``factor`` sub-steps of ``body`` along ``axis`` (``size`` steps) can be a loop
    (step 1)."""
    return size % factor == 0 and not GridPosition(axis, factor, 0, size).asks_below_top(body)


def looped_body(
    body: Function,
    param_types: Sequence[Type],
    moves: Sequence[Motion],
    where: tuple[int, int, int],
    threaded: Sequence[bool],
) -> Function:
    """The fused body as a loop (module doc), when ``loopable``; ``where``: the axis, the
    factor and the axis's old size; ``threaded``: per ref, whether it is kept in values."""
    axis, factor, size = where
    thread = Threading(threaded)
    step = thread.step(Function(f"{body.name}_substep", body.body))
    b = Builder()
    refs = params(param_types)
    values = thread.load(b, refs)
    loop = Builder()
    s, consts, carries = Value(INDEX), params(param_types), params([v.type for v in values])
    views = [view(loop, ref, move, factor, s) for ref, move in zip(consts, moves, strict=True)]
    env = dict(zip(step.body.params, thread.arguments(views, carries), strict=True))
    position = GridPosition(axis, factor, s, size)
    region = loop.block((s, *consts, *carries), position.copy_into(loop, step.body, env))
    bounds = [i32(b, 0), i32(b, factor)]
    ran = b.create("for", [*bounds, *refs, *values], {"num_consts": len(refs)}, [region])
    thread.store(b, refs, ran.results)
    return b.function(body.name, refs, [])
