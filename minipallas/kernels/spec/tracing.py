"""From a user's ``pallas_call`` to a ``Kernel``: block specs checked, index maps and body traced.

Steps, for one set of input types:
1. each operand's spec is normalized: a missing spec, or one without ``block_shape``, is the
   whole array in one block; ``None`` entries of a block shape are squeezed dimensions;
2. each index map is traced into a Function from one ``i32[]`` per grid axis (then the
   scalar-prefetch refs, if any) to one ``i32[]`` block index per array dimension (Python
   ints it returns become constants);
3. the body is traced over refs ``[*scalar_prefetch, *inputs, *outputs, *scratch]``, the
   blocks each in its spec's memory space (or the default one asked for), and must return
   nothing;
4. ``program_id`` / ``num_programs`` in the body must name an axis of the grid.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from minipallas.frontend.collective import named_grid
from minipallas.frontend.scopes import mark_nonnegative, trace_error
from minipallas.frontend.tracing import check_arity, defined_at, function_name, trace
from minipallas.frontend.values import TracedArray, as_result, astype
from minipallas.ir import dtypes
from minipallas.ir.core import Function
from minipallas.ir.errors import TraceError
from minipallas.ir.kernel_spec import BlockSpec, CostEstimate, Element, Kernel, TracedBlockSpec
from minipallas.ir.types import ArrayType, MemorySpace, RefType
from minipallas.kernels.spec.params import pipeline_mode

I32 = ArrayType((), "int32")


def trace_kernel(
    body: Callable[..., Any],
    *,
    name: str | None,
    grid: tuple[int | None, ...],
    inputs: Sequence[ArrayType],
    outputs: Sequence[ArrayType],
    in_specs: Sequence[BlockSpec | None],
    out_specs: Sequence[BlockSpec | None],
    scratch_types: Sequence[RefType],
    dimension_semantics: tuple[str, ...] | None,
    memory_space: MemorySpace,
    scalar_prefetch: Sequence[RefType] = (),
    grid_names: tuple[str, ...] | None = None,
    cost_estimate: CostEstimate | None = None,
    metadata: tuple[tuple[str, str], ...] = (),
    fuse_transposed_lhs: bool = False,
    vmem_limit_bytes: int | None = None,
) -> Kernel:
    """The ``Kernel`` of ``body`` for these operand types (see the module doc); ``grid`` has
    ``None`` for a dynamic size; with ``grid_names``, ``axis_index(name)`` in the body is the
    ``program_id`` of the axis of that name. ``cost_estimate`` and ``metadata`` (checked by
    ``params``) are the kernel's as given."""
    name = kernel_name(body) if name is None else name
    prefetch = tuple(scalar_prefetch)
    traced_in = [
        trace_spec(s, t, grid, memory_space, f"input {k}", name, prefetch)
        for k, (s, t) in enumerate(zip(in_specs, inputs, strict=True))
    ]
    traced_out = [
        trace_spec(s, t, grid, memory_space, f"output {k}", name, prefetch)
        for k, (s, t) in enumerate(zip(out_specs, outputs, strict=True))
    ]
    refs = [*prefetch, *(s.ref_type for s in (*traced_in, *traced_out)), *scratch_types]
    check_arity(
        body,
        len(refs),
        f"the kernel @{name}",
        f"pallas_call passes it {len(refs)} refs ("
        + (f"{len(prefetch)} scalar prefetch, " if prefetch else "")
        + f"{len(inputs)} inputs, {len(outputs)} outputs, {len(scratch_types)} scratch)",
    )
    with named_grid(grid_names):
        fn = trace(body, *refs, name=name)
    if fn.result_types:
        raise trace_error(
            f"the kernel @{name} returns {len(fn.result_types)} value(s); a kernel returns nothing",
            fix="write results into the output refs: o_ref[...] = value",
        )
    check_grid_axes(fn, len(grid))
    return Kernel(
        name, fn, grid, tuple(traced_in), tuple(traced_out), tuple(scratch_types),
        dimension_semantics, scalar_prefetch=prefetch, cost_estimate=cost_estimate,
        metadata=metadata, fuse_transposed_lhs=fuse_transposed_lhs,
        vmem_limit_bytes=vmem_limit_bytes,
    )  # fmt: skip


def kernel_name(body: Callable[..., Any]) -> str:
    """The kernel's function name, looking through ``functools.partial``."""
    while isinstance(body, functools.partial):
        body = body.func
    return function_name(body)


def trace_spec(
    spec: BlockSpec | None,
    array: ArrayType,
    grid: tuple[int | None, ...],
    memory_space: MemorySpace,
    what: str,
    kernel: str = "kernel",
    scalar_prefetch: Sequence[RefType] = (),
) -> TracedBlockSpec:
    """One operand's block spec with its index map traced (named ``<kernel>_<what>_index_map``);
    the index map takes the ``scalar_prefetch`` refs after the grid indices."""
    spec = BlockSpec() if spec is None else spec
    if not isinstance(spec, BlockSpec):
        raise trace_error(
            f"the spec of {what} must be a minipallas.BlockSpec or None, got {spec!r}",
            fix="use minipallas.BlockSpec(block_shape, index_map)",
        )
    block, element_dims, padding = _block_shape(spec.block_shape, array, what)
    index_map = spec.index_map
    if index_map is None:
        index_map = whole_array_map(array.ndim)
    space = memory_space if spec.memory_space is None else spec.memory_space
    ref_shape = tuple(b for b in block if b is not None)
    return TracedBlockSpec(
        array=array,
        block_shape=block,
        index_map=trace_index_map(index_map, len(grid), array.ndim, what, kernel, scalar_prefetch),
        ref_type=RefType(ref_shape, array.dtype, space),
        element_dims=element_dims,
        padding=padding,
        pipeline_mode=pipeline_mode(spec.pipeline_mode),
    )


