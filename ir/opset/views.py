"""Ref views: a new name for part of, or a reinterpretation of, an existing ref.

A view aliases its parent: state ops on a view act on the underlying buffer. Effects and
discharge follow the chain of views back to the root ref.
"""

from __future__ import annotations

from minipallas.ir import dtypes, indexing
from minipallas.ir.opdef import Attrs, OperandTypes, Regions, Types, Variadic, declare, require
from minipallas.ir.opset.common import count_dyn, is_permutation, ref_operand, static_ints, window
from minipallas.ir.opset.lanes import packed_shape
from minipallas.ir.syntax import IntsAttr, Operands, Windowed, dtype_of, shape_of
from minipallas.ir.types import RefType


@declare("ref.at", operands=("ref", Variadic("indices")), syntax=Windowed(0))
def at(types: OperandTypes, attrs: Attrs, regions: Regions) -> Types:
    """A window of a ref, as ``ref.at[...]``: ``%w = ref.at %r[ds(%i, 8), :] : Ref{f32[8,128]}``.

    Integer indices drop a dimension; integer-array indices are not allowed in views.
    """
    ref = ref_operand(types)
    n = count_dyn(attrs)
    require(len(types) == 1 + n, f"expected {n} dynamic index operands, got {len(types) - 1}")
    require(not indexing.has_arrays(attrs["indexer"]), "a view cannot use integer-array indices")
    indices = types.group("indices")
    return (RefType(window(ref.shape, attrs, indices), ref.dtype, ref.memory_space),)


@declare("ref.reshape", operands=("ref",), syntax=Operands(shape_of))
def reshape(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """The same buffer seen with another shape: ``%w = ref.reshape %r : Ref{f32[4,256]}``."""
    ref = ref_operand(types)
    require(len(types) == 1, f"expected 1 operand, got {len(types)}")
    shape = static_ints(attrs.get("shape"), "shape")
    new = RefType(shape, ref.dtype, ref.memory_space)
    require(_size(shape) == _size(ref.shape), f"cannot reshape {ref} to {new}: sizes differ")
    return (new,)


@declare("ref.bitcast", operands=("ref",), syntax=Operands(dtype_of))
def bitcast(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """The same bits as another dtype: ``%w = ref.bitcast %r : Ref{f32[8]}`` of an
    ``i32[8]``; of another width, packed along the second-minor dim as upstream's TPU
    ``BitcastTransform`` (``lanes.packed_shape``): ``Ref{i16[16,128]}`` of an ``i32[8,128]``."""
    ref = ref_operand(types)
    require(len(types) == 1, f"expected 1 operand, got {len(types)}")
    dtype = dtypes.canonicalize(attrs.get("dtype", ""))
    return (RefType(packed_shape(ref.shape, ref.dtype, dtype), dtype, ref.memory_space),)


@declare("ref.transpose", operands=("ref",), syntax=IntsAttr("permutation"))
def transpose(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """Dimensions permuted: ``%w = ref.transpose %r, permutation (1, 0) : Ref{f32[128,8]}``."""
    ref = ref_operand(types)
    require(len(types) == 1, f"expected 1 operand, got {len(types)}")
    perm = static_ints(attrs.get("permutation"), "permutation")
    require(is_permutation(perm, ref.ndim), f"{perm} is not a permutation of {ref.ndim} dims")
    return (RefType(tuple(ref.shape[p] for p in perm), ref.dtype, ref.memory_space),)


def _size(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
