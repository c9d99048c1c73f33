"""Why a kernel got its windows: ``fuse-grid-steps``' choices in words (``minipallas-opt
--explain``).

The pass writes a note for each choice it weighs and each rule that declines (``notes``);
this adds what came of them: the grid and every block before and after, and the cost model's
time for both (``cost.V5E``, the chip its constants were measured on).
"""

from __future__ import annotations

from typing import Any

from minipallas.ir.kernel_spec import Kernel
from minipallas.passes.kernel.grid_fusion import fuse_grid_steps
from minipallas.passes.kernel.grid_fusion.cost import V5E, kernel_cost

__all__ = ["explain"]


def explain(kernel: Kernel, **options: Any) -> str:  # noqa: ANN401 - the pass's options
    """``kernel``'s windows after ``fuse-grid-steps{options}`` and why, one fact a line."""
    notes: list[str] = []
    fused = fuse_grid_steps(kernel, notes=notes, **options)
    before, after = kernel_cost(kernel), kernel_cost(fused)
    lines = [
        f"kernel {kernel.name}: grid {_grid(kernel)} -> {_grid(fused)}",
        f"  model ({V5E.name}): {before.seconds * 1e3:.3f} ms -> {after}",
    ]
    pairs = zip(
        (*kernel.in_specs, *kernel.out_specs), (*fused.in_specs, *fused.out_specs), strict=True
    )
    for i, (old, new) in enumerate(pairs):
        which = f"input {i}" if i < kernel.num_inputs else f"output {i - kernel.num_inputs}"
        lines.append(f"  {which}: {old.array} in blocks {_shape(old)} -> {_shape(new)}")
    return "\n".join([*lines, *(f"  {n}" for n in notes)])


def _grid(kernel: Kernel) -> str:
    return "x".join(map(str, kernel.grid)) or "()"


def _shape(spec: Any) -> str:  # noqa: ANN401 - a TracedBlockSpec
    return "x".join("_" if n is None else str(n) for n in spec.block_shape)
