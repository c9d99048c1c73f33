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
2. Sub-step 0 stays unrolled (``substeps``), so the reset of a ``pl.when(program_id == 0)``
   stays where ``lowering/tpu/semantics.py`` sees it: a loop of all the sub-steps made flash
   attention's query axis ``arbitrary``, where it is ``parallel``. Sub-steps 1 on are a
   ``for``: each window's block at ``s * block`` (``ref.at`` at a dynamic start), the old body
   (discharged of the threaded scratch) copied in with ``program_id`` read as
   ``program_id * factor + s``, the scratch's new values yielded.

Each sub-step runs the old step's ops in the old order, as unrolled: the bits stay.
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir.builder import Builder, params
from minipallas.ir.core import Function, Value
from minipallas.ir.types import ArrayType
from minipallas.passes.kernel.grid_fusion.carried import Threading
from minipallas.passes.kernel.grid_fusion.index_maps import Motion
from minipallas.passes.kernel.grid_fusion.position import GridPosition, i32, view

INDEX = ArrayType((), "int32")


def loopable(body: Function, axis: int, factor: int, size: int) -> bool:
    """Whether ``factor`` sub-steps of ``body`` along ``axis`` (``size`` steps) can be a loop
    (step 1)."""
    return size % factor == 0 and not GridPosition(axis, factor, 0, size).asks_below_top(body)


def loop_over(
    b: Builder,
    step: Function,
    refs: Sequence[Value],
    moves: Sequence[Motion],
    where: tuple[int, int, int],
    thread: Threading,
    values: Sequence[Value],
) -> Sequence[Value]:
    """Sub-steps 1 to ``factor - 1`` of ``step`` (the old body, discharged of the threaded
    scratch) as a ``for`` in ``b`` (step 2), the threaded ``values`` its carries; their values
    after it. ``where``: the axis, the factor, the axis's old size."""
    axis, factor, size = where
    loop = Builder()
    s, consts, carries = (
        Value(INDEX),
        params([r.type for r in refs]),
        params([v.type for v in values]),
    )
    views = [view(loop, ref, move, factor, s) for ref, move in zip(consts, moves, strict=True)]
    env = dict(zip(step.body.params, thread.arguments(views, carries), strict=True))
    position = GridPosition(axis, factor, s, size)
    region = loop.block((s, *consts, *carries), position.copy_into(loop, step.body, env))
    bounds = [i32(b, 1), i32(b, factor)]
    return b.create("for", [*bounds, *refs, *values], {"num_consts": len(refs)}, [region]).results
