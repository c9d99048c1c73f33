"""Rules for the pure array ops, with XLA's semantics (``numerics``) so results compare bit
for bit with XLA on CPU.

- ``logistic`` is ``1 / (1 + exp(-x))`` with every step rounded to the dtype (XLA expands it
  into those ops). Transcendentals are XLA:CPU's own algorithms (``transcendental``), bit for
  bit with XLA, except float32 ``rsqrt`` (within 2 ulps); sqrt is IEEE's, exact. Ops upstream
  lowers as a formula (``asin``, ``sinh``, ``erf_inv``, ...) run it step by step
  (``decompositions``); rounding, ``nextafter``, shifts and bit counts are exact (``bits``).
- Reductions: integer sums wrap (exact in any order); bfloat16/float16 sums accumulate in
  float32 and round once. A float sum over one dimension of at most 32 elements (under 4096 in
  all) adds in XLA:CPU's order, bit for bit (``sum_order``); longer ones use numpy's pairwise
  order, so they match XLA only to rounding (XLA reduces in its own tree order). Over an empty
  axis a reduction gives its identity. A float max of zeros is +0.0 if any +0.0 was reduced
  (min: -0.0), and a NaN propagates, except in a max or min XLA hands YNNPACK, which follows
  its orders (``extremes``).
- ``dot`` converts both operands to its result dtype (as ``convert``), then multiplies and
  accumulates in that dtype (float32 for bfloat16/float16, rounded once); float ``dot``
  matches XLA only to rounding, except bfloat16 into float32, summed in XLA:CPU's own order
  (``dot_order``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.conversions import round_float, to_dtype
from minipallas.ir.core import Op
from minipallas.ir.interpret import bits
from minipallas.ir.interpret.engine import Interpreter, rule
from minipallas.ir.interpret.xla import (
    decompositions,
    dot_order,
    numerics,
    special,
    sum_order,
    transcendental,
)
from minipallas.ir.interpret.xla.extremes import extreme, offloaded
from minipallas.ir.interpret.xla.numerics import F32, float_math, flush, widen
from minipallas.ir.rules import RuleTable


def _arith(int_fn: Callable[..., Any], float_fn: Callable[..., Any]) -> Callable[..., Any]:
    def apply(a: Any, b: Any, dtype: str) -> Any:
        return float_math(float_fn, dtype, a, b) if dtypes.is_float(dtype) else int_fn(a, b, dtype)

    return apply


def _ints(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A numpy ufunc taking the dtype argument the XLA integer helpers take."""
    return lambda a, b, dtype: fn(a, b)


def _compare(fn: Callable[..., Any]) -> Callable[..., Any]:
    def apply(a: Any, b: Any, dtype: str) -> Any:
        if dtypes.is_float(dtype):
            return fn(flush(widen(a, dtype)), flush(widen(b, dtype)))
        return fn(a, b)

    return apply


BINARY: RuleTable[Callable[[Any, Any, str], Any]] = RuleTable.of(
    "interpreter elementwise function",
    {
        "add": _arith(_ints(np.add), np.add),
        "sub": _arith(_ints(np.subtract), np.subtract),
        "mul": _arith(_ints(np.multiply), np.multiply),
        "div": _arith(numerics.int_div, np.divide),
        "rem": lambda a, b, d: (
            float_math(numerics.float_rem, d, a, b, flushes=False)
            if dtypes.is_float(d)
            else numerics.int_rem(a, b, d)
        ),
        "pow": lambda a, b, d: (
            float_math(transcendental.pow, d, a, b, flushes=False)
            if dtypes.is_float(d)
            else numerics.int_pow(a, b, d)
        ),
        "atan2": lambda a, b, d: float_math(transcendental.atan2, d, a, b, flushes=False),
        "nextafter": bits.nextafter,
        "shift_left": bits.shift_left,
        "shift_right_logical": bits.shift_right_logical,
        "shift_right_arithmetic": bits.shift_right_arithmetic,
        "max": _arith(_ints(np.maximum), numerics.float_max),
        "min": _arith(_ints(np.minimum), numerics.float_min),
        "and": _ints(np.bitwise_and),
        "or": _ints(np.bitwise_or),
        "xor": _ints(np.bitwise_xor),
        "eq": _compare(np.equal),
        "ne": _compare(np.not_equal),
        "lt": _compare(np.less),
        "le": _compare(np.less_equal),
        "gt": _compare(np.greater),
        "ge": _compare(np.greater_equal),
    },
)


