"""Triton rules for the kernel's operand refs: blocks of global memory, read and written through
pointer tensors.

A kernel operand is a ``!tt.ptr`` to the whole array. The body sees one block of it, placed by
the block spec's index map; a view (``ref.at``, ``ref.transpose``) narrows or reorders that
block. A ``BlockRef`` records, per dimension of the whole array, which positions the ref covers
(``Dim``), so every state op computes its pointers the same way:

1. Resolve the op's indexer against the ref: each indexer entry picks positions in one array
   dimension (a slice, an integer, an integer array), dynamic indices clamped into the ref as
   the IR defines (integer-array writes instead drop out-of-range lanes, as a mask).
2. The element offset is ``sum(position_d * stride_d)``: the scalar part (block starts, fixed
   positions) folds into one ``tt.addptr`` on the scalar pointer; the varying part is a
   ``tt.make_range`` per sliced dimension, scaled, ``tt.expand_dims``/``tt.broadcast`` to the
   window's shape and added, and the pointer is ``tt.splat`` then ``tt.addptr``'d to a tensor.
3. A dimension whose blocks may overhang the array (its size is not a multiple of the block
   size) adds ``position < size`` to the access's mask; a masked ``load``/``store`` from the IR
   adds its own mask. Masked-off loads read ``other``, or the fill value (NaN / int minimum /
   False) that the CPU path pads overhanging blocks with.

A ``swap`` whose old value nobody reads is a plain ``tt.store``: no load before it.
``addupdate`` is a load, an add and a store (one program owns each output block).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from minipallas.ir import dtypes, indexing
from minipallas.ir.core import Op
from minipallas.ir.errors import PassError
from minipallas.ir.indexing import Array, Dyn, Int, Slice
from minipallas.lowering.gpu import emit
from minipallas.lowering.gpu.context import BlockRef, Dim, LoweringContext, rule
from minipallas.lowering.gpu.emit import Index, arith, ir, tt

# --- step 1 and 2: an indexer on a ref, as positions, pointers and a mask -------------------------


@dataclass
class _Access:
    """The pointers (scalar or tensor) of one state op's window, and its mask (or None)."""

    pointer: ir.Value
    mask: ir.Value | None
    shape: list[int]


@dataclass(frozen=True)
class _Offsets:
    """Where a window lies, for any operand of the array's shape: the element offset of its
    first element (``scalar``), the offsets of the rest from it (``tensor``), the mask."""

    scalar: Index
    tensor: ir.Value | None
    mask: ir.Value | None
    shape: list[int]


def _access(
    ctx: LoweringContext,
    ref: BlockRef,
    indexer: indexing.Indexer,
    dyn: Sequence[ir.Value],
    dyn_types: Sequence[Any],
    write: bool,
) -> _Access:
    """Steps 1 and 2 of the module doc for one state op. Operands of one shape read with the
    same block position and indexer share one offset computation."""
    write = write and indexing.has_arrays(indexer)  # only integer arrays read and write apart
    key = (ref.array.shape, ref.dims, ref.order, indexer, tuple(dyn), tuple(dyn_types), write)
    where = ctx.memo(key, lambda: _offsets(ref, indexer, dyn, dyn_types, write))
    pointer = ref.pointer
    if not (isinstance(where.scalar, int) and where.scalar == 0):
        pointer = tt.addptr(pointer.type, pointer, emit.i32(where.scalar))
    if where.shape:
        pointer = emit.splat(pointer, where.shape)
        if where.tensor is not None:
            pointer = tt.addptr(pointer.type, pointer, where.tensor)
    if ref.array.dtype == "bool":  # bytes in memory
        target = emit.shaped(emit.pointer_type("bool", memory=True), where.shape)
        pointer = tt.bitcast(target, pointer)
    return _Access(pointer, where.mask, where.shape)


