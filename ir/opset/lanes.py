"""Upstream's TPU vector primitives (``jax.experimental.pallas.tpu``): ``roll`` rotates elements
along a dim (``pltpu.roll``, Mosaic's ``tpu.dynamic_rotate``)."""

from __future__ import annotations

from minipallas.ir.opdef import Attrs, Regions, Types, declare, require
from minipallas.ir.opset.common import array_operand, int_scalar, static_ints
from minipallas.ir.syntax import INT, INTS, Keywords
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
