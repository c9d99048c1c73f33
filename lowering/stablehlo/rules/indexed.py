"""StableHLO rules for the pure indexed ops: windows read and written through an ``indexer``.

The IR's semantics (ir/indexing.py), and how each is kept here:

- a dynamic slice start is clamped into ``[0, dim - span]`` and a dynamic integer index into
  ``[0, dim - 1]``: ``stablehlo.dynamic_slice`` / ``dynamic_update_slice`` clamp exactly so
  (unsigned starts are capped first, so converting them to i32 cannot wrap); on the
  gather/scatter path the clamp is emitted explicitly;
- integer-array indices clamp on reads: emitted explicitly, so every gather is in bounds;
- integer-array indices drop out-of-range updates on writes: ``stablehlo.scatter`` skips an
  update window whose index is out of bounds (XLA's defined behaviour);
- strided windows: a static ``stablehlo.slice`` with strides after reading the whole span;
  a strided write becomes a scatter with one index per strided position;
- an empty read (an empty index array or a size-0 window) is an empty constant, not a gather:
  a gather slices size 1 along each indexed dimension, which a size-0 one does not have.
  (Scatter has no such limit: its windows out of bounds are dropped.)

Gather and scatter use one layout (``_Plan``): the batch of index tuples is the broadcast shape
of the integer and integer-array entries (``B``) followed by one axis per strided slice
(``S``); stride-1 slices stay whole windows (``W``). The numpy result layout is transposed to
and from ``[B, S, W]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from minipallas.ir import indexing
from minipallas.ir.core import Op
from minipallas.ir.errors import PassError
from minipallas.ir.indexing import Array, Dyn, Int, Slice
from minipallas.lowering.compat.jaxlib_shim import ir, stablehlo
from minipallas.lowering.stablehlo import emit
from minipallas.lowering.stablehlo.context import LoweringContext, rule


def _index(value: ir.Value, dtype: str, high: int, clamp: bool = True) -> ir.Value:
    """An index as i32, clamped into ``[0, high]`` (or, without ``clamp``, only made i32-safe).

    Unsigned indices are capped before the conversion so a large one cannot wrap to negative.
    """
    if dtype == "uint32":
        return emit.convert(stablehlo.MinOp(value, emit.like(max(high, 0), value)).result, "int32")
    value = emit.convert(value, "int32") if dtype != "int32" else value
    if not clamp:
        return value
    return stablehlo.ClampOp(emit.like(0, value), value, emit.like(max(high, 0), value)).result


def _start(
    entry: Int | Slice, dim: int, dyn: Sequence[ir.Value], types: Sequence, clamp: bool = True
) -> ir.Value:
    """The first position an integer or slice entry selects, as an i32 scalar, clamped (or,
    without ``clamp``, left for ``dynamic_slice``/``dynamic_update_slice`` to clamp)."""
    where = entry.index if isinstance(entry, Int) else entry.start
    if isinstance(where, Dyn):
        return _index(dyn[where.pos], types[where.pos].dtype, dim - indexing.span(entry), clamp)
    return emit.constant(where, "int32")


# -- contiguous windows: slice, dynamic_slice, dynamic_update_slice ---------------------------


def _window(op: Op) -> tuple[tuple, tuple[int, ...], list[int]]:
    """The indexer, the indexed array's shape, and each dim's span."""
    indexer = op.attrs["indexer"]
    return indexer, op.operands[0].type.shape, [indexing.span(e) for e in indexer]


@rule("slice", "dynamic_slice")
def read_window(ctx: LoweringContext, op: Op, x: ir.Value, *dyn: ir.Value) -> Sequence[ir.Value]:
    indexer, shape, spans = _window(op)
    strides = [e.stride if isinstance(e, Slice) else 1 for e in indexer]
    if indexing.is_static(indexer):
        starts = [e.index if isinstance(e, Int) else e.start for e in indexer]
        limits = [s + n for s, n in zip(starts, spans, strict=True)]
        window = stablehlo.SliceOp(x, starts, limits, strides).result
    else:
        dyn_types = [v.type for v in op.group("indices")]
        starts = [_start(e, d, dyn, dyn_types, False) for e, d in zip(indexer, shape, strict=True)]
        window = stablehlo.DynamicSliceOp(x, starts, spans).result
        if any(s > 1 for s in strides):
            window = stablehlo.SliceOp(window, [0] * len(spans), spans, strides).result
    return [_reshape_if_needed(window, op.result.type.shape)]


@rule("dynamic_update_slice")
def write_window(
    ctx: LoweringContext, op: Op, x: ir.Value, *operands: ir.Value
) -> Sequence[ir.Value]:
    indexer, shape, spans = _window(op)
    *dyn, update = operands
    if any(isinstance(e, Slice) and e.stride > 1 and e.size > 1 for e in indexer):
        return [_scatter(op, x, dyn, update, accumulate=False)]
    dyn_types = [v.type for v in op.group("indices")]
    starts = [_start(e, d, dyn, dyn_types, False) for e, d in zip(indexer, shape, strict=True)]
    update = _reshape_if_needed(update, spans)
    return [stablehlo.DynamicUpdateSliceOp(x, update, starts).result]


def _reshape_if_needed(x: ir.Value, shape: Sequence[int]) -> ir.Value:
    return x if emit.shape_of(x) == list(shape) else emit.reshape(x, shape)


# -- gather and scatter ------------------------------------------------------------------------


@dataclass
class _Plan:
    """How an indexer becomes stablehlo gather/scatter dimension numbers.

    ``indices`` is ``i32[*batch, rank]``: one full start position per index tuple. ``points``
    are the operand dims indexed one position at a time (integers, arrays, strided slices);
    the others are whole windows, ``slice_sizes`` long. ``to_plan`` is the permutation that
    takes a window in numpy layout to ``[B, S, W]``.
    """

    indices: ir.Value
    batch: list[int]
    points: list[int]
    slice_sizes: list[int]
    to_plan: list[int]


def _plan(op: Op, dyn: Sequence[ir.Value], write: bool) -> _Plan:
    indexer = op.attrs["indexer"]
    shape = op.operands[0].type.shape
    types = [v.type for v in op.group("indices")]
    layout = indexing.layout(indexer, [t.shape for t in types])
    b_shape = list(layout.block_shape)
    strided = [d for d, e in enumerate(indexer) if isinstance(e, Slice) and _is_strided(e)]
    windows = [d for d, e in enumerate(indexer) if isinstance(e, Slice) and not _is_strided(e)]
    batch = b_shape + [indexer[d].size for d in strided]

    def column(d: int) -> ir.Value:
        entry = indexer[d]
        if isinstance(entry, Array):
            value, dtype = dyn[entry.index.pos], types[entry.index.pos].dtype
            # Reads clamp into range; writes keep out-of-range indices so scatter drops them.
            value = _index(value, dtype, shape[d] - (0 if write else 1), clamp=not write)
            rank = len(types[entry.index.pos].shape)
            dims = list(range(len(b_shape) - rank, len(b_shape)))
            return emit.broadcast(value, batch, dims)
        start = emit.broadcast(_start(entry, shape[d], dyn, types), batch)
        if d in strided:
            axis = len(b_shape) + strided.index(d)
            steps = stablehlo.IotaOp(
                ir.RankedTensorType.get(batch, emit.element_type("int32")), axis
            )
            scaled = stablehlo.MulOp(steps.result, emit.like(entry.stride, steps.result)).result
            start = stablehlo.AddOp(start, scaled).result
        return start

    columns = [emit.reshape(column(d), [*batch, 1]) for d in range(len(shape))]
    return _Plan(
        indices=stablehlo.ConcatenateOp(columns, len(batch)).result,
        batch=batch,
        points=[d for d in range(len(shape)) if d not in windows],
        slice_sizes=[indexer[d].size if d in windows else 1 for d in range(len(shape))],
        to_plan=_to_plan(layout, strided, windows),
    )


def _to_plan(layout: indexing.WindowLayout, strided: list[int], windows: list[int]) -> list[int]:
    """For each axis of the plan's ``[B, S, W]``, its axis in the window's numpy layout
    (``layout``: B where the first integer entry stood if they are adjacent, first otherwise)."""
    b_axes = range(layout.block, layout.block + len(layout.block_shape))
    return [*b_axes, *(layout.axes[d][0] for d in strided), *(layout.axes[d][0] for d in windows)]


def _is_strided(entry: Slice) -> bool:
    return entry.stride > 1 and entry.size > 1


@rule("gather")
def gather(ctx: LoweringContext, op: Op, x: ir.Value, *dyn: ir.Value) -> Sequence[ir.Value]:
    result_type = op.result.type
    if result_type.size == 0:  # nothing to read; a size-0 operand dim has no slice of size 1
        return [emit.constant(0, result_type.dtype, result_type.shape)]
    if op.operands[0].type.size == 0:  # a non-empty read from a size-0 dimension
        raise PassError(
            "cannot gather from a size-0 dimension",
            op=op.name,
            loc=op.loc,
            fix="the interpreter rejects this read too; check the indexed array's shape",
        )
    plan = _plan(op, dyn, write=False)
    n_batch, rank = len(plan.batch), len(plan.slice_sizes)
    windows = [s for d, s in enumerate(plan.slice_sizes) if d not in plan.points]
    numbers = stablehlo.GatherDimensionNumbers.get(
        offset_dims=list(range(n_batch, n_batch + len(windows))),
        collapsed_slice_dims=plan.points,
        operand_batching_dims=[],
        start_indices_batching_dims=[],
        start_index_map=list(range(rank)),
        index_vector_dim=n_batch,
    )
    element = emit.element_type(op.result.type.dtype)
    result = ir.RankedTensorType.get([*plan.batch, *windows], element)
    out = stablehlo.GatherOp(
        x, plan.indices, numbers, plan.slice_sizes, indices_are_sorted=False, results=[result]
    ).result
    return [emit.transpose(out, list(np.argsort(plan.to_plan)))]


@rule("scatter", "scatter_add")
def scatter(ctx: LoweringContext, op: Op, x: ir.Value, *operands: ir.Value) -> Sequence[ir.Value]:
    *dyn, update = operands
    return [_scatter(op, x, dyn, update, accumulate=op.name == "scatter_add")]


def _scatter(
    op: Op, x: ir.Value, dyn: Sequence[ir.Value], update: ir.Value, accumulate: bool
) -> ir.Value:
    plan = _plan(op, dyn, write=True)
    n_batch, rank = len(plan.batch), len(plan.slice_sizes)
    n_windows = rank - len(plan.points)
    numbers = stablehlo.ScatterDimensionNumbers.get(
        update_window_dims=list(range(n_batch, n_batch + n_windows)),
        inserted_window_dims=plan.points,
        input_batching_dims=[],
        scatter_indices_batching_dims=[],
        scattered_dims_to_operand_dims=list(range(rank)),
        index_vector_dim=n_batch,
    )
    update = emit.transpose(update, plan.to_plan)
    scatter_op = stablehlo.ScatterOp(
        [x.type],
        [x],
        plan.indices,
        [update],
        numbers,
        indices_are_sorted=False,
        unique_indices=False,
    )
    element = ir.RankedTensorType.get([], ir.RankedTensorType(x.type).element_type)
    body = scatter_op.update_computation.blocks.append(element, element)
    with ir.InsertionPoint(body):
        old, new = body.arguments
        stablehlo.ReturnOp([stablehlo.AddOp(old, new).result if accumulate else new])
    return scatter_op.results[0]
