"""Small Mosaic builders shared by the rule files: types, constants, casts and broadcasts.

Mosaic's conventions, as upstream Pallas writes them:
- an array of shape ``()`` is a plain scalar (``f32``, ``i32``, ``i1``); any other is a
  ``vector<...>``;
- integers are signless (``uint32`` is ``i32``; the rules pick unsigned ops from the dtype);
- ``bool`` is ``i1`` in values but ``i32`` in memory (a ``memref`` of ``bool`` holds ``i32``);
- memory indices are ``index`` values; grid indices and loop counters are ``i32``;
- semaphores are ``memref``s of ``!tpu.semaphore`` in ``#tpu.memory_space<semaphore_mem>``.
Each function emits at the current insertion point and location.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.conversions import to_dtype
from minipallas.ir.types import (
    ANY,
    DMA_SEMAPHORE,
    SEMAPHORE,
    TPU_SMEM,
    TPU_VMEM,
    ArrayType,
    MemorySpace,
    RefType,
)
from minipallas.lowering.compat.jaxlib_shim import arith, ir, tpu, vector
from minipallas.lowering.mlir_types import WIDTH, signless_type

# Mosaic's name of each memory space (the rest is VMEM), and the element of a semaphore memref
MEMORY_SPACE = {
    ANY: "any",
    TPU_SMEM: "smem",
    SEMAPHORE: "semaphore_mem",
    DMA_SEMAPHORE: "semaphore_mem",
}
SEMAPHORE_ELEMENT = {SEMAPHORE: "!tpu.semaphore", DMA_SEMAPHORE: "!tpu.dma_semaphore"}


def element_type(dtype: str, in_memory: bool = False) -> ir.Type:
    """The MLIR element type of a dtype; ``bool`` is ``i1``, or ``i32`` when ``in_memory``."""
    return signless_type(dtype, 32 if in_memory else 1)


def value_type(t: ArrayType) -> ir.Type:
    """A scalar type for shape ``()``, else a vector type."""
    if not t.shape:
        return element_type(t.dtype)
    return ir.VectorType.get(list(t.shape), element_type(t.dtype))


def space_name(space: MemorySpace) -> str:
    """Mosaic's name for a memory space: ``vmem`` (the default), ``smem``, ``any`` or
    ``semaphore_mem``."""
    return MEMORY_SPACE.get(space, "vmem")


def memory_space_attr(space: MemorySpace) -> ir.Attribute:
    return ir.Attribute.parse(f"#tpu.memory_space<{space_name(space)}>")


def memref_type(shape: Sequence[int], dtype: str, space: MemorySpace) -> ir.MemRefType:
    """A memref of ``dtype`` in ``space``; in the semaphore spaces its elements are
    ``!tpu.semaphore`` or ``!tpu.dma_semaphore`` (the int32 counters are not memory Mosaic
    loads from)."""
    if space in SEMAPHORE_ELEMENT:
        element = ir.Type.parse(SEMAPHORE_ELEMENT[space])
    else:
        element = element_type(dtype, in_memory=True)
    return ir.MemRefType.get(list(shape), element, memory_space=memory_space_attr(space))


def ref_memref_type(t: RefType) -> ir.MemRefType:
    return memref_type(t.shape, t.dtype, t.memory_space)


def scratch_space(t: RefType) -> RefType:
    """``t`` in the memory space its scratch buffer takes: VMEM when it names none."""
    return RefType(t.shape, t.dtype, TPU_VMEM) if t.memory_space == ANY else t


def i32(value: int) -> ir.Value:
    return arith.constant(ir.IntegerType.get_signless(32), value)


def index(value: int) -> ir.Value:
    return arith.constant(ir.IndexType.get(), value)


def constant(value: object, t: ArrayType) -> ir.Value:
    """A constant of type ``t``: ``value`` is a scalar (a splat) or an array of ``t``'s shape.

    Vectors travel as their bits, so NaN payloads and signed zeros survive exactly.
    """
    array = to_dtype(value, t.dtype)
    element = element_type(t.dtype)
    if not t.shape:
        scalar = array.reshape(())
        if dtypes.is_float(t.dtype):
            return arith.constant(element, ir.FloatAttr.get(element, float(scalar)))
        return arith.constant(element, ir.IntegerAttr.get(element, _signless(scalar, t.dtype)))
    if array.size and is_splat(array):
        array = array.reshape(-1)[:1]  # one element stands for all
    if dtypes.is_float(t.dtype):
        array = array.view(np.uint16 if WIDTH[t.dtype] == 16 else np.uint32)
    attr = ir.DenseElementsAttr.get(np.ascontiguousarray(array), type=value_type(t))
    return arith.constant(value_type(t), attr)


def is_splat(array: np.ndarray) -> bool:
    """Whether every element has the first one's bits (NaN payloads and signed zeros told
    apart)."""
    flat = np.ascontiguousarray(array).reshape(-1)
    return bool((flat.view(np.uint8).reshape(flat.size, -1) == flat[:1].view(np.uint8)).all())


def _signless(scalar: np.ndarray, dtype: str) -> int:
    """An integer's value as MLIR's signless attribute wants it (uint32 above 2**31 wraps)."""
    if dtype == "bool":
        return int(bool(scalar))
    value = int(scalar)
    width = WIDTH[dtype]
    return value - (1 << width) if value >= 1 << (width - 1) else value


def broadcast(x: ir.Value, t: ArrayType) -> ir.Value:
    """A scalar or vector broadcast to the vector type of ``t`` (no-op when it already is)."""
    target = value_type(t)
    if x.type == target:
        return x
    return vector.broadcast(target, x)


def shape_cast(x: ir.Value, t: ArrayType) -> ir.Value:
    """Same elements, another shape: ``vector.shape_cast``, or a broadcast / extract when one
    side is a scalar (Mosaic has no 0-d vectors)."""
    target = value_type(t)
    if x.type == target:
        return x
    if not t.shape:
        rank = len(ir.VectorType(x.type).shape)
        return vector.extract(x, [], [0] * rank)
    if not isinstance(x.type, ir.VectorType):
        return vector.broadcast(target, x)
    return vector.shape_cast(target, x)


def iota(shape: Sequence[int], dim: int) -> ir.Value:
    """Positions along ``dim`` as an ``i32`` vector of ``shape``: ``tpu.iota`` (Mosaic has no
    1-D iota, so a 1-D one is a row of a 2-D one)."""
    full, d = (tuple(shape), dim) if len(shape) >= 2 else ((1, *shape), dim + 1)
    x = tpu.iota(value_type(ArrayType(full, "int32")), [d])
    return shape_cast(x, ArrayType(tuple(shape), "int32"))


def to_index(x: ir.Value, dtype: str) -> ir.Value:
    """An integer scalar as an ``index`` (unsigned values zero-extend)."""
    if dtypes.is_unsigned(dtype):
        return arith.index_castui(ir.IndexType.get(), x)
    return arith.index_cast(ir.IndexType.get(), x)


def to_i32(x: ir.Value, dtype: str) -> ir.Value:
    """An integer scalar widened to ``i32`` (signed ones sign-extend, unsigned zero-extend);
    ``i32``/``u32`` unchanged."""
    if WIDTH[dtype] == 32:
        return x
    extend = arith.extui if dtypes.is_unsigned(dtype) else arith.extsi
    return extend(ir.IntegerType.get_signless(32), x)
