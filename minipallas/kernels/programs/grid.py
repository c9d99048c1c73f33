"""The CPU path: a kernel's grid as loops in one function over whole arrays.

``grid_program(kernel)`` builds the function that ``pallas_call`` compiles for XLA:CPU. It
follows upstream Pallas's interpret mode step for step, so results agree bit for bit:

1. every operand gets a buffer padded up to a whole number of blocks, after the padding of its
   ``Element(n, padding=(low, high))`` dimensions (the array starts at ``low``: index maps
   count in the padded array); inputs are copied in, and the padding is written with the fill
   value of its dtype (NaN, the integer minimum, False: upstream's ``uninitialized_value``).
   Outputs (but an output aliased to an input, ``input_output_aliases``, which starts as a
   copy of it) and scratch, allocated once for the whole grid (it persists from one grid point
   to the next), are left unwritten: their allocation holds that fill, in the interpreter as
   after discharge, and ``interpret(..., checks=True)`` reports reading them before a write;
2. the grid is a nest of ``for`` loops, the last axis innermost (row-major order); a dynamic
   axis (a ``None`` size) loops up to the size the program takes as its first operands;
3. at each grid point, each operand's index map gives block indices; the block starts at
   ``index * block_size`` (at ``index`` itself along a squeezed or ``Element`` dimension), as
   ``lax.dynamic_slice`` takes it: a negative start counts once from the end of the buffer,
   then the window is clamped into it; the body is called on views of those windows, with the
   grid indices in place of ``program_id`` (``bind_grid``). Views alias their buffer, so a
   window the body writes is written back, and a later grid point that reads it sees it: the
   accumulator pattern, for outputs and (as upstream) for inputs the body writes;
4. the outputs are the buffers' valid regions, without the padding.

The interpreter knows the body, the index maps and the read-out of step 4 for what they are
(``ir/interpret/grid_steps.py``): its errors there name the grid point, and under checks an
index map's block outside its array and an output element no grid point writes are errors.

Scalar-prefetch operands (the program's next operands) are copied into refs once; index maps
and the body read them. As upstream's interpret mode hands every step the operands as they
came in, a body that writes one has it restored before each step.

Padded ``Element`` dimensions together with ``input_output_aliases`` raise upstream interpret
mode's ``Padding with aliasing not supported``.

The program still holds refs and calls; ``minipallas.compile`` discharges and lowers it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from minipallas.frontend.control import call, fori_loop, run_scoped
from minipallas.frontend.refs import TracedRef, ds
from minipallas.frontend.scopes import mark_nonnegative
from minipallas.frontend.tracing import trace
from minipallas.frontend.values import TracedArray
from minipallas.ir.collectives import check_collective_axes
from minipallas.ir.core import Function, Value
from minipallas.ir.dtypes import fill_value
from minipallas.ir.effects import Accum, Write, effects
from minipallas.ir.errors import TraceError
from minipallas.ir.interpret.grid_steps import Blocks, Outputs, Step, mark
from minipallas.ir.kernel_spec import Kernel, TracedBlockSpec
from minipallas.ir.location import Location, user_location
from minipallas.ir.types import ArrayType, RefType, is_semaphore
from minipallas.kernels.spec.aliases import output_sources
from minipallas.passes.kernel.bind_grid import I32, bind_grid


def grid_program(
    kernel: Kernel,
    name: str | None = None,
    fill: Callable[[str], Any] | None = None,
    after_each: Callable[[str, Function], None] | None = None,
    loc: Location | None = None,
) -> Function:
    """``@<name>_grid(inputs...) -> outputs``: the kernel over its whole grid (module doc).

    ``fill`` gives what unaliased outputs, the padding of partial blocks and scratch start
    holding, per dtype, written before the grid runs: the difftest swaps in other values to
    find what a kernel's outputs owe to that memory (``difftest.undefined``). By default
    (None) they hold upstream interpret mode's values, outputs and scratch unwritten (module
    doc). ``loc`` (default: the caller's line) locates errors about the whole call.

    A ``run_scoped`` with collective axes in the body raises upstream interpret mode's error
    (``ir.collectives``, context ``"cpu_kernel"``). ``after_each`` sees the bound body as the
    stage ``bind-grid``."""
    check_collective_axes(kernel.body, "cpu_kernel")
    _refuse_padding_with_aliases(kernel)
    body = bind_grid(kernel.body, kernel.grid)
    if after_each is not None:
        after_each("bind-grid", body)
    buffers = [RefType(padded_shape(s), s.array.dtype, s.memory_space) for s in _specs(kernel)]
    read_out = _marked(kernel, body, buffers[kernel.num_inputs :], loc or user_location())
    run = _GridRun(kernel, body, read_out, fill, _writes_prefetch(kernel))
    n_dyn, n_pre = len(kernel.dynamic_axes), len(kernel.scalar_prefetch)

    def program(*operands: TracedArray) -> tuple[TracedArray, ...]:
        sizes, scalars = operands[:n_dyn], operands[n_dyn : n_dyn + n_pre]
        inputs = operands[n_dyn + n_pre :]
        grid = _sizes(kernel.grid, sizes)
        return run_scoped(
            lambda *refs: _with_buffers(run, grid, sizes, scalars, inputs, refs),
            *kernel.scalar_prefetch,
            *buffers,
            *kernel.scratch_types,
        )

    name = f"{kernel.name}_grid" if name is None else name
    operand_types = (
        *[I32] * n_dyn,
        *(ArrayType(t.shape, t.dtype) for t in kernel.scalar_prefetch),
        *(s.array for s in kernel.in_specs),
    )
    return trace(program, *operand_types, name=name)


@dataclass(frozen=True, eq=False)
class _GridRun:
    """What every step of the grid program reads."""

    kernel: Kernel
    body: Function  # bound to the grid (``bind_grid``)
    read_out: Function  # the outputs' valid regions, marked for the interpreter
    fill: Callable[[str], Any] | None  # grid_program's ``fill``
    rewritten: bool  # the body writes a scalar-prefetch operand (``_writes_prefetch``)


def _specs(kernel: Kernel) -> tuple[TracedBlockSpec, ...]:
    return (*kernel.in_specs, *kernel.out_specs)


def _refuse_padding_with_aliases(kernel: Kernel) -> None:
    if kernel.input_output_aliases and any(s.padding for s in _specs(kernel)):
        raise TraceError(
            f"Padding with aliasing not supported (kernel '{kernel.name}': upstream interpret "
            "mode refuses Element padding in a call with input_output_aliases)",
            op="pallas_call",
            loc=user_location(),
            fix="pad the aliased arrays before the call (jnp.pad) and use unpadded Elements",
        )


def _with_buffers(
    run: _GridRun,
    grid: tuple,
    sizes: Sequence[TracedArray],
    scalars: Sequence[TracedArray],
    inputs: Sequence[TracedArray],
    refs: Sequence[TracedRef],
) -> tuple[TracedArray, ...]:
    """Steps 1 to 4 of the module doc, given the refs of the prefetched scalars, the operands'
    buffers and the scratch."""
    kernel, n_pre, n_bufs = run.kernel, len(run.kernel.scalar_prefetch), len(_specs(run.kernel))
    prefetch, bufs, scratch = refs[:n_pre], refs[n_pre : n_pre + n_bufs], refs[n_pre + n_bufs :]
    for ref, x in zip(prefetch, scalars, strict=True):
        ref[...] = x
    _fill_buffers(run, bufs, scratch, inputs)

    def step(indices: list[TracedArray]) -> None:
        if run.rewritten:  # upstream hands each step the operands as they came in
            for ref, x in zip(prefetch, scalars, strict=True):
                ref[...] = x
        views = [
            block_view(buf, spec, [*indices, *prefetch])
            for buf, spec in zip(bufs, _specs(kernel), strict=True)
        ]
        call(run.body, *indices, *sizes, *prefetch, *views, *scratch)

    loop_nest(grid, [], step)
    outs = call(run.read_out, *bufs[kernel.num_inputs :])
    return () if outs is None else outs if isinstance(outs, tuple) else (outs,)


def _fill_buffers(
    run: _GridRun,
    bufs: Sequence[TracedRef],
    scratch: Sequence[TracedRef],
    inputs: Sequence[TracedArray],
) -> None:
    """Step 1: inputs copied in, padding and (with ``fill``) outputs and scratch filled."""
    kernel, fill = run.kernel, run.fill
    pad = fill_value if fill is None else fill
    n_in, sources = kernel.num_inputs, output_sources(kernel)
    for buf, spec, x in zip(bufs[:n_in], kernel.in_specs, inputs, strict=True):
        copy_in(buf, spec, x, pad)
    for k, (buf, spec) in enumerate(zip(bufs[n_in:], kernel.out_specs, strict=True)):
        if k in sources:  # an aliased output starts as its input (kernels/spec/aliases.py)
            copy_in(buf, spec, inputs[sources[k]], pad)
        elif fill is None:  # unwritten: the allocation holds upstream's fill
            fill_padding(buf, spec, pad)
        else:
            buf[...] = fill(buf.type.dtype)
    if fill is not None:
        fill_scratch(scratch, fill)


def _marked(kernel: Kernel, body: Function, outputs: Sequence[RefType], loc: Location) -> Function:
    """Marks the bound body and the index maps for the interpreter (``grid_steps``: errors
    name the grid point; under checks a block outside its array is one); returns the function
    that reads the outputs out of their buffers, marked so that an output element no grid
    point wrote is one too."""
    axes = len(kernel.grid)
    mark(body, Step(kernel.name, axes))
    named = [(f"input {k}", s) for k, s in enumerate(kernel.in_specs)]
    named += [(f"output {k}", s) for k, s in enumerate(kernel.out_specs)]
    for what, spec in named:
        scales = tuple(
            1 if b is None or d in spec.element_dims else b for d, b in enumerate(spec.block_shape)
        )
        extents = tuple(
            n + lo + hi for n, (lo, hi) in zip(spec.array.shape, spec.pads, strict=True)
        )
        mark(spec.index_map, Blocks(kernel.name, axes, what, scales, extents, loc))

    def read(*bufs: TracedRef) -> tuple[TracedArray, ...]:
        return tuple(b[valid_region(s)] for b, s in zip(bufs, kernel.out_specs, strict=True))

    read_out = trace(read, *outputs, name=f"{kernel.name}_outputs")
    regions = tuple((f"output {k}", valid_region(s)) for k, s in enumerate(kernel.out_specs))
    mark(read_out, Outputs(kernel.name, regions, loc))
    return read_out


def _sizes(grid: tuple[int | None, ...], dynamic: Sequence[TracedArray]) -> tuple[Any, ...]:
    """The grid's sizes, a dynamic axis's the traced one given for it."""
    it = iter(dynamic)
    return tuple(next(it) if n is None else n for n in grid)


def _writes_prefetch(kernel: Kernel) -> bool:
    """Whether the body writes a scalar-prefetch ref. Upstream's interpret mode hands every
    grid step the operands as they came in and drops such writes, so the program then
    restores the refs before each step."""
    written = effects(kernel.body)
    return any(
        Write(k) in written or Accum(k) in written for k in range(len(kernel.scalar_prefetch))
    )


def padded_shape(spec: TracedBlockSpec) -> tuple[int, ...]:
    """The array's shape with its ``Element`` padding, rounded up to whole blocks (a squeezed
    dimension needs no rounding)."""
    return tuple(
        n + lo + hi if b is None else -(-(n + lo + hi) // b) * b
        for n, b, (lo, hi) in zip(spec.array.shape, spec.block_shape, spec.pads, strict=True)
    )


def valid_region(spec: TracedBlockSpec) -> Any:
    """The index of the array's own elements inside its padded buffer."""
    if padded_shape(spec) == spec.array.shape:
        return ...
    return tuple(slice(lo, lo + n) for n, (lo, _) in zip(spec.array.shape, spec.pads, strict=True))


