"""A kernel's programs run together: ``pallas_call(..., collectives="simulate")`` (issue 15).

The loop program (``grid.grid_program``) runs the grid one point after another, as upstream's
interpret mode does. Collective scratch (``run_scoped(..., collective_axes=...)``) and
``barrier`` need the programs of a group to run at the same time, so under
``collectives="simulate"`` every program of the grid runs together in the multi-program
interpreter (``ir.interpret.programs``):

1. each operand gets its padded buffer, as in the loop program: inputs copied in, outputs
   holding the fill value (or their aliased input); these buffers are shared by all programs;
2. every program runs one function: its block views of the buffers, from the index maps at its
   own ``program_id``s (``grid.block_view``), the kernel body called on them, and the call's
   ``scratch_shapes`` as that program's own allocation;
3. the outputs are the buffers' valid regions.

So a program sees exactly the blocks it sees in the loop program; what changes is that the
programs are concurrent, and the interpreter reports races on shared memory (outputs and inputs
included: two programs writing one output block race), deadlocks and skipped collective
allocations. The results equal the loop program's on a race-free kernel whose programs do not
communicate, which the tests check.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from minipallas.frontend.control import call, program_id, run_scoped
from minipallas.frontend.refs import TracedRef
from minipallas.frontend.tracing import trace
from minipallas.ir import dtypes
from minipallas.ir.errors import TraceError
from minipallas.ir.interpret.api import interpret
from minipallas.ir.kernel_spec import Kernel
from minipallas.ir.location import user_location
from minipallas.ir.types import RefType
from minipallas.kernels.programs.grid import block_view, padded_shape, valid_region
from minipallas.kernels.spec.aliases import output_sources


def simulate(
    kernel: Kernel,
    inputs: Sequence[np.ndarray],
    grid_names: tuple[str, ...],
    schedule: str | int = "lockstep",
) -> list[np.ndarray]:
    """The kernel's outputs with every program run together (module doc)."""
    if kernel.scalar_prefetch or kernel.dynamic_axes:
        raise TraceError(
            "collectives='simulate' runs static grids without scalar prefetch",
            loc=user_location(),
            fix="pass the prefetched scalars as ordinary inputs, and a static grid",
        )
    arrays = buffers(kernel, inputs)
    interpret(programs_function(kernel), *arrays, grid=kernel.grid, grid_names=grid_names,
              collectives="simulate", schedule=schedule)  # fmt: skip
    outs = arrays[kernel.num_inputs :]
    return [np.array(b[valid_region(s)]) for b, s in zip(outs, kernel.out_specs, strict=True)]


def buffers(kernel: Kernel, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Each operand's padded buffer (step 1): inputs copied in, outputs holding the fill value
    or their aliased input."""
    specs = (*kernel.in_specs, *kernel.out_specs)
    sources = output_sources(kernel)
    arrays = []
    for k, spec in enumerate(specs):
        out = k - kernel.num_inputs
        source = inputs[k] if out < 0 else inputs[sources[out]] if out in sources else None
        buf = np.full(padded_shape(spec), dtypes.fill_value(spec.array.dtype),
                      dtypes.to_numpy(spec.array.dtype))  # fmt: skip
        if source is not None:
            buf[valid_region(spec)] = source
        arrays.append(buf)
    return arrays


def programs_function(kernel: Kernel) -> Any:
    """The function every program runs over the buffers (step 2)."""
    specs = (*kernel.in_specs, *kernel.out_specs)
    types = [RefType(padded_shape(s), s.array.dtype, s.memory_space) for s in specs]
    return trace(_program(kernel), *types, name=f"{kernel.name}_programs")


def _program(kernel: Kernel) -> Any:
    specs = (*kernel.in_specs, *kernel.out_specs)

    def program(*bufs: TracedRef) -> None:
        indices = [program_id(a) for a in range(len(kernel.grid))]
        views = [block_view(b, s, indices) for b, s in zip(bufs, specs, strict=True)]

        def with_scratch(*scratch: TracedRef) -> None:
            call(kernel.body, *views, *scratch)

        run_scoped(with_scratch, *kernel.scratch_types)

    return program