def _block_shape(
    block_shape: Sequence[int | Element | None] | None, array: ArrayType, what: str
) -> tuple[tuple[int | None, ...], frozenset[int], tuple[tuple[int, int], ...]]:
    """The block sizes (None: squeezed), the dimensions given as ``Element``s, and their
    padding (``TracedBlockSpec.padding``)."""
    if block_shape is None:
        return array.shape, frozenset(), ()
    block = tuple(block_shape)
    element_dims = frozenset(d for d, b in enumerate(block) if isinstance(b, Element))
    padding = tuple(_padding(b, what) if isinstance(b, Element) else (0, 0) for b in block)
    block = tuple(b.block_size if isinstance(b, Element) else b for b in block)
    if len(block) != array.ndim:
        raise trace_error(
            f"the block shape {block} of {what} has {len(block)} dimensions, "
            f"but the array {array} has {array.ndim}",
            fix="give one block size (or None to squeeze) per array dimension",
        )
    for b in block:
        if b is not None and (isinstance(b, bool) or not isinstance(b, int) or b < 1):
            raise trace_error(
                f"the block shape {block} of {what} must hold positive ints or None, got {b!r}"
            )
    sizes = tuple(None if b is None else int(b) for b in block)
    return sizes, element_dims, padding if any(p != (0, 0) for p in padding) else ()


def _padding(dim: Element, what: str) -> tuple[int, int]:
    """An ``Element``'s ``(low, high)`` padding as ints; each must be a non-negative int."""
    pad = tuple(dim.padding) if isinstance(dim.padding, tuple | list) else (dim.padding,)
    if len(pad) != 2 or not all(
        isinstance(p, int | np.integer) and not isinstance(p, bool) and p >= 0 for p in pad
    ):
        raise trace_error(
            f"the block dimension {dim} of {what} must have a padding of two non-negative "
            f"ints (low, high), got {dim.padding!r}",
            fix="use minipallas.Element(block_size, padding=(low, high)) with low, high >= 0",
        )
    return int(pad[0]), int(pad[1])


def whole_array_map(ndim: int) -> Callable[..., tuple[int, ...]]:
    """The index map of a block that is its whole array: block (0, ..., 0) at every point."""

    def whole_array(*grid_indices_and_prefetch: Any) -> tuple[int, ...]:
        return (0,) * ndim

    return whole_array


def trace_index_map(
    index_map: Callable[..., Any],
    n_axes: int,
    ndim: int,
    what: str,
    kernel: str = "kernel",
    scalar_prefetch: Sequence[RefType] = (),
) -> Function:
    """``index_map`` as a Function ``(i32[] per grid axis, *scalar_prefetch refs) ->
    (i32[] per array dimension)``."""
    if not callable(index_map):
        raise trace_error(f"the index map of {what} must be callable, got {index_map!r}")
    n_prefetch = len(scalar_prefetch)
    check_arity(
        index_map,
        n_axes + n_prefetch,
        f"the index map of {what}",
        f"the grid has {n_axes} axes"
        + (f" and the call {n_prefetch} scalar-prefetch refs" if n_prefetch else ""),
    )

    def block_indices(*args: Any) -> tuple[TracedArray, ...]:
        for i in args[:n_axes]:
            mark_nonnegative(i)  # a grid index: indexing a prefetch ref with it needs no wrap
        out = index_map(*args)
        items = tuple(out) if isinstance(out, tuple | list) else (out,)
        if len(items) != ndim:
            raise TraceError(
                f"the index map of {what} returns {len(items)} block indices, "
                f"but the array has {ndim} dimensions",
                loc=defined_at(index_map),
                fix=f"return a tuple of {ndim} ints, one per array dimension",
            )
        return tuple(_block_index(x, what, index_map) for x in items)

    name = f"{kernel}_{what.replace(' ', '')}_index_map"
    return trace(block_indices, *[I32] * n_axes, *scalar_prefetch, name=name)


def _block_index(x: Any, what: str, index_map: Callable[..., Any]) -> TracedArray:
    """One block index an index map returned, as ``i32[]``; an error is located at the
    index map itself (the call that traces it may be far from it, or in minipallas-opt)."""
    value = as_result(x, f"the index map of {what}")
    if value.shape != () or not dtypes.is_int(value.type.dtype):
        raise TraceError(
            f"the index map of {what} must return integer scalars, got {value.type}",
            loc=defined_at(index_map),
            fix="return grid indices or ints, e.g. lambda i, j: (i, 0)",
        )
    return astype(value, "int32")


def check_grid_axes(fn: Function, n_axes: int) -> None:
    """``program_id``/``num_programs`` in ``fn`` (and its callees) name existing grid axes."""
    for f in (fn, *fn.callees()):
        for op in f.walk():
            if op.name in ("program_id", "num_programs") and op.attrs["axis"] >= n_axes:
                raise TraceError(
                    f"asks for grid axis {op.attrs['axis']}, but the grid has {n_axes} axes",
                    op=op.name,
                    loc=op.loc,
                    fix="use an axis below the grid's rank, or give pallas_call a larger grid",
                )
