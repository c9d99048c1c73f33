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
3. Stop there when the body hands more than ``max_carried`` scratch buffers from one step to
   the next (reads and writes them). Measured on a v5e: flash attention (running max, sum and
   output in three scratch buffers) with 128-row blocks runs 0.77x in sub-steps at any factor,
   chained through VMEM stores and loads of that state; a blocked matmul (one accumulator)
   runs 1.8-3.9x fused. Widening chains nothing: it runs the body once per step.
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
   (step 4), until nothing is left to gain.
"""

from __future__ import annotations

import dataclasses
import math

from minipallas.ir import dtypes
from minipallas.ir.core import Function
from minipallas.ir.effects import Accum, Read, Write, effects_with_swap_reads
from minipallas.ir.kernel_spec import Kernel, TracedBlockSpec
from minipallas.ir.types import RefType
from minipallas.passes.grid_fusion.index_maps import STAYS, Motion, motion, window_spec
from minipallas.passes.grid_fusion.substeps import fused_body
from minipallas.passes.grid_fusion.widen import widen_axis, widths
from minipallas.passes.registry import INT, Option, register

__all__ = ["fuse_axis", "fuse_grid_steps", "widen_axis"]

# chosen from bench/benchmarks/fusion_sweep.py on a v5e (docs/guides/optimizations.md has the table)
MAX_UNROLL = 32
TARGET_BYTES = 4 << 20
VMEM_BUDGET = 8 << 20  # half of a v5e's default 16 MiB scoped VMEM
MIN_STEPS = 64
MAX_CARRIED = 1
WIDE_BLOCK = 512  # the 2048 matmul in 512-blocks ran 2x its 128-block form fused (issue 49)


@register(
    "fuse-grid-steps",
    Option("max_unroll", INT, "the most old steps one fused step runs"),
    Option("target_bytes", INT, "fuse until one step moves about this many bytes of blocks"),
    Option("vmem_budget", INT, "the most bytes the double-buffered windows and scratch take"),
    Option("min_steps", INT, "grids with fewer steps are left as they are"),
    Option("max_carried", INT, "kernels handing more scratch buffers step to step are left"),
    Option("wide_block", INT, "widen outer axes' moving blocks up to this long (1: never)"),
    doc="steps of every grid axis run as one step over a window, bit exact",
    subject="kernel",
)
def fuse_grid_steps(
    kernel: Kernel,
    *,
    max_unroll: int = MAX_UNROLL,
    target_bytes: int = TARGET_BYTES,
    vmem_budget: int = VMEM_BUDGET,
    min_steps: int = MIN_STEPS,
    max_carried: int = MAX_CARRIED,
    wide_block: int = WIDE_BLOCK,
) -> Kernel:
    """``kernel`` with runs of its innermost grid steps fused (module doc); ``kernel`` itself
    when nothing is fused."""
    if kernel.dynamic_axes or math.prod(kernel.grid) < min_steps:
        return kernel
    if not _aliases_move_together(kernel):
        return kernel
    kernel = _widen(kernel, wide_block, vmem_budget)
    if _carried(kernel) > max_carried:
        return kernel
    unrolled = 1
    while (axis := _innermost(kernel.grid)) is not None:
        moves = _moves(kernel, axis)
        if moves is None:
            break
        factor = _factor(kernel, axis, moves, max_unroll // unrolled, target_bytes, vmem_budget)
        if factor < 2:
            break
        kernel = fuse_axis(kernel, axis, moves, factor)
        unrolled *= factor
    return kernel


def _widen(kernel: Kernel, wide_block: int, budget: int) -> Kernel:
    """Step 2."""
    inner = _innermost(kernel.grid)
    for axis, size in enumerate(kernel.grid):
        if axis == inner or size == 1:
            continue
        found = widths(kernel, axis)
        if found is None:
            continue
        moves, dims = found
        specs = (*kernel.in_specs, *kernel.out_specs)
        moving = [(s, m) for s, m in zip(specs, moves, strict=True) if m.dim is not None]
        for c in range(size, 1, -1):
            fits = size % c == 0 and all(m.allows(c) for _, m in moving)
            fits = fits and all(
                s.block_shape[m.dim] * c <= min(wide_block, s.array.shape[m.dim]) for s, m in moving
            )
            if fits and _fits(kernel, specs, moves, c, budget, widened=dims):
                kernel = widen_axis(kernel, axis, moves, dims, c)
                break
    return kernel


def _carried(kernel: Kernel) -> int:
    """How many scratch buffers the body both reads and writes."""
    first = len(kernel.body.params) - len(kernel.scratch_types)
    found = effects_with_swap_reads(kernel.body)
    return sum(
        Read(k) in found and (Write(k) in found or Accum(k) in found)
        for k in range(first, len(kernel.body.params))
    )


def _innermost(grid: tuple[int | None, ...]) -> int | None:
    longer = [a for a, n in enumerate(grid) if n != 1]
    return longer[-1] if longer else None


def _moves(kernel: Kernel, axis: int) -> list[Motion] | None:
    moves = [motion(s, axis) for s in (*kernel.in_specs, *kernel.out_specs)]
    if None in moves or all(m.dim is None for m in moves):
        return None
    return moves


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


def _factor(
    kernel: Kernel, axis: int, moves: list[Motion], most: int, target: int, budget: int
) -> int:
    specs = (*kernel.in_specs, *kernel.out_specs)
    size = kernel.grid[axis]
    moving = sum(_bytes(s.ref_type) for s, m in zip(specs, moves, strict=True) if m.dim is not None)
    limit = min(most, size, -(-target // moving))
    for s, m in zip(specs, moves, strict=True):
        if m.dim is not None:
            limit = min(limit, s.array.shape[m.dim] // s.block_shape[m.dim])
    fits = [c for c in range(limit, 1, -1) if _fits(kernel, specs, moves, c, budget)]
    fits = [c for c in fits if all(m.allows(c) for m in moves)]
    if not fits:
        return 1
    divisors = [c for c in fits if size % c == 0]
    return divisors[0] if divisors and 2 * divisors[0] >= fits[0] else fits[0]


def _fits(
    kernel: Kernel,
    specs: tuple,
    moves: list[Motion],
    c: int,
    budget: int,
    widened: dict | None = None,
) -> bool:
    """Whether ``c`` blocks a window (double-buffered) and the scratch fit in ``budget``;
    ``widened``: the widened dimension of each body value, the scratch widened too."""
    windows = sum(
        _bytes(s.ref_type) * (c if m.dim is not None else 1)
        for s, m in zip(specs, moves, strict=True)
    )
    first = len(kernel.body.params) - len(kernel.scratch_types)
    scratch = sum(
        _bytes(t) * (c if widened is not None and widened.get(p) is not None else 1)
        for p, t in zip(kernel.body.params[first:], kernel.scratch_types, strict=True)
    )
    return 2 * windows + scratch <= budget


def _bytes(t: RefType) -> int:
    return math.prod(t.shape) * dtypes.itemsize(t.dtype)


def fuse_axis(kernel: Kernel, axis: int, moves: list[Motion], factor: int) -> Kernel:
    """Step 4 alone: ``kernel`` with ``factor`` steps of grid ``axis`` run as one, ``moves``
    giving how each block spec moves along it (``index_maps.motion``, inputs then outputs).
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
    grid = list(kernel.grid)
    grid[axis] = -(-kernel.grid[axis] // factor)
    body = fused_body(kernel.body, types, body_moves, axis, factor, kernel.grid[axis])
    return dataclasses.replace(
        kernel,
        body=body,
        grid=tuple(grid),
        in_specs=tuple(specs[: kernel.num_inputs]),
        out_specs=tuple(specs[kernel.num_inputs :]),
    )


def _scaled(t: RefType, move: Motion, factor: int) -> RefType:
    if move.dim is None:
        return t
    shape = list(t.shape)
    shape[move.ref_dim] *= factor
    return RefType(tuple(shape), t.dtype, t.memory_space)
