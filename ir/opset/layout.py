"""Ops that move elements without computing: ``reverse`` and ``pad`` (XLA's ``rev`` / ``pad``).

``jnp.flip`` is a ``reverse``; ``jnp.pad`` with a constant and ``lax.pad`` are a ``pad``, whose
negative low/high amounts cut elements off as XLA's do.
"""

from __future__ import annotations

from minipallas.ir.opdef import Attrs, Regions, Types, declare, require
from minipallas.ir.opset.common import array_operand, static_ints
from minipallas.ir.syntax import INTS, IntsAttr, Keywords
from minipallas.ir.types import ArrayType


@declare("reverse", operands=("x",), syntax=IntsAttr("dims"))
def reverse(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """Elements in reverse order along ``dims``: ``%y = reverse %x, dims (1) : f32[4,6]``."""
    require(len(types) == 1, f"expected 1 operand, got {len(types)}")
    x = array_operand(types[0], 0)
    dims = static_ints(attrs.get("dims"), "dims")
    require(
        len(set(dims)) == len(dims) and all(0 <= d < x.ndim for d in dims),
        f"dims {dims} must be distinct dims of {x}",
    )
    return (x,)


@declare(
    "pad",
    operands=("x", "padding_value"),
    syntax=Keywords(("low", INTS), ("high", INTS), ("interior", INTS)),
)
def pad(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """``%x`` with ``low``/``high`` elements of ``%v`` at each end of each dim and ``interior``
    between neighbours; negative ``low``/``high`` drop elements (XLA's ``pad``):
    ``%y = pad %x, %v, low (1, 0), high (-1, 2), interior (1, 0) : f32[7,8]``."""
    require(len(types) == 2, f"expected 2 operands (array, padding value), got {len(types)}")
    x = array_operand(types[0], 0)
    require(
        types[1] == ArrayType((), x.dtype),
        f"the padding value must be a {x.dtype} scalar, got {types[1]}",
    )
    shape = []
    for what in ("low", "high", "interior"):
        amounts = static_ints(attrs.get(what), what)
        require(len(amounts) == x.ndim, f"'{what}' needs one amount per dim of {x}")
    for d, n in enumerate(x.shape):
        low, high, interior = attrs["low"][d], attrs["high"][d], attrs["interior"][d]
        require(interior >= 0, f"interior padding of dim {d} is {interior}; it must be >= 0")
        size = low + high + n + max(n - 1, 0) * interior
        require(size >= 0, f"dim {d} would have {size} elements")
        shape.append(size)
    return (ArrayType(tuple(shape), x.dtype),)
