"""Ops that order elements: ``sort``, ``top_k``, ``argmax`` / ``argmin``.

- ``sort`` is stable and ascending in ``jnp.sort``'s order on its first ``num_keys`` operands
  (lexicographic): numbers by value, -0 equal to +0, every NaN equal and after +inf; the
  other operands are permuted along;
- ``top_k`` gives the ``k`` largest along the last dim in XLA's total order (+NaN > +inf,
  +0 > -0 > -inf > -NaN), ties in index order, with their int32 indices;
- ``argmax`` / ``argmin``: the first index of the largest / smallest along ``axis``, a NaN
  counting as the extreme (XLA's and jnp's rule).
"""

from __future__ import annotations

from minipallas.ir import dtypes
from minipallas.ir.opdef import Attrs, Regions, Types, Variadic, declare, require
from minipallas.ir.opset.common import array_operand
from minipallas.ir.syntax import INT, Keywords, dtype_of
from minipallas.ir.types import ArrayType


def _dim(value: object, x: ArrayType, what: str) -> int:
    require(
        isinstance(value, int) and not isinstance(value, bool) and 0 <= value < x.ndim,
        f"{what} {value!r} is not a dim of {x}",
    )
    return value  # type: ignore[return-value]


@declare(
    "sort", operands=(Variadic("arrays"),), syntax=Keywords(("dimension", INT), ("num_keys", INT))
)
def sort(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """Sort along ``dimension`` by the first ``num_keys`` operands, stable:
    ``%k, %i = sort %x, %iota, dimension 1, num_keys 1 : f32[4,6], i32[4,6]``."""
    require(len(types) >= 1, "needs at least one operand")
    xs = [array_operand(t, i) for i, t in enumerate(types)]
    require(all(x.shape == xs[0].shape for x in xs), f"operands must share a shape, got {xs}")
    _dim(attrs.get("dimension"), xs[0], "dimension")
    keys = attrs.get("num_keys")
    require(
        isinstance(keys, int) and 1 <= keys <= len(xs),
        f"num_keys {keys!r} must be between 1 and the {len(xs)} operands",
    )
    return tuple(xs)


@declare("top_k", operands=("x",), syntax=Keywords(("k", INT)))
def top_k(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """The ``k`` largest along the last dim and their indices:
    ``%v, %i = top_k %x, k 3 : f32[4,3], i32[4,3]``."""
    require(len(types) == 1, f"expected 1 operand, got {len(types)}")
    x = array_operand(types[0], 0)
    require(x.ndim >= 1, f"needs an operand of rank >= 1, got {x}")
    k = attrs.get("k")
    require(isinstance(k, int) and 0 <= k <= x.shape[-1], f"k {k!r} must be in [0, {x.shape[-1]}]")
    shape = (*x.shape[:-1], k)
    return (ArrayType(shape, x.dtype), ArrayType(shape, "int32"))


def _arg_rule(name: str):
    def rule(types: Types, attrs: Attrs, regions: Regions) -> Types:
        require(len(types) == 1, f"expected 1 operand, got {len(types)}")
        x = array_operand(types[0], 0)
        axis = _dim(attrs.get("axis"), x, "axis")
        dtype = dtypes.canonicalize(attrs.get("dtype", ""))
        require(dtypes.is_int(dtype), f"the index dtype must be an integer, got {dtype}")
        return (ArrayType(tuple(n for d, n in enumerate(x.shape) if d != axis), dtype),)

    rule.__doc__ = (
        f"First index of the {name[3:]} along ``axis``: ``%i = {name} %x, axis 1 : i32[4]``."
    )
    return rule


for _name in ("argmax", "argmin"):
    declare(_name, operands=("x",), syntax=Keywords(("axis", INT), read=dtype_of))(_arg_rule(_name))
