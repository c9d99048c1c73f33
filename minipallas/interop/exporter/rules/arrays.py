"""``to_jax`` rules for the elementwise ops, shapes, reductions and ``dot``: each means what the
interpreter means, spelled out in ``jax.lax`` so it holds on every backend (``engine`` says how).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from minipallas.interop.exporter import roundings
from minipallas.interop.exporter.engine import rule
from minipallas.ir import dtypes
from minipallas.ir.core import Op
from minipallas.ir.opset.meanings import (
    IntegerOps,
    PowerOps,
    integer_div_rem,
    integer_pow,
    square_and_multiply,
)

# --- elementwise -----------------------------------------------------------------------------

_BINARY = {
    "add": lax.add, "sub": lax.sub, "mul": lax.mul, "max": lax.max, "min": lax.min,
    "and": lax.bitwise_and, "or": lax.bitwise_or, "xor": lax.bitwise_xor,
    "eq": lax.eq, "ne": lax.ne, "lt": lax.lt, "le": lax.le, "gt": lax.gt, "ge": lax.ge,
}  # fmt: skip
_FLOAT_UNARY = {
    "exp": lax.exp, "log": lax.log, "tanh": lax.tanh, "sqrt": lax.sqrt, "rsqrt": lax.rsqrt,
    "sin": lax.sin, "cos": lax.cos,
}  # fmt: skip
# the lax primitive minipallas's StableHLO lowering also emits as is, so to_jax == compile
_AS_LAX = {
    "floor": lax.floor, "ceil": lax.ceil, "exp2": lax.exp2, "expm1": lax.expm1,
    "log1p": lax.log1p, "erf": lax.erf, "erf_inv": lax.erf_inv, "tan": lax.tan, "asin": lax.asin,
    "atan": lax.atan, "sinh": lax.sinh, "cosh": lax.cosh, "asinh": lax.asinh, "cbrt": lax.cbrt,
    "population_count": lax.population_count, "clz": lax.clz, "atan2": lax.atan2,
    "nextafter": lax.nextafter, "shift_left": lax.shift_left,
    "shift_right_logical": lax.shift_right_logical,
    "shift_right_arithmetic": lax.shift_right_arithmetic,
    "round": lambda x: lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO),
    "round_even": lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN),
}  # fmt: skip


def _dtype(op: Op, i: int = 0) -> str:
    return op.operands[i].type.dtype


def _like(value: object, x: Any) -> Any:
    return lax.full_like(x, value)


@rule(*_BINARY)
def binary(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    out = _BINARY[op.name](*args)
    return [roundings.product(out, _dtype(op)) if op.name == "mul" else out]


@rule(*_AS_LAX)
def as_lax(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    return [_AS_LAX[op.name](*args)]


@rule("neg")
def neg(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    return [lax.neg(args[0])]


@rule("not")
def not_(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    return [lax.bitwise_not(args[0])]


@rule("abs")
def abs_(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    return [args[0] if dtypes.is_unsigned(_dtype(op)) else lax.abs(args[0])]


def _in_float32(fn: Callable[[Any], Any], x: Any, dtype: str) -> Any:
    if dtype in ("bfloat16", "float16"):
        return lax.convert_element_type(fn(lax.convert_element_type(x, jnp.float32)), x.dtype)
    return fn(x)


@rule(*_FLOAT_UNARY)
def transcendental(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    return [_in_float32(_FLOAT_UNARY[op.name], args[0], _dtype(op))]


@rule("logistic")
def logistic(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    (x,) = args
    one = _like(1, x)
    e = _in_float32(lax.exp, lax.neg(x), _dtype(op))
    return [lax.div(one, lax.add(one, e))]


@rule("div", "rem")
def div_rem(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    x, y = args
    kind = lax.div if op.name == "div" else lax.rem
    dtype = _dtype(op)
    if dtypes.is_float(dtype):
        return [kind(x, roundings.divisor(y) if op.name == "div" else y)]
    return [integer_div_rem(op.name, dtypes.to_numpy(dtype), x, y, _INTEGERS, kind)]


# lax's operations for integer division's meaning (ir/opset/meanings.py)
_INTEGERS = IntegerOps(
    constant=lambda value, like: _like(value, like),
    eq=lax.eq,
    both=lax.bitwise_and,
    either=lax.bitwise_or,
    select=lax.select,
)


@rule("pow")
def pow_(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    """Float ``pow`` is ``lax.pow``; integer ``pow`` (which ``lax.pow`` lacks) is XLA's, as
    ``ir/opset/meanings.py`` says."""
    x, y = args
    dtype = _dtype(op)
    if dtypes.is_float(dtype):
        return [lax.pow(x, y)]
    twin = dtypes.to_numpy(dtypes.signed_twin(dtype))
    unsigned = dtypes.is_unsigned(dtype)
    ops = PowerOps(
        constant=_like,
        eq=lax.eq,
        select=lax.select,
        negative=lambda e: _negative(lax.bitcast_convert_type(e, twin) if unsigned else e),
        odd=lambda e: lax.ne(lax.bitwise_and(e, _like(1, e)), _like(0, e)),
        mul=lax.mul,
        halve=lambda e: lax.shift_right_logical(e, _like(1, e)),
    )
    return [integer_pow(x, y, ops, lambda a, b: square_and_multiply(a, b, ops))]


def _negative(e: Any) -> Any:
    return lax.lt(e, _like(0, e))


@rule("select")
def select(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    return [lax.select(*args)]


@rule("constant")
def constant(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    """A numpy array, not a JAX one: it stays concrete under ``jax.jit``, so a loop over
    constant bounds becomes a ``scan`` that ``jax.grad`` can reverse (``for_``)."""
    return [op.attrs["value"].array()]


@rule("uninitialized")
def uninitialized(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    t = op.attrs["type"]
    return [lax.full(t.shape, dtypes.fill_value(t.dtype), dtypes.to_numpy(t.dtype))]


@rule("iota")
def iota(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    t = op.attrs["type"]
    return [lax.broadcasted_iota(dtypes.to_numpy(t.dtype), t.shape, op.attrs["dimension"])]


@rule("optimization_barrier")
def optimization_barrier(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    return [lax.optimization_barrier(args[0])]


@rule("multiple_of")
def multiple_of(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    return [args[0]]  # a hint XLA has no form for


@rule("reciprocal")
def reciprocal(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    """``1 / x``; ``approx`` as upstream's rule off the chip, through bfloat16 first."""
    x, dtype = args[0], _dtype(op)
    if op.attrs["approx"]:
        x = convert_value(convert_value(x, dtype, "bfloat16"), "bfloat16", dtype)
    return [lax.div(lax.full_like(x, 1), x)]


