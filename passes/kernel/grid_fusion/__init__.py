"""Grid-step fusion: run ``c`` steps of a grid axis as one step, over every axis it can.

On a TPU every grid step pays a fixed cost (about 0.2-0.35 µs on a v5e: the pipeline's DMA
bookkeeping and the step's prologue) on top of moving its blocks. A kernel written with small
blocks (8 rows, 1024 elements, 128³ matmul tiles) spends most of its time there. Fusion makes
each step move ``c`` blocks as one window and run the old body over them ``c`` times, in the
old order, each sub-step seeing its old ``program_id`` (``substeps``): the same ops on the same
elements in the same order, so the results are the old ones bit for bit, while the grid is
``c`` times shorter. Along the other axes, whose steps are independent rows of work, a step runs
the old body once over blocks ``c`` times wider instead (``widen``): one 512-row dot where there
were four of 128 rows, each output element's ops still the same and in the same order.

Algorithm:
1. Leave the kernel alone when its grid has a dynamic axis or fewer than ``min_steps`` steps,
   or when an input aliased to an output does not pick the same block at every step.
2. Widen each axis but the innermost longer than one (``widen``), until the blocks that move
   along it are ``wide_block`` long in that dimension, within ``vmem_budget``: the largest
   divisor of the axis's length that keeps that.
3. Scratch the body hands from one step to the next (reads and writes), of at most
   ``carried_bytes`` in tiles, is kept in values across the sub-steps (``carried``,
   ``discharge_carried``), and so is an output block that stays put along the axis
   (``thread_outputs``): bit exact, and on a v5e flash attention ran 0.132 ms so against
   0.196 in a loop through VMEM, the sum of 2^24 floats 0.122 against 2.26. When more than
   ``max_carried`` buffers are left to go through VMEM, the sub-steps run in a loop
   (``looped``; unrolled, flash attention ran 0.77x so), or the axis is left when they
   cannot be one. Widening chains nothing: it runs the body once per step.
4. Take the innermost axis longer than one (every later axis has one step, so its consecutive
   steps are consecutive in the whole grid's order). Every block spec must follow it
   (``index_maps.motion``): its block stays put, or advances one block a step in one
   dimension.
5. Choose ``c``: enough steps that one fused step moves about ``target_bytes`` of blocks that
   change, at most ``max_unroll`` old steps in one (counting earlier fusions), windows no longer
   than their arrays, a factor of every moving index's other terms, and the double-buffered
   windows plus scratch within ``vmem_budget``. Prefer a divisor of the axis's length; else
   the sub-steps past its end are skipped.
6. Build the fused kernel: window block specs (``index_maps.window_spec``), the axis ``c``
   times shorter, the body of sub-steps (``substeps.fused_body``). Then try the next axis out
   (step 4) when the axis was fused whole, until nothing is left to gain.
7. ``vmem_budget`` is the user's ``vmem_limit_bytes`` less Mosaic's own 2 MiB, or, when the
   kernel sets none, up to 96 MiB (``cost.V5E.vmem_most``): windows past Mosaic's default
   16 MiB scope then make the kernel ask for what they take (``cost.vmem_limit``). On a v5e
   matmul f32 2048^3 ran 0.137 ms so, against 0.182 within the default scope.
"""

from __future__ import annotations

import dataclasses
import math

from minipallas.ir.core import Function
from minipallas.ir.kernel_spec import Kernel, TracedBlockSpec
from minipallas.ir.types import RefType
from minipallas.passes.kernel.grid_fusion.carried import CARRIED_BYTES, carried_buffers, threaded
from minipallas.passes.kernel.grid_fusion.choose import (
    Limits,
    fuse_factor,
    innermost,
    moves_along,
    widen_by_model,
)
from minipallas.passes.kernel.grid_fusion.cost import (
    MOSAIC_VMEM,
    V5E,
    Plan,
    body_ops,
    plan_of,
    vmem_limit,
)
from minipallas.passes.kernel.grid_fusion.index_maps import STAYS, Motion, rebuilt, window_spec
from minipallas.passes.kernel.grid_fusion.looped import loopable
from minipallas.passes.kernel.grid_fusion.substeps import fused_body
from minipallas.passes.kernel.grid_fusion.widen import widen_axis
from minipallas.passes.registry import BOOL, INT, Option, register

__all__ = ["fuse_axis", "fuse_grid_steps", "widen_axis"]

