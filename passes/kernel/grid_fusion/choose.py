"""Which windows a kernel gets: the widening and fusion factors the cost model times least.

``fuse_grid_steps`` asks two things here: how far to widen each outer axis (step 2) and how
many steps of the innermost axis to fuse (step 5). Both are answered by ``cost.Plan``'s time:

1. For each outer axis that can be widened (``widen.widths``; else the reason is noted), the
   factors to weigh: the largest divisors of its length whose blocks stay within their arrays
   (and within ``wide_block``, when set) and that the index maps allow, and 1; as many as keep
   the combinations within ``MAX_WEIGHED``.
2. For each combination of them, the kernel widened so (its body rebuilt, which is cheap) and,
   when its scratch lets it be fused, the fusions ``fuse_factor`` would then choose, weighed on
   the plan without building the sub-steps. Combinations over the VMEM budget are out; the
   least modelled time wins, ties to the first weighed (the widest).
3. ``fuse_factor``: of the factors within the VMEM budget, the sub-step budget (``max_unroll``,
   or the chip's budget of unrolled ops over the body's), ``target_bytes`` (when set), the
   arrays and the index maps, the one of least modelled time, ties to the smaller (a factor
   past a divisor only fills its last step); none when it gains less than ``MIN_GAIN``. A
   factor that leaves as many steps as the one below it is not weighed: it only adds
   sub-steps past the axis's end.

Every choice and every refusal is written to ``notes`` when given: ``minipallas-opt --explain``.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Sequence

from minipallas.ir.kernel_spec import Kernel
from minipallas.passes.kernel.grid_fusion.carried import CARRIED_BYTES
from minipallas.passes.kernel.grid_fusion.cost import Chip, Plan, plan_of
from minipallas.passes.kernel.grid_fusion.index_maps import Motion, motion
from minipallas.passes.kernel.grid_fusion.widen import widen_axis, widths

__all__ = ["Limits", "fuse_factor", "innermost", "moves_along", "widen_by_model"]

MAX_WEIGHED = 49  # widened kernels built, at most: 7 factors (1 among them) of two axes
# a fusion must gain this share of the modelled time: below it the model cannot tell (flash
# attention at d=64, its key axis fused whole, gained 0.8% more by a loop over query blocks)
MIN_GAIN = 0.01


@dataclasses.dataclass(frozen=True)
class Limits:
    """The chip and the caps a user set on the pass (None: the model decides)."""

    chip: Chip
    vmem_budget: int
    max_unroll: int
    target_bytes: int | None = None
    wide_block: int | None = None
    rows_alone: bool = False  # float row sums of a wider block keep their bits (widen.widths)
    carried_bytes: int = CARRIED_BYTES  # scratch kept in values, at most (0: none; carried)


def innermost(grid: Sequence[int | None]) -> int | None:
    """The last axis longer than one."""
    longer = [a for a, n in enumerate(grid) if n != 1]
    return longer[-1] if longer else None


def moves_along(kernel: Kernel, axis: int) -> list[Motion] | None:
    """How each block spec moves along ``axis``; None when one cannot be followed or none
    moves."""
    moves = [motion(s, axis) for s in (*kernel.in_specs, *kernel.out_specs)]
    if None in moves or all(m.dim is None for m in moves):
        return None
    return moves


def widen_by_model(
    kernel: Kernel, limits: Limits, may_fuse: Callable[[Kernel], bool], notes: list[str] | None
) -> Kernel:
    """Steps 1-2: ``kernel`` with its outer axes widened by the factors of least modelled
    time (``kernel`` itself when none is widened)."""
    inner = innermost(kernel.grid)
    axes, factors = [], []
    for axis, size in enumerate(kernel.grid):
        if axis == inner or size == 1:
            continue
        found = widths(kernel, axis, limits.rows_alone)
        if isinstance(found, str):
            _note(notes, f"axis {axis}: not widened: {found}")
            continue
        axes.append(axis)
        factors.append(_widen_factors(kernel, axis, found[0], limits))
    each = max(2, int(MAX_WEIGHED ** (1 / max(1, len(axes)))))  # factors kept per axis
    factors = [[*fs[: each - 1], 1] for fs in factors]
    weighed: list[tuple[float, tuple[int, ...], Kernel]] = []
    over = 0
    for combo in itertools.product(*factors):
        wide = _widened(kernel, zip(axes, combo, strict=True), limits.rows_alone)
        plan = plan_of(wide, limits.chip, limits.carried_bytes)
        if plan.vmem > limits.vmem_budget:
            over += 1
            continue
        if may_fuse(wide):
            plan = _fusions(wide, plan, limits)
        weighed.append((plan.cost(limits.chip).seconds, combo, wide))
    if not weighed:
        return kernel
    best = min(weighed, key=lambda w: w[0])
    if notes is not None and axes:
        tried = ", ".join(f"{_xs(c)} {s * 1e3:.3f}" for s, c, _ in sorted(weighed)[:4])
        _note(notes, f"axes {_xs(tuple(axes))} widened {_xs(best[1])}: weighed (ms) {tried}")
        _note(notes, f"  {len(weighed)} widenings weighed, {over} over the VMEM budget")
    return best[2]


def _xs(factors: tuple[int, ...]) -> str:
    return "x".join(map(str, factors))


def _widen_factors(kernel: Kernel, axis: int, moves: list[Motion], limits: Limits) -> list[int]:
    """Step 1: the factors of ``axis`` to weigh, largest first."""
    size = kernel.grid[axis]
    specs = (*kernel.in_specs, *kernel.out_specs)
    moving = [(s, m) for s, m in zip(specs, moves, strict=True) if m.dim is not None]
    cap = limits.wide_block or math.inf
    fits = [
        c
        for c in range(size, 1, -1)
        if size % c == 0
        and all(m.allows(c) for _, m in moving)
        and all(s.block_shape[m.dim] * c <= min(cap, s.array.shape[m.dim]) for s, m in moving)
    ]
    return fits


def _widened(kernel: Kernel, factors: Sequence[tuple[int, int]], rows_alone: bool) -> Kernel:
    for axis, c in factors:
        found = widths(kernel, axis, rows_alone)
        if c > 1 and not isinstance(found, str):
            kernel = widen_axis(kernel, axis, *found, c)
    return kernel


def _fusions(kernel: Kernel, plan: Plan, limits: Limits) -> Plan:
    """Step 2's estimate: ``plan`` after the fusions ``fuse_factor`` would choose, axis by
    axis inwards out, each block spec moving as in ``kernel``."""
    unrolled = 1
    while (axis := innermost(plan.grid)) is not None:
        moves = moves_along(kernel, axis)
        if moves is None:
            break
        c = fuse_factor(kernel, plan, axis, moves, limits.max_unroll // unrolled, limits)
        if c < 2:
            break
        plan, unrolled = plan.fused(axis, c), unrolled * c
        if plan.grid[axis] > 1:
            break
    return plan


def fuse_factor(
    kernel: Kernel,
    plan: Plan,
    axis: int,
    moves: list[Motion],
    most: int,
    limits: Limits,
    notes: list[str] | None = None,
) -> int:
    """Step 3: how many steps of ``axis`` one fused step runs (1: none); ``plan``: the
    kernel as fused so far, ``most``: the sub-steps left in the budget."""
    size = plan.grid[axis]
    specs = (*kernel.in_specs, *kernel.out_specs)
    limit, why = min(most, size), "the sub-step budget" if most < size else "the axis's length"
    moving = sum(o.nbytes for o in plan.operands if axis in o.axes)
    if limits.target_bytes is not None and -(-limits.target_bytes // moving) < limit:
        limit, why = -(-limits.target_bytes // moving), "target_bytes"
    for s, m in zip(specs, moves, strict=True):
        if m.dim is not None and s.array.shape[m.dim] // s.block_shape[m.dim] < limit:
            limit, why = s.array.shape[m.dim] // s.block_shape[m.dim], "an array's length"
    weighed = {1: plan.cost(limits.chip)}
    for c in range(2, limit + 1):
        fused = plan.fused(axis, c)
        if fused.vmem > limits.vmem_budget:
            why = "the VMEM budget"
            break
        if -(-size // c) == -(-size // (c - 1)):
            continue  # as many steps as c - 1, with sub-steps past the end
        if all(m.allows(c) for m in moves):
            weighed[c] = fused.cost(limits.chip)
    best = min(weighed, key=lambda c: (weighed[c].seconds, c))
    if weighed[best].seconds > weighed[1].seconds * (1 - MIN_GAIN):
        best, why = 1, f"the model (a gain under {MIN_GAIN:.0%})"
    elif best < max(weighed):
        why = "the model (the pipeline's fill and drain grow with the window)"
    if notes is not None and best > 1:
        steps = f"{size} -> {-(-size // best)} steps"
        _note(notes, f"axis {axis}: {best} sub-steps a step ({steps}), {weighed[best]}")
        _note(notes, f"  unfused {weighed[1].seconds * 1e3:.3f} ms; more sub-steps: {why}")
    elif notes is not None:
        _note(notes, f"axis {axis}: no (more) sub-steps, bound by {why}")
    return best


def _note(notes: list[str] | None, line: str) -> None:
    if notes is not None:
        notes.append(line)
