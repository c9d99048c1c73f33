"""Pure array ops: constants, elementwise math, shape changes, reductions and ``dot``.

Binary elementwise ops take operands of one type; the front end inserts broadcasts and
conversions explicitly, so every op's types can be read off its line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minipallas.ir import dtypes
from minipallas.ir.errors import ParseError
from minipallas.ir.literal import Literal
from minipallas.ir.literal_text import build_literal, format_literal
from minipallas.ir.opdef import Attrs, Regions, TypeCheckError, Types, declare, require
from minipallas.ir.opset.common import array_operand, is_permutation, static_ints
from minipallas.ir.syntax import (
    FLAG,
    INT,
    IntAttr,
    IntsAttr,
    Keywords,
    Operands,
    Parsed,
    Pieces,
    dtype_of,
    shape_of,
    type_of,
)
from minipallas.ir.types import ArrayType, Type

if TYPE_CHECKING:
    from minipallas.ir.core import Op
    from minipallas.ir.parser import Parser
    from minipallas.ir.printer import Printer

ARITHMETIC = ("add", "sub", "mul", "div", "rem", "pow", "max", "min")
FLOAT_BINARY = ("atan2", "nextafter")
BITWISE = ("and", "or", "xor")
# shift amounts are unsigned: one of the bit width or more shifts every bit out
SHIFTS = ("shift_left", "shift_right_logical", "shift_right_arithmetic")
COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")
# round: half away from zero (lax.round's default); round_even: half to even (jnp.round)
ROUNDING = ("floor", "ceil", "round", "round_even")
FLOAT_UNARY = (
    *("exp", "log", "tanh", "logistic", "sqrt", "rsqrt", "sin", "cos", *ROUNDING),
    *("exp2", "expm1", "log1p", "erf", "erf_inv", "tan", "asin", "atan"),
    *("sinh", "cosh", "asinh", "cbrt"),
)
INT_UNARY = ("population_count", "clz")
UNARY = ("neg", "abs", "not", *FLOAT_UNARY, *INT_UNARY)


def _operands(types: Types, n: int) -> tuple[ArrayType, ...]:
    require(len(types) == n, f"expected {n} operands, got {len(types)}")
    return tuple(array_operand(t, i) for i, t in enumerate(types))


def _binary_rule(name: str):
    def rule(types: Types, attrs: Attrs, regions: Regions) -> Types:
        a, b = _operands(types, 2)
        if a != b:
            raise TypeCheckError(f"operands must have one type, got {a} and {b}")
        if name in BITWISE and not (a.dtype == "bool" or dtypes.is_int(a.dtype)):
            raise TypeCheckError(f"needs ints or bools, got {a}")
        if name in SHIFTS and not dtypes.is_int(a.dtype):
            raise TypeCheckError(f"needs integers, got {a}")
        if name in FLOAT_BINARY and not dtypes.is_float(a.dtype):
            raise TypeCheckError(f"needs float operands, got {a}")
        if name not in BITWISE and name not in ("max", "min") and a.dtype == "bool":
            raise TypeCheckError(f"not defined on bool, got {a}")
        return (ArrayType(a.shape, "bool"),) if name in COMPARISONS else (a,)

    rule.__doc__ = f"Elementwise ``{name}``: ``%z = {name} %x, %y : f32[8]``."
    return rule


def _unary_rule(name: str):
    def rule(types: Types, attrs: Attrs, regions: Regions) -> Types:
        (a,) = _operands(types, 1)
        if name in FLOAT_UNARY and not dtypes.is_float(a.dtype):
            raise TypeCheckError(f"needs a float operand, got {a}")
        if name in INT_UNARY and not dtypes.is_int(a.dtype):
            raise TypeCheckError(f"needs an integer operand, got {a}")
        if name == "not" and not (a.dtype == "bool" or dtypes.is_int(a.dtype)):
            raise TypeCheckError(f"needs ints or bools, got {a}")
        if name in ("neg", "abs") and a.dtype == "bool":
            raise TypeCheckError(f"not defined on bool, got {a}")
        return (a,)

    rule.__doc__ = f"Elementwise ``{name}``: ``%y = {name} %x : f32[8]``."
    return rule


for _name in (*ARITHMETIC, *FLOAT_BINARY, *BITWISE, *SHIFTS, *COMPARISONS):
    declare(_name, operands=("x", "y"), syntax=Operands())(_binary_rule(_name))
for _name in UNARY:
    declare(_name, operands=("x",), syntax=Operands())(_unary_rule(_name))


@declare("reciprocal", operands=("x",), syntax=Keywords(("approx", FLAG), ("full_range", FLAG)))
def reciprocal(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """``1 / x`` of a float (``pl.reciprocal``): ``%y = reciprocal %x, approx, full_range :
    f32[8]``. With ``approx`` the TPU uses its approximate reciprocal, and the CPU computes
    upstream's stand-in, ``1 / x`` of ``x`` rounded to bfloat16; ``full_range`` (False: the
    compiler may assume a limited input range) is a hint only Mosaic reads."""
    (a,) = _operands(types, 1)
    require(dtypes.is_float(a.dtype), f"needs a float operand, got {a}")
    for flag in ("approx", "full_range"):
        require(isinstance(attrs.get(flag), bool), f"attribute '{flag}' must be a bool")
    return (a,)


@declare("multiple_of", operands=("x",), syntax=Keywords(("multiple", INT)))
def multiple_of(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """An integer unchanged, promised to be a multiple of ``multiple`` (``pl.multiple_of``):
    ``%j = multiple_of %i, multiple 8 : i32[]``. Mosaic reads the promise (an index map's
    offset it can prove aligned); everywhere else it is the identity."""
    (a,) = _operands(types, 1)
    require(dtypes.is_int(a.dtype), f"needs an integer operand, got {a}")
    multiple = attrs.get("multiple")
    require(isinstance(multiple, int) and multiple > 0, f"multiple {multiple!r} must be > 0")
    return (a,)


class Constant:
    """``%c = constant 1.5 : f32[8]`` (a splat) or ``%c = constant [1, 2] : i32[2]``."""

    def print(self, p: Printer, op: Op) -> Pieces:
        return [" " + format_literal(op.attrs["value"])]

    def parse(self, r: Parser) -> Parsed:
        tokens, shape, start = r.literal()

        def value(types: list[Type]) -> dict[str, Any]:
            (t,) = types[:1]
            if not isinstance(t, ArrayType):
                raise ParseError(
                    f"a constant's type must be an array type, got {t}",
                    op="constant",
                    loc=r.where(start),
                )
            if shape is not None and shape != t.shape and (t.size or len(tokens)):
                raise ParseError(
                    f"the value has shape {list(shape)}, but the type is {t}",
                    op="constant",
                    loc=r.where(start),
                )
            return {"value": build_literal(tokens, t, shape is None, r.where)}

        return Parsed([], from_types=value)


@declare("constant", operands=(), syntax=Constant())
def constant(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """A constant: ``%c = constant 1.5 : f32[8]`` (a splat) or ``constant [1, 2] : i32[2]``."""
    require(not types, "takes no operands")
    value = attrs.get("value")
    require(isinstance(value, Literal), f"attribute 'value' must be a Literal, got {value!r}")
    t = value.type
    require(isinstance(t, ArrayType), f"the literal's type must be an array type, got {t!r}")
    nbytes = t.size * dtypes.itemsize(t.dtype)
    require(
        isinstance(value.data, bytes) and len(value.data) == nbytes,
        f"the literal holds {len(value.data) if isinstance(value.data, bytes) else 'no'} bytes; "
        f"{t} needs {nbytes}",
    )
    return (t,)


@declare("iota", operands=(), syntax=IntAttr("dimension", type_of))
def iota(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """Positions along one dimension: ``%i = iota dimension 0 : i32[8,128]``."""
    require(not types, "takes no operands")
    t = attrs.get("type")
    require(isinstance(t, ArrayType) and t.dtype != "bool", f"bad result type {t!r}")
    dim = attrs.get("dimension")
    require(isinstance(dim, int) and 0 <= dim < t.ndim, f"dimension {dim!r} is not in {t}")
    return (t,)


@declare("optimization_barrier", operands=("x",), syntax=Operands())
def optimization_barrier(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """The value unchanged, which XLA may not see through (StableHLO's
    ``optimization_barrier``): ``%y = optimization_barrier %x : i32[]``. An unrolled grid step's
    index passes through one, so XLA folds no arithmetic with it that upstream's loop, where the
    index is a loop variable, would keep (``(x + 1.0) - 1.0`` folds to ``x`` with a constant).
    CPU programs only: Mosaic and Triton have no rule for it, as upstream's Pallas lowerings
    have none."""
    (a,) = _operands(types, 1)
    return (a,)


@declare("select", operands=("pred", "on_true", "on_false"), syntax=Operands())
def select(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """Choose elementwise: ``%z = select %pred, %on_true, %on_false : f32[8]``."""
    p, a, b = _operands(types, 3)
    require(p == ArrayType(a.shape, "bool"), f"predicate must be bool{list(a.shape)}, got {p}")
    require(a == b, f"branches must have one type, got {a} and {b}")
    return (a,)


@declare("convert", operands=("x",), syntax=Operands(dtype_of))
def convert(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """Change dtype by value: ``%y = convert %x : i32[8]``."""
    (a,) = _operands(types, 1)
    return (ArrayType(a.shape, dtypes.canonicalize(attrs.get("dtype", ""))),)


@declare("bitcast", operands=("x",), syntax=Operands(dtype_of))
def bitcast(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """Reinterpret bits as another dtype (``lax.bitcast_convert_type``): of the same width,
    ``%y = bitcast %x : i32[8]``; narrower, each element splits into a new last dim,
    ``%y = bitcast %x : i16[8,2]``; wider, the last dim (the width ratio) joins into one."""
    (a,) = _operands(types, 1)
    dtype = dtypes.canonicalize(attrs.get("dtype", ""))
    require("bool" not in (dtype, a.dtype), f"cannot bitcast {a.dtype} to {dtype}")
    old, new = dtypes.itemsize(a.dtype), dtypes.itemsize(dtype)
    if new < old:
        return (ArrayType((*a.shape, old // new), dtype),)
    require(
        new == old or a.shape[-1:] == (new // old,),
        f"cannot bitcast {a} to {dtype}: its last dim must be the width ratio {new // old}",
    )
    return (ArrayType(a.shape if new == old else a.shape[:-1], dtype),)


@declare("broadcast_in_dim", operands=("x",), syntax=IntsAttr("dims", shape_of))
def broadcast_in_dim(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """Broadcast, operand dim i going to result dim ``dims[i]``:
    ``%y = broadcast_in_dim %x, dims (1) : f32[8,128]``."""
    (a,) = _operands(types, 1)
    shape = static_ints(attrs.get("shape"), "shape")
    dims = static_ints(attrs.get("dims"), "dims")
    require(len(dims) == a.ndim, f"dims {dims} must name one result dim per operand dim")
    require(
        list(dims) == sorted(set(dims)) and all(0 <= d < len(shape) for d in dims),
        f"dims {dims} must be increasing and within rank {len(shape)}",
    )
    for i, d in enumerate(dims):
        require(
            a.shape[i] in (1, shape[d]),
            f"operand dim {i} ({a.shape[i]}) cannot broadcast to {shape[d]}",
        )
    return (ArrayType(shape, a.dtype),)


@declare("reshape", operands=("x",), syntax=Operands(shape_of))
def reshape(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """Same elements, row-major, another shape: ``%y = reshape %x : f32[4,32]``."""
    (a,) = _operands(types, 1)
    shape = static_ints(attrs.get("shape"), "shape")
    out = ArrayType(shape, a.dtype)
    require(out.size == a.size, f"cannot reshape {a} to {out}: sizes differ")
    return (out,)


@declare("transpose", operands=("x",), syntax=IntsAttr("permutation"))
def transpose(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """Permute dimensions: ``%y = transpose %x, permutation (1, 0) : f32[128,8]``."""
    (a,) = _operands(types, 1)
    perm = static_ints(attrs.get("permutation"), "permutation")
    require(is_permutation(perm, a.ndim), f"{perm} is not a permutation of {a.ndim} dims")
    return (ArrayType(tuple(a.shape[p] for p in perm), a.dtype),)


def _reduce_rule(name: str):
    def rule(types: Types, attrs: Attrs, regions: Regions) -> Types:
        (a,) = _operands(types, 1)
        axes = static_ints(attrs.get("axes"), "axes")
        require(
            len(set(axes)) == len(axes) and all(0 <= x < a.ndim for x in axes),
            f"axes {axes} must be distinct dims of {a}",
        )
        if name == "reduce_sum":
            require(a.dtype != "bool", f"cannot sum bools, got {a}")
        return (ArrayType(tuple(d for i, d in enumerate(a.shape) if i not in axes), a.dtype),)

    rule.__doc__ = f"``{name}`` over static axes: ``%y = {name} %x, axes (1) : f32[8]``."
    return rule


for _name in ("reduce_sum", "reduce_max", "reduce_min"):
    declare(_name, operands=("x",), syntax=IntsAttr("axes"))(_reduce_rule(_name))


# How each operand of a ``dot`` is multiplied (upstream's ``lax.Precision``): on the TPU,
# "default" is one bfloat16 pass and "highest" full float32 (Mosaic's ``contract_precision``);
# on the CPU all three compute the same (XLA:CPU multiplies float32 as float32).
PRECISIONS = ("default", "high", "highest")
DEFAULT_PRECISION = ("default", "default")


class DotSyntax:
    """``%c = dot %a, %b : f32[8,16]``; a precision other than the default follows the operands:
    ``%c = dot %a, %b, precision (highest, highest) : f32[8,16]``."""

    def print(self, p: Printer, op: Op) -> Pieces:
        precision = tuple(op.attrs.get("precision", DEFAULT_PRECISION))
        extra = "" if precision == DEFAULT_PRECISION else f", precision ({', '.join(precision)})"
        return [f" {p.values(op.operands)}{extra}"]

    def parse(self, r: Parser) -> Parsed:
        operands = r.values()
        attrs: dict[str, Any] = {}
        if r.accept(","):
            r.expect("precision", "after the operands")
            r.expect("(", "after 'precision'")
            lhs = r.next().text
            r.expect(",", "between the two precisions")
            rhs = r.next().text
            r.expect(")", "after the precisions")
            attrs["precision"] = (lhs, rhs)
        return Parsed(operands, attrs, from_types=_from_types_dtype)


def _from_types_dtype(types: list[Type]) -> dict[str, Any]:
    return dtype_of(types[0])


@declare("dot", operands=("lhs", "rhs"), syntax=DotSyntax())
def dot(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """Matrix product accumulated in ``dtype``: ``%c = dot %a, %b : f32[8,16]``. Operands are
    2-D, or share leading batch dimensions (``(B, m, k) x (B, k, n)``, as ``jnp.matmul``): the
    batched form is what vectorizing a kernel's grid makes of a dot in its body. ``precision``
    (one of ``PRECISIONS`` per operand; both "default" when absent) says how the TPU and GPU
    multiply: ``dot %a, %b, precision (highest, highest) : f32[8,16]``."""
    a, b = _operands(types, 2)
    require(
        a.ndim == b.ndim >= 2 and a.shape[:-2] == b.shape[:-2],
        f"needs 2-D operands or equal leading batch dims, got {a} and {b}",
    )
    require(a.shape[-1] == b.shape[-2], f"contracting dims differ: {a} and {b}")
    require(
        a.dtype == b.dtype and a.dtype != "bool",
        f"operands must share a numeric dtype, got {a} and {b}",
    )
    precision = tuple(attrs.get("precision", DEFAULT_PRECISION))
    require(
        len(precision) == 2 and all(p in PRECISIONS for p in precision),
        f"precision {precision} must be two of {', '.join(PRECISIONS)} (one per operand)",
    )
    shape = (*a.shape[:-1], b.shape[-1])
    return (ArrayType(shape, dtypes.canonicalize(attrs.get("dtype", a.dtype))),)