def _offsets(
    ref: BlockRef,
    indexer: indexing.Indexer,
    dyn: Sequence[ir.Value],
    dyn_types: Sequence[Any],
    write: bool,
) -> _Offsets:
    layout = indexing.layout(indexer, [t.shape for t in dyn_types])
    shape, rank = list(layout.shape), len(layout.shape)
    strides = np.cumprod((1, *ref.array.shape[::-1]))[-2::-1].tolist()
    fixed = {d: dim for d, dim in enumerate(ref.dims) if d not in ref.order}
    scalar: Index = 0
    terms: list[ir.Value] = []  # rank-`rank` tensors with 1s where they do not vary
    conditions: list[ir.Value] = []
    for d, dim in fixed.items():
        scalar = emit.add(scalar, emit.mul(dim.start, strides[d]))
        if dim.overhang:
            conditions.append(emit.less(dim.start, ref.array.shape[d]))
    for entry, d, axis in zip(indexer, ref.order, layout.axes, strict=True):
        dim = ref.dims[d]
        n = ref.array.shape[d]
        if isinstance(entry, Slice):
            start = _clamped(entry.start, dyn, dyn_types, 0, dim.size - indexing.span(entry))
            first = emit.add(dim.start, emit.mul(start, dim.stride))
            step = dim.stride * entry.stride
            scalar = emit.add(scalar, emit.mul(first, strides[d]))
            steps = _range(entry.size, rank, axis[0])
            if entry.size > 1:
                terms.append(emit.mul(steps, step * strides[d]))
            if dim.overhang:
                limit = emit.sub(n, first)
                conditions.append(emit.less(emit.mul(steps, step), limit))
            continue
        if isinstance(entry, Int):
            position = _clamped(entry.index, dyn, dyn_types, 0, dim.size - 1)
        else:
            position, inside = _array_index(entry, dyn, dyn_types, dim.size, rank, axis, write)
            if inside is not None:
                conditions.append(inside)
        position = emit.add(dim.start, emit.mul(position, dim.stride))
        if isinstance(position, int) or not emit.is_tensor(position):
            scalar = emit.add(scalar, emit.mul(position, strides[d]))
        else:
            terms.append(emit.mul(position, strides[d]))
        if dim.overhang:
            conditions.append(emit.less(position, n))
    offsets = None
    if terms:
        offsets = emit.broadcast_to(terms[0], shape)
        for term in terms[1:]:
            offsets = arith.addi(offsets, emit.broadcast_to(term, shape))
    return _Offsets(scalar, offsets, _conjunction(conditions, shape), shape)


def _clamped(
    index: int | Dyn, dyn: Sequence[ir.Value], dyn_types: Sequence[Any], low: int, high: int
) -> Index:
    """A static index as is (the verifier checked it); a dynamic one clamped into range."""
    if isinstance(index, int):
        return index
    value = emit.to_i32(dyn[index.pos], dyn_types[index.pos].dtype)
    return emit.clamp(value, low, high)


def _range(size: int, rank: int, axis: int) -> Index:
    """``0, 1, ..., size-1`` along result ``axis`` of a rank-``rank`` tensor (1s elsewhere)."""
    if size == 1:
        return 0
    steps = tt.make_range(emit.shaped(emit.element_type("int32"), [size]), 0, size)
    return emit.expand(steps, rank, [axis])


def _array_index(
    entry: Array,
    dyn: Sequence[ir.Value],
    dyn_types: Sequence[Any],
    size: int,
    rank: int,
    axes: tuple[int, ...],
    write: bool,
) -> tuple[ir.Value, ir.Value | None]:
    """An integer-array index placed on its result axes: clamped for reads; for writes left as
    is, with a mask that drops the out-of-range lanes."""
    value = emit.to_i32(dyn[entry.index.pos], dyn_types[entry.index.pos].dtype)
    value = emit.expand(value, rank, list(axes))
    if not write:
        return emit.clamp(value, 0, size - 1), None
    inside = arith.andi(
        arith.cmpi(arith.CmpIPredicate.sge, value, emit.i32(0, emit.shape_of(value))),
        emit.less(value, size),
    )
    return value, inside


def _conjunction(conditions: Sequence[ir.Value | bool], shape: list[int]) -> ir.Value | None:
    mask = None
    for condition in conditions:
        if condition is True:
            continue
        if condition is False:
            condition = emit.constant(False, "bool")
        condition = emit.broadcast_to(condition, shape)
        mask = condition if mask is None else arith.andi(mask, condition)
    return mask


# --- loads and stores ---------------------------------------------------------------------------


def _load(access: _Access, dtype: str, other: ir.Value | None = None) -> ir.Value:
    """``tt.load``; masked-off lanes read ``other`` (default: the fill value)."""
    if access.mask is not None and other is None:
        other = emit.constant(dtypes.fill_value(dtype), dtype, access.shape)
    if other is not None and dtype == "bool":
        other = _to_memory(other)
    value = tt.load(access.pointer, mask=access.mask, other=other)
    if dtype == "bool":
        value = arith.cmpi(arith.CmpIPredicate.ne, value, emit.constant(0, "int8", access.shape))
    return value


def _store(access: _Access, value: ir.Value, dtype: str, mask: ir.Value | None = None) -> None:
    if access.mask is not None:
        mask = access.mask if mask is None else arith.andi(mask, access.mask)
    tt.store(access.pointer, _to_memory(value) if dtype == "bool" else value, mask=mask)


