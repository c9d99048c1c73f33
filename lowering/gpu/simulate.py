"""Running a lowered GPU kernel on the CPU, as the GPU would, with the reference interpreter.

Without a GPU, the Triton module itself cannot run; what it was emitted from can. ``simulate``
takes ``GpuLowered.function`` (the body after partial discharge: operands still refs, scratch
as values) and runs it the way the emitted kernel runs:

1. Pad each array past its end with the fill value (NaN / int minimum / False) to a whole
   number of blocks: what the module's masked loads read there. Block indices are clamped into
   the array, as the module clamps them. Outputs start as the fill value too (the GPU's output
   buffers hold garbage).
2. For each launched program (grid axes in ``schedule.launched``, row-major): scratch starts as
   the fill value; for each step of the program's own loops (``schedule.looped``, row-major),
   run the body with the interpreter on views of the padded arrays (written in place) and
   carry the scratch it returns.
3. Crop the outputs back to their shapes: writes past an array's end are masked off.

Programs run one after another here and all at once on the GPU; the two agree when no two
launched programs write the same output block, which is what the schedule ensures.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.errors import InterpretError
from minipallas.ir.interpret import interpret
from minipallas.ir.kernel_spec import TracedBlockSpec
from minipallas.lowering.gpu import GpuLowered
from minipallas.lowering.gpu.module import index_bounds


def simulate(lowered: GpuLowered, *arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """The kernel's outputs for ``arrays`` (its inputs), computed as described above."""
    kernel, plan = lowered.kernel, lowered.schedule
    if len(arrays) != kernel.num_inputs:
        raise InterpretError(f"kernel @{kernel.name} takes {kernel.num_inputs} inputs")
    specs = (*kernel.in_specs, *kernel.out_specs)
    points = list(itertools.product(*(range(n) for n in kernel.grid)))
    starts = {p: [_starts(s, p) for s in specs] for p in points}
    padded = []
    for k, spec in enumerate(specs):
        given = arrays[k] if k < len(arrays) else None
        padded.append(_padded(spec, given, [starts[p][k] for p in points]))
    for launch in itertools.product(*(range(kernel.grid[a]) for a in plan.launched)):
        scratch = [np.full(t.shape, dtypes.fill_value(t.dtype)) for t in kernel.scratch_types]
        for step in itertools.product(*(range(kernel.grid[a]) for a in plan.looped)):
            point = [0] * len(kernel.grid)
            for axis, i in (
                *zip(plan.launched, launch, strict=True),
                *zip(plan.looped, step, strict=True),
            ):
                point[axis] = i
            point = tuple(point)
            views = [_block(padded[k], spec, starts[point][k]) for k, spec in enumerate(specs)]
            scratch = list(
                interpret(lowered.function, *views, *scratch, program_ids=point, grid=kernel.grid)
            )
    outs = padded[kernel.num_inputs :]
    return tuple(
        np.ascontiguousarray(out[tuple(slice(0, n) for n in spec.array.shape)])
        for out, spec in zip(outs, kernel.out_specs, strict=True)
    )


def _starts(spec: TracedBlockSpec, point: Sequence[int]) -> list[int]:
    """The element offset of the spec's block at a grid point, per array dimension: the block
    index counted once from the end when negative, then clamped into the array, as the module
    does."""
    indices = interpret(spec.index_map, *(np.int32(i) for i in point))
    starts = []
    for i, (unit, count, last) in zip(indices, index_bounds(spec), strict=True):
        i = int(i) + (count if i < 0 else 0)
        starts.append(min(max(i, 0), last) * unit)
    return starts


def _padded(
    spec: TracedBlockSpec, given: np.ndarray | None, starts: Sequence[Sequence[int]]
) -> np.ndarray:
    """Step 1: the array, followed by fill values up to the farthest block end."""
    shape = list(spec.array.shape)
    for begins in starts:
        for d, (begin, size) in enumerate(zip(begins, spec.block_shape, strict=True)):
            shape[d] = max(shape[d], begin + (1 if size is None else size))
    dtype = dtypes.to_numpy(spec.array.dtype)
    out = np.full(shape, dtypes.fill_value(spec.array.dtype), dtype)
    if given is not None:
        out[tuple(slice(0, n) for n in spec.array.shape)] = given
    return out


def _block(padded: np.ndarray, spec: TracedBlockSpec, starts: Sequence[int]) -> np.ndarray:
    """A writable view of the block (squeezed dimensions indexed away)."""
    index = tuple(
        begin if size is None else slice(begin, begin + size)
        for begin, size in zip(starts, spec.block_shape, strict=True)
    )
    return padded[(*index, Ellipsis)]