MIN_STEPS = 64
MAX_CARRIED = 1
# flash attention on a v5e with its scratch in values, sub-steps unrolled: 0.141 ms at S=4096
# (0.196 in a loop through VMEM), 0.858 at d=64 (1.064) (fusion_cost_v5e.txt)
DISCHARGE_CARRIED = True
THREAD_OUTPUTS = True
ROWS_ALONE = False  # XLA:CPU's row sums depend on the rows beside them; the TPU target sets it


@register(
    "fuse-grid-steps",
    Option("max_unroll", INT, "the most old steps one fused step runs (default: the model's)"),
    Option("target_bytes", INT, "fuse no further than this many bytes of moving blocks a step"),
    Option("vmem_budget", INT, "the most bytes the windows, scratch and spills take (step 7)"),
    Option("min_steps", INT, "grids with fewer steps are left as they are"),
    Option("max_carried", INT, "kernels handing more scratch step to step fuse in a loop"),
    Option("wide_block", INT, "widen outer axes' moving blocks at most this long (1: never)"),
    Option("discharge_carried", BOOL, "keep carried scratch in values across the sub-steps"),
    Option("carried_bytes", INT, "the most bytes a scratch buffer kept in values holds"),
    Option("substep_loop", BOOL, "run a fused step's sub-steps in a loop, not unrolled"),
    Option("thread_outputs", BOOL, "keep an output block that stays put in values too"),
    Option("rows_alone", BOOL, "widen float row sums: Mosaic rounds each row alone"),
    doc="steps of every grid axis run as one step over a window, bit exact",
    subject="kernel",
)
def fuse_grid_steps(
    kernel: Kernel,
    *,
    max_unroll: int | None = None,
    target_bytes: int | None = None,
    vmem_budget: int | None = None,
    min_steps: int = MIN_STEPS,
    max_carried: int = MAX_CARRIED,
    wide_block: int | None = None,
    discharge_carried: bool = DISCHARGE_CARRIED,
    carried_bytes: int = CARRIED_BYTES,
    substep_loop: bool = False,
    thread_outputs: bool = THREAD_OUTPUTS,
    rows_alone: bool = ROWS_ALONE,
    notes: list[str] | None = None,
) -> Kernel:
    """``kernel`` with runs of its innermost grid steps fused (module doc); ``kernel`` itself
    when nothing is fused. A limit left None is the cost model's (``cost.V5E``). ``notes``
    (not a pipeline option: ``minipallas-opt --explain``'s) gets each choice and refusal."""
    declined = _declined(kernel, min_steps)
    if declined:
        _note(notes, f"not fused: {declined}")
        return kernel
    chip = V5E
    if vmem_budget is None:  # the user's limit, less Mosaic's own; else the most to ask for
        given = kernel.vmem_limit_bytes
        vmem_budget = chip.vmem_most if given is None else given - MOSAIC_VMEM
    limits = Limits(
        chip,
        vmem_budget,
        max(1, chip.unrolled_ops // body_ops(kernel)) if max_unroll is None else max_unroll,
        target_bytes,
        wide_block,
        rows_alone,
        carried_bytes if discharge_carried else 0,
    )
    budget = limits.carried_bytes

    def may_fuse(k: Kernel) -> bool:
        return len(carried_buffers(k)) - sum(threaded(k, budget)) <= max_carried

    written = kernel
    kernel = widen_by_model(kernel, limits, may_fuse, notes)
    plan = plan_of(kernel, chip, budget)  # fused along with the kernel: it counts the copies
    unrolled = 1
    while (axis := innermost(kernel.grid)) is not None:
        moves = moves_along(kernel, axis)
        if moves is None:
            _note(notes, f"axis {axis}: not fused: no block moves along it as fusion can follow")
            break
        most = limits.max_unroll // unrolled
        factor = fuse_factor(kernel, plan, axis, moves, most, limits, notes)
        if factor < 2:
            break
        loop = _loop(kernel, axis, factor, substep_loop, not may_fuse(kernel), notes)
        if loop is None:
            break
        guarded = kernel.grid[axis] % factor != 0  # the last step's sub-steps past the end
        keep = threaded(kernel, budget, moves if thread_outputs else None, guarded)
        if any(keep):
            _note(notes, f"axis {axis}: in values across the sub-steps: {_kept(kernel, keep)}")
        kernel = fuse_axis(kernel, axis, moves, factor, keep, loop)
        plan, unrolled = plan.fused(axis, factor), unrolled * factor
        if kernel.grid[axis] > 1:  # the axis is left with steps: the outer ones stay apart
            break
    return _scoped(written, kernel, plan, notes)


def _scoped(written: Kernel, fused: Kernel, plan: Plan, notes: list[str] | None) -> Kernel:
    """``fused`` asking Mosaic for the VMEM its windows take, past the default scope."""
    limit = vmem_limit(written, fused, plan, V5E)
    if limit == fused.vmem_limit_bytes:
        return fused
    _note(notes, f"VMEM: the windows take {plan.vmem / (1 << 20):.1f} MiB, over Mosaic's default "
                 f"scope: the kernel asks for {limit >> 20} MiB (vmem_limit_bytes)")  # fmt: skip
    return dataclasses.replace(fused, vmem_limit_bytes=limit)


def _loop(
    kernel: Kernel, axis: int, factor: int, asked: bool, chained: bool, notes: list[str] | None
) -> bool | None:
    """Step 3: whether the sub-steps run in a loop; None when they must and cannot."""
    if not (asked or chained):
        return False
    if loopable(kernel.body, axis, factor, kernel.grid[axis]):
        why = "scratch chained step to step through VMEM, over max_carried" if chained else "asked"
        _note(notes, f"axis {axis}: its {factor} sub-steps in a loop: {why}")
        return True
    if chained:
        _note(notes, f"axis {axis}: not fused: scratch chained step to step through VMEM, "
                     f"over max_carried, and {factor} sub-steps cannot be a loop")  # fmt: skip
        return None
    return False


def _declined(kernel: Kernel, min_steps: int) -> str | None:
    """Step 1's reason to leave ``kernel`` alone, if any."""
    if kernel.dynamic_axes:
        return "a grid axis of dynamic size"
    if math.prod(kernel.grid) < min_steps:
        return f"{math.prod(kernel.grid)} grid steps, fewer than min_steps ({min_steps})"
    if not _aliases_move_together(kernel):
        return "an input aliased to an output picks other blocks than it"
    return None


def _kept(kernel: Kernel, keep: tuple[bool, ...]) -> str:
    """The buffers ``keep`` marks, by what they are to the user: "output 0, scratch 1"."""
    first_out = len(kernel.scalar_prefetch) + kernel.num_inputs
    first_scratch = len(keep) - len(kernel.scratch_types)
    return ", ".join(
        f"scratch {k - first_scratch}" if k >= first_scratch else f"output {k - first_out}"
        for k, kept in enumerate(keep)
        if kept
    )


def _note(notes: list[str] | None, line: str) -> None:
    if notes is not None:
        notes.append(line)


def _aliases_move_together(kernel: Kernel) -> bool:
    """Whether each aliased input picks the same block as its output at every step (same
    shape, same index map up to its name): it then reads each element before the step that
    writes it, fused or not."""
    prefetch = len(kernel.scalar_prefetch)
    return all(
        _same_blocks(kernel.in_specs[i - prefetch], kernel.out_specs[o])
        for i, o in kernel.input_output_aliases
    )


def _same_blocks(a: TracedBlockSpec, b: TracedBlockSpec) -> bool:
    same_map = str(Function("m", a.index_map.body)) == str(Function("m", b.index_map.body))
    return a.block_shape == b.block_shape and same_map


def fuse_axis(
    kernel: Kernel,
    axis: int,
    moves: list[Motion],
    factor: int,
    threaded: tuple[bool, ...] = (),
    loop: bool = False,
) -> Kernel:
    """Step 6 alone: ``kernel`` with ``factor`` steps of grid ``axis`` run as one, ``moves``
    giving how each block spec moves along it (``index_maps.motion``, inputs then outputs),
    ``threaded`` which body parameters are kept in values across the sub-steps (``carried``).
    The policy (which axis, which factor, whether at all) is the caller's."""
    specs = [
        window_spec(s, m, axis, factor)
        for s, m in zip((*kernel.in_specs, *kernel.out_specs), moves, strict=True)
    ]
    prefetch = len(kernel.scalar_prefetch)
    body_moves = [STAYS] * prefetch + moves + [STAYS] * len(kernel.scratch_types)
    types = [
        _scaled(t, m, factor) for t, m in zip(kernel.body.param_types, body_moves, strict=True)
    ]
    where = (axis, factor, kernel.grid[axis])
    body = fused_body(kernel.body, types, body_moves, where, threaded, loop)
    return rebuilt(kernel, body, axis, -(-kernel.grid[axis] // factor), specs)


def _scaled(t: RefType, move: Motion, factor: int) -> RefType:
    if move.dim is None:
        return t
    shape = list(t.shape)
    shape[move.ref_dim] *= factor
    return RefType(tuple(shape), t.dtype, t.memory_space)