def _to_memory(value: ir.Value) -> ir.Value:
    """An ``i1`` value as the byte ``bool`` is stored as."""
    target = emit.shaped(ir.IntegerType.get_signless(8), emit.shape_of(value))
    return arith.extui(target, value)


def _ref(op: Op, ref: Any) -> BlockRef:
    if not isinstance(ref, BlockRef):
        raise PassError(
            "reaches the Triton emitter with a ref that is not a kernel operand",
            op=op.name,
            loc=op.loc,
            fix="scoped refs are discharged to registers before emission; this is a bug",
        )
    return ref


def _window(
    ctx: LoweringContext, op: Op, ref: Any, args: Sequence[Any], write: bool
) -> tuple[_Access, list[Any]]:
    ref = _ref(op, ref)
    indexer = op.attrs["indexer"]
    indices = op.group("indices")  # ``args``: the indices, then the value operands
    dyn_types = [v.type for v in indices]
    n = len(indices)
    return _access(ctx, ref, indexer, args[:n], dyn_types, write), list(args[n:])


@rule("get")
def get(ctx: LoweringContext, op: Op, ref: Any, *args: Any) -> Sequence[Any]:
    access, _ = _window(ctx, op, ref, args, write=False)
    return [_load(access, op.result.type.dtype)]


@rule("swap")
def swap(ctx: LoweringContext, op: Op, ref: Any, *args: Any) -> Sequence[Any]:
    access, (value,) = _window(ctx, op, ref, args, write=True)
    dtype = op.result.type.dtype
    old = _load(access, dtype) if ctx.is_used(op.result) else None
    _store(access, value, dtype)
    return [old]


@rule("load")
def load(ctx: LoweringContext, op: Op, ref: Any, *args: Any) -> Sequence[Any]:
    access, rest = _window(ctx, op, ref, args, write=False)
    dtype = op.result.type.dtype
    if not op.attrs.get("masked"):
        return [_load(access, dtype)]
    mask = emit.broadcast_to(rest[0], access.shape)
    other = None
    if op.attrs.get("has_other"):
        other = emit.broadcast_to(rest[1], access.shape)
        if access.mask is not None:  # past the array's end reads the fill value, as on CPU
            fill = emit.constant(dtypes.fill_value(dtype), dtype, access.shape)
            other = arith.select(access.mask, other, fill)
    bounded = mask if access.mask is None else arith.andi(mask, access.mask)
    return [_load(replace(access, mask=bounded), dtype, other)]


@rule("store")
def store(ctx: LoweringContext, op: Op, ref: Any, *args: Any) -> Sequence[Any]:
    access, rest = _window(ctx, op, ref, args, write=True)
    mask = rest[1] if op.attrs.get("masked") else None
    _store(access, rest[0], op.operands[0].type.dtype, mask)
    return []


@rule("addupdate")
def addupdate(ctx: LoweringContext, op: Op, ref: Any, *args: Any) -> Sequence[Any]:
    access, (value,) = _window(ctx, op, ref, args, write=True)
    dtype = op.operands[0].type.dtype
    old = _load(access, dtype)
    total = arith.addf(old, value) if dtypes.is_float(dtype) else arith.addi(old, value)
    _store(access, total, dtype)
    return []


# --- views ------------------------------------------------------------------------------------


@rule("ref.at")
def ref_at(ctx: LoweringContext, op: Op, ref: Any, *dyn: Any) -> Sequence[Any]:
    """A window of the block: integer entries fix a dimension, slices narrow it."""
    ref = _ref(op, ref)
    dyn_types = [v.type for v in op.group("indices")]
    dims = list(ref.dims)
    order = []
    for entry, d in zip(op.attrs["indexer"], ref.order, strict=True):
        dim = dims[d]
        if isinstance(entry, Int):
            position = _clamped(entry.index, dyn, dyn_types, 0, dim.size - 1)
            start = emit.add(dim.start, emit.mul(position, dim.stride))
            dims[d] = Dim(start, None, dim.stride, dim.overhang)
        else:
            position = _clamped(entry.start, dyn, dyn_types, 0, dim.size - indexing.span(entry))
            start = emit.add(dim.start, emit.mul(position, dim.stride))
            dims[d] = Dim(start, entry.size, dim.stride * entry.stride, dim.overhang)
            order.append(d)
    return [BlockRef(ref.pointer, ref.array, tuple(dims), tuple(order))]


@rule("ref.transpose")
def ref_transpose(ctx: LoweringContext, op: Op, ref: Any) -> Sequence[Any]:
    ref = _ref(op, ref)
    order = tuple(ref.order[p] for p in op.attrs["permutation"])
    return [replace(ref, order=order)]