@rule("convert")
def convert(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    return [convert_value(args[0], _dtype(op), op.result.type.dtype)]


def convert_value(x: Any, source: str, target: str) -> Any:
    """``convert`` with minipallas's rules (float to int: truncate, saturate, NaN to 0)."""
    if source == target:
        return x
    np_target = dtypes.to_numpy(target)
    if not (dtypes.is_float(source) and dtypes.is_int(target)):
        return lax.convert_element_type(x, np_target)
    info = np.iinfo(np_target)
    low, high = dtypes.saturation_ends(source, target)
    x = lax.select(lax.ne(x, x), _like(0, x), x)
    result = lax.convert_element_type(lax.clamp(_like(low, x), x, _like(high, x)), np_target)
    for limit, end, beyond in ((info.max, high, lax.gt), (info.min, low, lax.lt)):
        if int(end) != limit:
            result = lax.select(beyond(x, _like(end, x)), _like(limit, result), result)
    return result


@rule("bitcast")
def bitcast(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    return [lax.bitcast_convert_type(args[0], dtypes.to_numpy(op.result.type.dtype))]


# --- shapes, reductions, dot -----------------------------------------------------------------


@rule("broadcast_in_dim")
def broadcast_in_dim(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    return [lax.broadcast_in_dim(args[0], op.attrs["shape"], op.attrs["dims"])]


@rule("reshape")
def reshape(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    return [lax.reshape(args[0], op.attrs["shape"])]


@rule("transpose")
def transpose(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    return [lax.transpose(args[0], op.attrs["permutation"])]


@rule("reduce_sum", "reduce_max", "reduce_min")
def reduce(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    (x,), axes, dtype = args, tuple(op.attrs["axes"]), _dtype(op)
    if dtype == "bool":
        return [(lax.reduce_or if op.name == "reduce_max" else lax.reduce_and)(x, axes)]
    if op.name == "reduce_sum":
        if dtype in ("bfloat16", "float16"):
            total = lax.reduce_sum(lax.convert_element_type(x, jnp.float32), axes)
            return [lax.convert_element_type(total, x.dtype)]
        return [lax.reduce_sum(x, axes)]
    return [(lax.reduce_max if op.name == "reduce_max" else lax.reduce_min)(x, axes)]


@rule("dot")
def dot(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    source, target = _dtype(op), op.result.type.dtype
    a, b = args
    if source != target and not (source in ("bfloat16", "float16") and target == "float32"):
        a, b = (convert_value(x, source, target) for x in args)
    batch = tuple(range(op.result.type.ndim - 2))
    numbers = (((len(batch) + 1,), (len(batch),)), (batch, batch))
    precision = op.attrs.get("precision")
    if precision is not None:
        precision = tuple(lax.Precision[p.upper()] for p in precision)
    target_dtype = dtypes.to_numpy(target)
    return [
        lax.dot_general(a, b, numbers, precision=precision, preferred_element_type=target_dtype)
    ]
