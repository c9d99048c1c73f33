"""``jax.vmap`` of a kernel: one more grid axis, as upstream's batching adds one.

Upstream's ``pallas_call`` batching rule (``_pallas_call_batching_rule``) does not loop over
the batch: it prepends a grid axis of the batch's size, gives every batched operand a leading
squeezed block dimension indexed by that axis, and keeps the body as it was, its
``program_id``/``num_programs`` counting the user's axes only. ``batched_kernel`` builds the
same ``Kernel`` from a traced one, so on a TPU the batch is one Mosaic kernel with one more
(``parallel``) grid axis, and on the CPU each batch element's blocks go through the same ops
as the unbatched call's (bits kept: ``tests/kernels/test_pallas_call_jax.py``):

1. the grid is ``(size, *grid)``; given dimension semantics get ``"parallel"`` in front, as
   upstream's Mosaic lowering gives its vmapped axes (none given: the emitter infers them);
2. every index map takes the batch index first; a batched operand's (and every output's)
   returns it as the block index of a new leading squeezed dimension, an unbatched one's
   ignores it;
3. ``program_id``/``num_programs`` of axis ``k`` in the body (and in every function it calls)
   ask for axis ``k + 1``;
4. a cost estimate's flops, transcendentals and bytes accessed are ``size`` times the
   unbatched call's, its remote bytes 0, as upstream's batching rule scales it.

A batched dynamic grid size or scalar-prefetch operand has no such form (upstream loops over
the batch then, and so does the primitive's batching rule).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from minipallas.ir.builder import params
from minipallas.ir.core import Block, Function, Op
from minipallas.ir.kernel_spec import CostEstimate, Kernel, TracedBlockSpec
from minipallas.ir.types import ArrayType

I32 = ArrayType((), "int32")
GRID_QUERIES = frozenset({"program_id", "num_programs"})


def batched_kernel(kernel: Kernel, size: int, mapped: Sequence[bool]) -> Kernel:
    """``kernel`` over a batch of ``size`` along a new leading grid axis; ``mapped`` says which
    inputs carry the batch (as their leading dimension); every output does."""
    semantics = kernel.dimension_semantics
    return replace(
        kernel,
        body=regrid_queries(kernel.body, range(1, len(kernel.grid) + 1)),
        grid=(size, *kernel.grid),
        in_specs=tuple(_spec(s, size, m) for s, m in zip(kernel.in_specs, mapped, strict=True)),
        out_specs=tuple(_spec(s, size, True) for s in kernel.out_specs),
        dimension_semantics=None if semantics is None else ("parallel", *semantics),
        cost_estimate=_batched_cost(kernel.cost_estimate, size),
    )


def _batched_cost(cost: CostEstimate | None, size: int) -> CostEstimate | None:
    if cost is None:
        return None
    return CostEstimate(cost.flops * size, cost.transcendentals * size, cost.bytes_accessed * size)


def _spec(spec: TracedBlockSpec, size: int, mapped: bool) -> TracedBlockSpec:
    (batch,) = params([I32])
    old = spec.index_map
    results = (batch, *old.body.results) if mapped else old.body.results
    index_map = Function(old.name, Block((batch, *old.params), old.body.ops, results))
    if not mapped:
        return replace(spec, index_map=index_map)
    return replace(
        spec,
        array=ArrayType((size, *spec.array.shape), spec.array.dtype),
        block_shape=(None, *spec.block_shape),
        index_map=index_map,
        element_dims=frozenset(d + 1 for d in spec.element_dims),
        padding=((0, 0), *spec.padding) if spec.padding else (),
    )


def regrid_queries(body: Function, axes: Iterable[int]) -> Function:
    """``body`` with its ``program_id``/``num_programs`` of axis ``k`` asking for axis
    ``axes[k]`` of a grid that has more axes (the batch axes, which the body does not see)."""
    return _Regrid(tuple(axes)).function(body)


class _Regrid:
    """Grid queries moved to the axes of a larger grid, through regions and called functions;
    each function rewritten once (a dict keyed by the functions of this one rewrite)."""

    def __init__(self, axes: tuple[int, ...]) -> None:
        self.axes = axes
        self.done: dict[Function, Function] = {}

    def function(self, fn: Function) -> Function:
        if fn not in self.done:
            self.done[fn] = Function(fn.name, self.block(fn.body))
        return self.done[fn]

    def block(self, block: Block) -> Block:
        return Block(block.params, tuple(self.op(op) for op in block.ops), block.results)

    def op(self, op: Op) -> Op:
        attrs = {k: self.attr(v) for k, v in op.attrs.items()}
        if op.name in GRID_QUERIES:
            attrs["axis"] = self.axes[op.attrs["axis"]]
        return op.replace(attrs=attrs, regions=tuple(self.block(r) for r in op.regions))

    def attr(self, value: Any) -> Any:
        return self.function(value) if isinstance(value, Function) else value
