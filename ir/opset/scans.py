"""Reductions along an axis that XLA writes as windows or products: the cumulative ops
``cumsum``, ``cumprod``, ``cummax``, ``cummin``, ``cumlogsumexp`` (every prefix, or with
``reverse`` every suffix, of one axis reduced; ``cumlogsumexp`` is of floats only) and
``reduce_prod``.
"""

from __future__ import annotations

from minipallas.ir import dtypes
from minipallas.ir.opdef import Attrs, Regions, Types, declare, require
from minipallas.ir.opset.common import array_operand, static_ints
from minipallas.ir.syntax import FLAG, INT, IntsAttr, Keywords
from minipallas.ir.types import ArrayType

CUMULATIVE = ("cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp")


def _numeric(types: Types) -> ArrayType:
    require(len(types) == 1, f"expected 1 operand, got {len(types)}")
    x = array_operand(types[0], 0)
    require(x.dtype != "bool", f"needs a numeric operand, got {x}")
    return x


def _cumulative_rule(name: str):
    def rule(types: Types, attrs: Attrs, regions: Regions) -> Types:
        x = _numeric(types)
        require(name != "cumlogsumexp" or dtypes.is_float(x.dtype), f"needs floats, got {x}")
        axis = attrs.get("axis")
        require(isinstance(axis, int) and 0 <= axis < x.ndim, f"axis {axis!r} is not a dim of {x}")
        require(isinstance(attrs.get("reverse"), bool), "attribute 'reverse' must be a bool")
        return (x,)

    rule.__doc__ = (
        f"``{name}`` of every prefix along ``axis`` (suffix with ``reverse``): "
        f"``%y = {name} %x, axis 1, reverse : f32[4,6]``."
    )
    return rule


for _name in CUMULATIVE:
    declare(_name, operands=("x",), syntax=Keywords(("axis", INT), ("reverse", FLAG)))(
        _cumulative_rule(_name)
    )


@declare("reduce_prod", operands=("x",), syntax=IntsAttr("axes"))
def reduce_prod(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """Product over static axes: ``%y = reduce_prod %x, axes (1) : f32[4]``."""
    x = _numeric(types)
    axes = static_ints(attrs.get("axes"), "axes")
    require(
        len(set(axes)) == len(axes) and all(0 <= a < x.ndim for a in axes),
        f"axes {axes} must be distinct dims of {x}",
    )
    return (ArrayType(tuple(n for d, n in enumerate(x.shape) if d not in axes), x.dtype),)