# name -> (function on float32, whether XLA flushes its subnormals)
FLOAT_UNARY: RuleTable[tuple[Callable[[Any], Any], bool]] = RuleTable.of(
    "interpreter float function",
    {
        "exp": (transcendental.exp, True),
        "log": (transcendental.log, True),
        "sqrt": (np.sqrt, True),
        "rsqrt": (transcendental.rsqrt, True),
        "tanh": (transcendental.tanh, False),
        "sin": (transcendental.sin, False),
        "cos": (transcendental.cos, False),
        "tan": (transcendental.tan, False),
        "atan": (transcendental.atan, False),
        "cbrt": (transcendental.cbrt, False),
        "erf": (special.erf, True),
        "log1p": (special.log1p, True),
        "floor": (np.floor, True),
        "ceil": (np.ceil, True),
        "round": (bits.round_away, False),
        "round_even": (np.rint, False),
        "neg": (np.negative, False),
        "abs": (np.abs, False),
    },
)


def _binary_rule(fn: Callable[[Any, Any, str], Any]) -> Callable[..., tuple]:
    def apply(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
        return (fn(args[0], args[1], op.operands[0].type.dtype),)

    return apply


def _unary_rule(fn: Callable[[Any], Any], flushes: bool) -> Callable[..., tuple]:
    def apply(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
        dtype = op.operands[0].type.dtype
        if dtypes.is_float(dtype):
            return (float_math(fn, dtype, args[0], flushes=flushes),)
        return (fn(args[0]),)  # neg / abs of integers: wrap around

    return apply


# name -> function of (operand, dtype): formulas of XLA ops, and integer bit counts
DTYPE_UNARY: RuleTable[Callable[[Any, str], Any]] = RuleTable.of(
    "interpreter dtype function",
    {
        "expm1": decompositions.expm1,
        "exp2": decompositions.exp2,
        "asin": decompositions.asin,
        "asinh": decompositions.asinh,
        "sinh": decompositions.sinh,
        "cosh": decompositions.cosh,
        "erf_inv": decompositions.erf_inv,
        "population_count": bits.population_count,
        "clz": bits.clz,
    },
)


def _dtype_unary_rule(fn: Callable[[Any, str], Any]) -> Callable[..., tuple]:
    def apply(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
        return (fn(args[0], op.operands[0].type.dtype),)

    return apply


for _name, _fn in DTYPE_UNARY.items():
    rule(_name)(_dtype_unary_rule(_fn))
for _name, _fn in BINARY.items():
    rule(_name)(_binary_rule(_fn))
for _name, (_fn, _flushes) in FLOAT_UNARY.items():
    rule(_name)(_unary_rule(_fn, _flushes))


@rule("logistic")
def logistic(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    """``1 / (1 + exp(-x))`` as XLA expands it: each step rounds to the operand's dtype."""
    dtype = op.operands[0].type.dtype
    one = np.asarray(1, dtypes.to_numpy(dtype))
    e = float_math(transcendental.exp, dtype, np.negative(args[0]))
    return (float_math(np.divide, dtype, one, float_math(np.add, dtype, one, e)),)


@rule("not")
def not_(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    """Logical not for bool, bitwise not for integers."""
    return (np.invert(args[0]),)


@rule("optimization_barrier")
def optimization_barrier(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    return (args[0],)


@rule("multiple_of")
def multiple_of(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    """A promise for the compiler: the value is unchanged."""
    return (args[0],)


@rule("reciprocal")
def reciprocal(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    """``1 / x``; ``approx`` as upstream computes it off the chip: ``x`` rounded to bfloat16
    first, the quotient in ``x``'s dtype (the round trip of the result through bfloat16 that
    upstream writes is folded away by XLA:CPU: measured bit for bit)."""
    dtype = op.operands[0].type.dtype
    x = args[0]
    if op.attrs["approx"]:
        x = numerics.convert(numerics.convert(x, dtype, "bfloat16"), "bfloat16", dtype)
    one = np.asarray(1, dtypes.to_numpy(dtype))
    return (float_math(np.divide, dtype, one, x),)


@rule("select")
def select(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    return (np.where(args[0], args[1], args[2]),)


@rule("convert")
def convert(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    return (numerics.convert(args[0], op.operands[0].type.dtype, op.results[0].type.dtype),)


@rule("bitcast")
def bitcast(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    """The bytes of each element, little-endian as XLA's: a narrower dtype's pieces go along a
    new last dim, a wider dtype's come from the last dim."""
    t = op.results[0].type
    x = np.ascontiguousarray(args[0])
    return (x.reshape(-1).view(dtypes.to_numpy(t.dtype)).reshape(t.shape),)


@rule("constant")
def constant(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    return (op.attrs["value"].array(),)


@rule("iota")
def iota(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    t, dim = op.attrs["type"], op.attrs["dimension"]
    line = to_dtype(np.arange(t.shape[dim]), t.dtype)
    placed = line.reshape(tuple(t.shape[dim] if d == dim else 1 for d in range(t.ndim)))
    return (np.broadcast_to(placed, t.shape),)


@rule("broadcast_in_dim")
def broadcast_in_dim(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    x = np.asarray(args[0])
    shape, dims = op.attrs["shape"], op.attrs["dims"]
    expanded = [1] * len(shape)
    for i, d in enumerate(dims):
        expanded[d] = x.shape[i]
    return (np.broadcast_to(x.reshape(expanded), shape),)


@rule("reshape")
def reshape(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    return (np.reshape(args[0], op.attrs["shape"]),)


@rule("transpose")
def transpose(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    return (np.transpose(args[0], op.attrs["permutation"]),)


@rule("reduce_sum")
def reduce_sum(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    dtype = op.operands[0].type.dtype
    np_dtype, axes = dtypes.to_numpy(dtype), op.attrs["axes"]
    if dtypes.is_float(dtype):
        x = flush(widen(args[0], dtype))
        if sum_order.in_order(np.shape(x), tuple(axes)):  # XLA's own order (``sum_order``)
            return (round_float(sum_order.ordered_sum(x, axes[0]), dtype),)
        return (round_float(flush(np.add.reduce(x, axis=axes)), dtype),)
    return (np.add.reduce(np.asarray(args[0]), axis=axes, dtype=np_dtype),)


@rule("reduce_max", "reduce_min")
def reduce_extreme(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    is_max = op.name == "reduce_max"
    ufunc = np.maximum if is_max else np.minimum
    dtype = op.operands[0].type.dtype
    np_dtype, axes = dtypes.to_numpy(dtype), op.attrs["axes"]
    x = np.asarray(args[0])
    if dtype == "bool":
        return (ufunc.reduce(x, axis=axes, initial=not is_max),)
    if dtypes.is_int(dtype):
        info = np.iinfo(np_dtype)
        return (ufunc.reduce(x, axis=axes, initial=info.min if is_max else info.max),)
    if offloaded(x.shape, axes):  # YNNPACK's: NaN does not propagate (``extremes``)
        return (extreme(flush(x) if dtype == "float32" else x, axes, dtype, is_max),)
    x = flush(widen(x, dtype))
    out = ufunc.reduce(x, axis=axes, initial=-np.inf if is_max else np.inf)
    zero_wins = np.logical_or.reduce((x == 0) & (np.signbit(x) != is_max), axis=axes)
    out = np.where((out == 0) & zero_wins, F32.type(0.0 if is_max else -0.0), out)
    return (round_float(out, dtype),)


@rule("dot")
def dot(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    src, dst = op.operands[0].type.dtype, op.results[0].type.dtype
    (*_, m, k), n = op.operands[0].type.shape, op.results[0].type.shape[-1]
    if (src, dst) == ("bfloat16", "float32") and dot_order.native(m, k, n):
        return (dot_order.pairwise_dot(*(widen(x, src) for x in args)),)
    a, b = (numerics.convert(x, src, dst) for x in args)
    if dtypes.is_float(dst):
        return (float_math(np.matmul, dst, a, b),)
    return (np.matmul(a, b),)
