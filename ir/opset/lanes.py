"""Upstream's TPU vector primitives (``jax.experimental.pallas.tpu``): ``roll`` rotates elements
along a dim (``pltpu.roll``, Mosaic's ``tpu.dynamic_rotate``); ``packed_bitcast`` reinterprets
bits as another dtype the way a TPU packs narrow dtypes into 32-bit sublanes (``pltpu.bitcast``,
Mosaic's ``tpu.bitcast``), and ``ref.bitcast`` views of another width follow its shape rule."""

from __future__ import annotations

from minipallas.ir import dtypes
from minipallas.ir.opdef import Attrs, Regions, TypeCheckError, Types, declare, require
from minipallas.ir.opset.common import array_operand, int_scalar, static_ints
from minipallas.ir.syntax import INT, INTS, Keywords, Operands, dtype_of
from minipallas.ir.types import ArrayType


@declare("roll", operands=("x", "shift"), syntax=Keywords(("axis", INT), ("stride", INTS)))
def roll(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """``jnp.roll(x, shift, axis)``: element ``j`` moves to ``(j + shift) mod n``. ``stride``
    is ``()`` or ``(stride, stride_axis)``: slice ``i`` along ``stride_axis`` rolls by
    ``shift + i * stride`` (``pltpu.roll``'s ``stride``/``stride_axis``):
    ``%y = roll %x, %s, axis 1, stride (1, 0) : f32[8,128]``."""
    require(len(types) == 2, f"expected 2 operands (array, shift), got {len(types)}")
    x = array_operand(types[0], 0)
    require(types[1] == ArrayType((), "int32"), f"the shift must be an i32 scalar, got {types[1]}")
    int_scalar(types[1], 1)
    axis = attrs.get("axis")
    require(isinstance(axis, int) and 0 <= axis < x.ndim, f"axis {axis!r} is not a dim of {x}")
    stride = static_ints(attrs.get("stride"), "stride")
    require(len(stride) in (0, 2), f"stride {stride} must be () or (stride, stride_axis)")
    if stride:
        require(stride[0] >= 0, f"the stride {stride[0]} must be non-negative")
        require(
            0 <= stride[1] < x.ndim and stride[1] != axis,
            f"stride_axis {stride[1]} must be a dim of {x} other than axis {axis}",
        )
    return (x,)


def packed_shape(shape: tuple[int, ...], source: str, target: str) -> tuple[int, ...]:
    """The shape of ``shape``'s bits seen as ``target``: the second-minor dim scaled by the width
    ratio (upstream's rule for ``pltpu.bitcast`` and a ``ref.bitcast`` view on the TPU: ``r``
    narrow rows pack into one wide row). Raises ``TypeCheckError`` when there is no such dim
    or the ratio does not divide it."""
    old, new = dtypes.itemsize(source), dtypes.itemsize(target)
    if "bool" in (source, target):
        raise TypeCheckError(f"cannot bitcast {source} to {target}")
    if old == new:
        return shape
    if len(shape) < 2:
        raise TypeCheckError(
            f"a bitcast from {source} to {target} changes the element width, which needs a "
            f"second-minor dim to pack along; the shape {shape} has none",
            fix="reshape to 2 dims or more first, the second-minor dim a multiple of the ratio",
        )
    rows = shape[-2] * old
    if rows % new:
        raise TypeCheckError(
            f"a bitcast from {source} to {target} packs {new // old} rows into one, but the "
            f"second-minor dim of {shape} is {shape[-2]}",
            fix=f"make the second-minor dim a multiple of {new // old}",
        )
    return (*shape[:-2], rows // new, shape[-1])


@declare("packed_bitcast", operands=("x",), syntax=Operands(dtype_of))
def packed_bitcast(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """``pltpu.bitcast``: row ``i * r + k`` of the narrow side is piece ``k`` (little-endian) of
    row ``i`` of the wide side, ``r`` the width ratio:
    ``%y = packed_bitcast %x : i16[16,128]`` of an ``i32[8,128]``."""
    require(len(types) == 1, f"expected 1 operand, got {len(types)}")
    x = array_operand(types[0], 0)
    dtype = dtypes.canonicalize(attrs.get("dtype", ""))
    require(x.ndim >= 2, f"pltpu.bitcast needs at least 2 dims, got {x}")
    return (ArrayType(packed_shape(x.shape, x.dtype, dtype), dtype),)
