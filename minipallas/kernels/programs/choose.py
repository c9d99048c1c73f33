"""Which program a traced kernel becomes, decided once for every caller: the "stablehlo"
target's prepare step.

A lowering target that takes a ``Kernel`` (Mosaic, Triton) emits the kernel itself; one that
takes a ``Function`` ("stablehlo", the CPU) gets the grid as a program over whole arrays:
``cpu_program`` is its ``prepare`` in the target table (``minipallas.lowering.TARGETS``), so
``Target.lower`` given a kernel builds it, and ``PallasCall.program`` asks the target for it.
``match_upstream`` and ``collectives="simulate"`` thus mean the same on every path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minipallas import lowering
from minipallas.ir.core import Function
from minipallas.ir.kernel_spec import Kernel
from minipallas.kernels.collective.program import collective_program
from minipallas.kernels.programs.accumulation import accumulated_program
from minipallas.kernels.programs.grid import grid_program
from minipallas.kernels.programs.vectorized_grid import vectorized_grid_program
from minipallas.kernels.spec import params as kernel_params
from minipallas.lowering import AfterEach

if TYPE_CHECKING:  # imported on first use: jaxlib's MLIR bindings are slow to import
    from minipallas.lowering.lowered import Lowered


def cpu_program(
    kernel: Kernel,
    match_upstream: bool = True,
    collective_axes: tuple[str, ...] | None = None,
    after_each: AfterEach | None = None,
) -> Function:
    """What the CPU runs: the grid with its independent points batched
    (``vectorized_grid``), or, when none can be, as loops over blocks (``grid``). With
    ``match_upstream=False`` a sequential axis that only accumulates is first summed at once
    (``accumulation``: a blocked matmul becomes one dot). ``Element``
    block dims run as loops: the batched grid takes a grid index for a block index; so do
    scalar prefetch (data-dependent block indices) and dynamic grids (sizes known at run
    time). ``collective_axes`` (the grid names of a ``collectives="simulate"`` call): the
    groups' epochs in turn, as one program (``collective.program``).

    ``after_each(stage, fn)`` sees the stages of the program built, by name (the passes that
    bind and discharge the body, ``hoist-invariant``, ``batch-grid``...), then the program
    itself as ``cpu-program``: how ``lower(..., after_each=...)`` and ``minipallas-opt
    --print-ir-after-all`` show a kernel's way to the CPU."""
    program = _program(kernel, match_upstream, collective_axes, after_each)
    if after_each is not None:
        after_each("cpu-program", program)
    return program


def _program(
    kernel: Kernel,
    match_upstream: bool,
    collective_axes: tuple[str, ...] | None,
    after_each: AfterEach | None,
) -> Function:
    if collective_axes is not None:
        return collective_program(kernel, collective_axes)
    if (
        any(s.element_dims for s in (*kernel.in_specs, *kernel.out_specs))
        or kernel.scalar_prefetch
        or kernel.dynamic_axes
    ):
        return grid_program(kernel, after_each=after_each)
    summed = None if match_upstream else accumulated_program(kernel, after_each=after_each)
    return (
        summed
        or vectorized_grid_program(kernel, exact=match_upstream, after_each=after_each)
        or grid_program(kernel, after_each=after_each)
    )


def lower_for_target(
    kernel: Kernel,
    target: str = "stablehlo",
    *,
    match_upstream: bool = True,
    collective_axes: tuple[str, ...] | None = None,
    compiler_params: Any = None,
    debug: bool = False,
    after_each: AfterEach | None = None,
    verify: bool | None = None,
    **options: Any,
) -> Lowered:
    """A traced (or imported) ``Kernel`` emitted for ``target`` by ``Target.lower``; a target
    that lowers a ``Function`` ("stablehlo") prepares ``cpu_program`` with ``match_upstream``
    and ``collective_axes`` (a target that emits the kernel has no use for them).
    ``compiler_params`` (minipallas's) give the emitter its options and are kept in
    ``Lowered.info``; params of another backend than the target's are an error. ``debug``
    prints the module, as upstream prints its own."""
    row = lowering.target(target)
    options = {**kernel_params.emitter_options(compiler_params, row.name), **options}
    if row.prepare:
        options.update(match_upstream=match_upstream, collective_axes=collective_axes)
    lowered = row.lower(kernel, after_each=after_each, verify=verify, **options)
    info = getattr(lowered, "info", None)  # the ptx target's CompiledKernel has none
    if compiler_params is not None and row.kernel and info is not None:
        info["compiler_params"] = compiler_params
    if debug:
        name = kernel.name if row.kernel else lowered.function.name
        kernel_params.debug_module(name, row.name, lowered.as_text())
    return lowered
