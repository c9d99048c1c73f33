"""Which grid axes a Triton kernel launches as programs, and which each program loops over.

Pallas defines a kernel's grid as a sequential loop: an output block revisited across an axis
(its index map ignores that axis) accumulates, and scratch persists from one step to the next.
On a GPU every program runs at once, so upstream Pallas's Triton backend launches every axis and
such a kernel races. minipallas keeps the meaning: an axis becomes a loop inside each program
when

- ``dimension_semantics`` says ``"arbitrary"`` for it (every other kind is parallel), or,
  when none is given,
- some output's index map does not depend on it (the output block is revisited across it),
  or some output has ``Element`` dimensions (windows at element offsets may overlap).

Every other axis is launched (``"parallel"``). Scratch, discharged to registers, is carried by
the loops and starts fresh in each program: programs never share it.

The launch grid maps axis i to ``tt.get_program_id`` i, as upstream does; more than three
launched axes (or a y/z axis over CUDA's 65535) fold their leading axes into ``x``.
"""

from __future__ import annotations

from dataclasses import dataclass

from minipallas.ir.core import Function, Value
from minipallas.ir.errors import PassError
from minipallas.ir.kernel_spec import Kernel

CUDA_YZ_LIMIT = 2**16 - 1


@dataclass(frozen=True)
class Schedule:
    """``launched``/``looped``: grid axes, in grid order; ``why``: one line per looped axis."""

    launched: tuple[int, ...]
    looped: tuple[int, ...]
    why: tuple[str, ...]

    def launch_grid(self, grid: tuple[int, ...]) -> tuple[int, ...]:
        """The CUDA launch grid (x, y, z order): the folded leading axes first."""
        sizes = [grid[a] for a in self.launched]
        folded = self.folded(grid)
        if not folded:
            return tuple(sizes) or (1,)
        product = 1
        for size in sizes[:folded]:
            product *= size
        return (product, *sizes[folded:])

    def folded(self, grid: tuple[int, ...]) -> int:
        """How many leading launched axes share ``program_id x`` (0: none)."""
        sizes = [grid[a] for a in self.launched]
        if len(sizes) <= 3 and all(s <= CUDA_YZ_LIMIT for s in sizes[1:]):
            return 0
        k = max(2, len(sizes) - 2)  # x = product of sizes[:k]; y, z = sizes[k:]
        while any(s > CUDA_YZ_LIMIT for s in sizes[k:]):
            k += 1
        return k


def schedule(kernel: Kernel) -> Schedule:
    """Splits the kernel's grid axes as the module doc says."""
    axes = range(len(kernel.grid))
    semantics = kernel.dimension_semantics
    if semantics is not None:
        if len(semantics) != len(kernel.grid):
            raise PassError(
                f"dimension_semantics {semantics} does not fit grid {kernel.grid}",
                fix="give one of 'parallel' or 'arbitrary' for each grid axis",
            )
        looped = tuple(a for a in axes if semantics[a] == "arbitrary")
        why = tuple(f"axis {a}: dimension_semantics says 'arbitrary'" for a in looped)
    else:
        looped, reasons = [], []
        for a in axes:
            for k, spec in enumerate(kernel.out_specs):
                if spec.element_dims:
                    looped.append(a)
                    reasons.append(
                        f"axis {a}: output {k} has Element dimensions (its windows may overlap)"
                    )
                    break
                if not any(a in deps for deps in dependencies(spec.index_map)):
                    looped.append(a)
                    reasons.append(
                        f"axis {a}: output {k}'s index map ignores it (its block is revisited)"
                    )
                    break
        looped, why = tuple(looped), tuple(reasons)
    launched = tuple(a for a in axes if a not in looped)
    return Schedule(launched, looped, why)


def dependencies(fn: Function) -> list[frozenset[int]]:
    """For each result of ``fn``, the parameters it may depend on (by data flow)."""
    deps: dict[Value, frozenset[int]] = {p: frozenset({i}) for i, p in enumerate(fn.params)}
    for op in fn.body.ops:
        found = frozenset().union(*(deps.get(v, frozenset()) for v in op.operands))
        for result in op.results:
            deps[result] = found
    return [deps.get(v, frozenset()) for v in fn.body.results]