def fill_scratch(refs: Sequence[TracedRef], fill: Callable[[str], Any] = fill_value) -> None:
    """Scratch starts holding the fill value, as upstream's interpret mode fills it; semaphores
    are no memory to store into: they start at 0 (their allocation) and keep counting."""
    for ref in refs:
        if not is_semaphore(ref.type):
            ref[...] = fill(ref.type.dtype)


def copy_in(
    buf: TracedRef, spec: TracedBlockSpec, x: TracedArray, fill: Callable[[str], Any] = fill_value
) -> None:
    fill_padding(buf, spec, fill)
    buf[valid_region(spec)] = x


def fill_padding(
    buf: TracedRef, spec: TracedBlockSpec, fill: Callable[[str], Any] = fill_value
) -> None:
    """Writes the fill around the array's own elements, and nothing else: one slab per padded
    side of each dimension (slabs meet at the corners)."""
    padded = padded_shape(spec)
    everything = tuple(slice(0, n) for n in padded)
    for d, (n, (lo, _)) in enumerate(zip(spec.array.shape, spec.pads, strict=True)):
        for side in (slice(0, lo), slice(lo + n, padded[d])):
            if side.stop > side.start:
                buf[(*everything[:d], side, *everything[d + 1 :])] = fill(spec.array.dtype)


