"""Small StableHLO builders shared by the rule files: types, constants, compares, converts.

Each function emits at the current MLIR insertion point and location (set by the lowering
context around every rule), so rules read as a list of ops.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.conversions import to_dtype
from minipallas.ir.types import ArrayType
from minipallas.lowering.compat.jaxlib_shim import ir, stablehlo
from minipallas.lowering.mlir_types import WIDTH, signless_type


def element_type(dtype: str) -> ir.Type:
    """The MLIR element type of a minipallas dtype (bool is ``i1``, unsigned are ``ui8/16/32``)."""
    if dtypes.is_unsigned(dtype):
        return ir.IntegerType.get_unsigned(WIDTH[dtype])
    return signless_type(dtype)


def tensor_type(t: ArrayType) -> ir.RankedTensorType:
    return ir.RankedTensorType.get(list(t.shape), element_type(t.dtype))


def constant(value: object, dtype: str, shape: Sequence[int] = ()) -> ir.Value:
    """A constant of ``shape``: ``value`` is a scalar (a splat) or an array of that shape.

    Floats travel as their bits, so NaN payloads and signed zeros survive exactly.
    """
    array = to_dtype(value, dtype)
    flat = array.reshape(-1)
    if flat.size and (flat.view(np.uint8).reshape(flat.size, -1) == flat[:1].view(np.uint8)).all():
        array = flat[:1]  # a splat: one element stands for all
    if dtypes.is_float(dtype):
        array = array.view(np.uint16 if WIDTH[dtype] == 16 else np.uint32)
    attr = ir.DenseElementsAttr.get(
        np.ascontiguousarray(array), type=element_type(dtype), shape=list(shape)
    )
    return stablehlo.ConstantOp(attr).result


def like(value: object, x: ir.Value) -> ir.Value:
    """A splat constant with ``x``'s type."""
    t = ir.RankedTensorType(x.type)
    return constant(value, dtype_of(t.element_type), t.shape)


def dtype_of(element: ir.Type) -> str:
    """The minipallas dtype of an MLIR element type (the inverse of ``element_type``)."""
    for name in dtypes.NAMES:
        if element_type(name) == element:
            return name
    raise ValueError(f"no minipallas dtype for MLIR type {element}")


def compare_type(dtype: str) -> str:
    if dtypes.is_float(dtype):
        return "FLOAT"
    return "SIGNED" if dtypes.is_signed(dtype) else "UNSIGNED"


def compare(a: ir.Value, b: ir.Value, direction: str) -> ir.Value:
    """Elementwise ``a <direction> b`` (``EQ``, ``NE``, ``LT``, ``LE``, ``GT``, ``GE``)."""
    dtype = dtype_of(ir.RankedTensorType(a.type).element_type)
    return stablehlo.CompareOp(
        a,
        b,
        stablehlo.ComparisonDirectionAttr.get(direction),
        compare_type=stablehlo.ComparisonTypeAttr.get(compare_type(dtype)),
    ).result


def select(pred: ir.Value, on_true: ir.Value, on_false: ir.Value) -> ir.Value:
    return stablehlo.SelectOp(pred, on_true, on_false).result


def convert(x: ir.Value, dtype: str) -> ir.Value:
    """Plain ``stablehlo.convert`` (no saturation handling; see ``arrays.convert``)."""
    t = ir.RankedTensorType(x.type)
    return stablehlo.ConvertOp(ir.RankedTensorType.get(t.shape, element_type(dtype)), x).result


def broadcast(x: ir.Value, shape: Sequence[int], dims: Sequence[int] = ()) -> ir.Value:
    """``x`` broadcast to ``shape``, its dim i going to result dim ``dims[i]``."""
    if shape_of(x) == list(shape) and list(dims) == list(range(len(shape))):
        return x
    element = ir.RankedTensorType(x.type).element_type
    result = ir.RankedTensorType.get(list(shape), element)
    return stablehlo.BroadcastInDimOp(result, x, list(dims)).result


def reshape(x: ir.Value, shape: Sequence[int]) -> ir.Value:
    element = ir.RankedTensorType(x.type).element_type
    return stablehlo.ReshapeOp(ir.RankedTensorType.get(list(shape), element), x).result


def transpose(x: ir.Value, perm: Sequence[int]) -> ir.Value:
    if list(perm) == sorted(perm):
        return x
    return stablehlo.TransposeOp(x, list(perm)).result


def shape_of(x: ir.Value) -> list[int]:
    return list(ir.RankedTensorType(x.type).shape)