def block_view(buf: TracedRef, spec: TracedBlockSpec, indices: Sequence[TracedArray]) -> Any:
    """The window of ``buf`` that the spec's index map picks at the grid point ``indices``."""
    out = call(spec.index_map, *indices)
    blocks = () if out is None else out if isinstance(out, tuple) else (out,)
    window = []
    sures = surely_nonnegative(spec.index_map)
    for d, (i, b, sure) in enumerate(zip(blocks, spec.block_shape, sures, strict=True)):
        start = i if b is None or d in spec.element_dims else i * b
        if sure:
            mark_nonnegative(start)  # the view wraps the other starts (lax.dynamic_slice's)
        window.append(start if b is None else ds(start, b))
    return buf.at[tuple(window)] if window else buf


def surely_nonnegative(index_map: Function) -> list[bool]:
    """For each block index the map returns: whether it is surely >= 0 (a grid index, which
    runs from 0, or a non-negative constant), so that no negative start needs wrapping. The
    check costs nothing at run time; the wrap it saves is a select per dimension per step."""
    made = {op.result: op for op in index_map.body.ops if len(op.results) == 1}
    grid_indices = set(index_map.params)

    def sure(v: Value) -> bool:
        op = made.get(v)
        constant = op is not None and op.name == "constant"
        return v in grid_indices or (constant and bool((op.attrs["value"].array() >= 0).all()))

    return [sure(v) for v in index_map.body.results]


def loop_nest(
    grid: tuple[int, ...], indices: list[TracedArray], step: Callable[[list], None]
) -> None:
    """``step(indices)`` at every grid point, the last axis innermost."""
    if len(indices) == len(grid):
        step(indices)
        return

    def body(i: TracedArray, carry: tuple) -> tuple:
        loop_nest(grid, [*indices, i], step)
        return carry

    fori_loop(0, grid[len(indices)], body, ())
