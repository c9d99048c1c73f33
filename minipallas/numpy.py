"""``minipallas.numpy``: array functions named and typed like ``jax.numpy``, for traced code.

They work on traced arrays, Python scalars and numpy arrays (which become constants), promote
mixed dtypes as jax.numpy does (see ``minipallas.frontend.promotion``), and must be called while
a function is being traced. Dtypes are numpy's scalar types (``float32``, ``bfloat16`` from
ml_dtypes, ...), so ``x.dtype == minipallas.numpy.float32`` holds as in JAX; wherever a dtype is
taken, a numpy dtype, one of these or a name (``"bfloat16"``, ``"bf16"``) will do.

A few ``jax.lax`` names that kernels use are here too: ``rsqrt``, ``logistic``, ``iota`` and
``broadcasted_iota``. Every elementwise op of the IR that numpy has a name for is here under
that name (``arcsin`` for ``asin``, ``left_shift`` for ``shift_left``, ...); the reductions,
scans and sorts beyond sum/max/min live in ``minipallas.frontend.reductions``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import ml_dtypes
import numpy as np

from minipallas.frontend import reductions as _r
from minipallas.frontend import values as _v
from minipallas.frontend.promotion import canonical as _canonical
from minipallas.frontend.promotion import default_dtype as _default_dtype
from minipallas.frontend.promotion import is_python_scalar as _is_python_scalar
from minipallas.frontend.scopes import Tracer as _Tracer
from minipallas.frontend.scopes import trace_error as _trace_error
from minipallas.frontend.values import TracedArray
from minipallas.ir import dtypes as _dtypes
from minipallas.ir.types import ArrayType as _ArrayType

float32 = np.float32
bfloat16 = ml_dtypes.bfloat16
float16 = np.float16
int32 = np.int32
int16 = np.int16
int8 = np.int8
uint32 = np.uint32
uint16 = np.uint16
uint8 = np.uint8
bool_ = np.bool_

inf = math.inf
nan = math.nan
pi = math.pi
e = math.e

# ----- making arrays -----

asarray = _v.asarray
array = _v.asarray
astype = _v.astype
broadcast_to = _v.broadcast_to
reshape = _v.reshape
transpose = _v.transpose
where = _v.where
dot = _v.dot


def full(shape: Any, fill_value: Any, dtype: Any = None) -> TracedArray:
    """An array of ``shape`` filled with ``fill_value`` (a scalar or a broadcastable array)."""
    return _v.broadcast_to(_v.asarray(fill_value, dtype), _shape(shape))


def zeros(shape: Any, dtype: Any = None) -> TracedArray:
    return full(shape, 0, float32 if dtype is None else dtype)


def ones(shape: Any, dtype: Any = None) -> TracedArray:
    return full(shape, 1, float32 if dtype is None else dtype)


def full_like(a: Any, fill_value: Any, dtype: Any = None, shape: Any = None) -> TracedArray:
    """Like ``full``, with the shape and dtype of ``a`` (an array, ref or numpy array)."""
    like_shape, like_dtype = _shape_dtype(a)
    return full(
        like_shape if shape is None else shape, fill_value, like_dtype if dtype is None else dtype
    )


def zeros_like(a: Any, dtype: Any = None, shape: Any = None) -> TracedArray:
    return full_like(a, 0, dtype, shape)


def ones_like(a: Any, dtype: Any = None, shape: Any = None) -> TracedArray:
    return full_like(a, 1, dtype, shape)


def arange(start: Any, stop: Any = None, step: Any = None, dtype: Any = None) -> TracedArray:
    """``start, start+step, ...`` below ``stop``; the bounds are static numbers.

    Integer bounds give ``iota`` scaled and shifted (exact); float bounds a constant computed
    by numpy, as jnp.arange does for static bounds.
    """
    if stop is None:
        start, stop = 0, start
    step = 1 if step is None else step
    bounds = (start, stop, step)
    if any(isinstance(b, _Tracer) for b in bounds):
        raise _trace_error(
            "arange bounds must be static numbers",
            fix="use iota and arithmetic for traced offsets: arange(n) + start",
        )
    if all(isinstance(b, int | np.integer) for b in bounds):
        name = "int32" if dtype is None else _canonical(dtype)
        out = iota(name, len(range(start, stop, step)))
        out = out if step == 1 else out * step
        return out if start == 0 else out + start
    name = "float32" if dtype is None else _canonical(dtype)
    return _v.constant(np.arange(start, stop, step, dtype=_dtypes.to_numpy(name)), name)


def iota(dtype: Any, size: int) -> TracedArray:
    """``0, 1, ..., size-1`` (lax.iota)."""
    return broadcasted_iota(dtype, (size,), 0)


def broadcasted_iota(dtype: Any, shape: Sequence[int], dimension: int) -> TracedArray:
    """Each element's position along ``dimension`` (lax.broadcasted_iota)."""
    return _v.emit_array(
        "iota", [], type=_ArrayType(_shape(shape), _canonical(dtype)), dimension=int(dimension)
    )


def expand_dims(a: Any, axis: Any) -> TracedArray:
    """``a`` with size-1 dimensions inserted at ``axis`` (an int or a tuple)."""
    a = _v.asarray(a)
    axes = _v.normalize_axes(axis, a.ndim + len(axis if isinstance(axis, Sequence) else [0]))
    shape = list(a.shape)
    for position in sorted(axes):
        shape.insert(position, 1)
    return _v.reshape(a, shape)


def squeeze(a: Any, axis: Any = None) -> TracedArray:
    """``a`` without the size-1 dimensions named by ``axis`` (all of them by default)."""
    a = _v.asarray(a)
    if axis is None:
        axes = tuple(i for i, d in enumerate(a.shape) if d == 1)
    else:
        axes = _v.normalize_axes(axis, a.ndim)
    if any(a.shape[i] != 1 for i in axes):
        raise _trace_error(f"cannot squeeze axes {axis} of shape {a.shape}: not all are 1")
    return _v.reshape(a, [d for i, d in enumerate(a.shape) if i not in axes])


def _shape(shape: Any) -> tuple[int, ...]:
    dims = shape if isinstance(shape, Sequence) else (shape,)
    if not all(isinstance(d, int | np.integer) and d >= 0 for d in dims):
        raise _trace_error(f"a shape must be static non-negative ints, got {shape!r}")
    return tuple(int(d) for d in dims)


def _shape_dtype(a: Any) -> tuple[tuple[int, ...], str]:
    if isinstance(a, _Tracer):
        return a.shape, a.type.dtype
    if _is_python_scalar(a):
        return (), _default_dtype(a)
    x = np.asarray(a)
    return x.shape, _canonical(x.dtype)


# ----- elementwise -----


def _named(fn: Any, doc: str) -> Any:
    """``fn`` named and documented by ``doc`` ("name: what it computes")."""
    fn.__name__, fn.__doc__ = doc.split(":")[0], doc
    return fn


def _binary(name: str, doc: str, apply: Callable[[str, Any, Any], TracedArray]) -> Any:
    def fn(x: Any, y: Any, /) -> TracedArray:
        return apply(name, x, y)

    return _named(fn, doc)


def _logical(name: str, x: Any, y: Any) -> TracedArray:
    return _v.elementwise(name, _v.astype(x, bool_), _v.astype(y, bool_))


add = _binary("add", "add: x + y", _v.elementwise)
subtract = _binary("sub", "subtract: x - y", _v.elementwise)
multiply = _binary("mul", "multiply: x * y", _v.elementwise)
power = _binary("pow", "power: x ** y", _v.elementwise)
maximum = _binary("max", "maximum: the larger of x and y, elementwise", _v.elementwise)
minimum = _binary("min", "minimum: the smaller of x and y, elementwise", _v.elementwise)
bitwise_and = _binary("and", "bitwise_and: x & y", _v.elementwise)
bitwise_or = _binary("or", "bitwise_or: x | y", _v.elementwise)
bitwise_xor = _binary("xor", "bitwise_xor: x ^ y", _v.elementwise)
divide = true_divide = _v.true_divide
floor_divide = _v.floor_divide
remainder = mod = _v.remainder
abs = absolute = _v.absolute  # noqa: A001 - jax.numpy's name
bitwise_left_shift = left_shift = _binary("shift_left", "left_shift: x << y", _v.elementwise)

equal = _binary("eq", "equal: x == y", _v.compare)
not_equal = _binary("ne", "not_equal: x != y", _v.compare)
less = _binary("lt", "less: x < y", _v.compare)
less_equal = _binary("le", "less_equal: x <= y", _v.compare)
greater = _binary("gt", "greater: x > y", _v.compare)
greater_equal = _binary("ge", "greater_equal: x >= y", _v.compare)

logical_and = _binary("and", "logical_and: x and y, as bools", _logical)
logical_or = _binary("or", "logical_or: x or y, as bools", _logical)
logical_xor = _binary("xor", "logical_xor: x != y, as bools", _logical)


def negative(x: Any, /) -> TracedArray:
    return _v.unary("neg", x)


def invert(x: Any, /) -> TracedArray:
    """``~x``: bitwise not of ints, logical not of bools."""
    return _v.unary("not", x)


bitwise_not = invert


def logical_not(x: Any, /) -> TracedArray:
    return _v.unary("not", _v.astype(x, bool_))


def _transcendental(name: str, doc: str) -> Any:
    def fn(x: Any, /) -> TracedArray:
        x = _v.asarray(x)
        if not _dtypes.is_float(x.type.dtype):
            x = _v.astype(x, float32)  # integers and bools compute in float32, as in jnp
        return _v.unary(name, x)

    return _named(fn, doc)


exp = _transcendental("exp", "exp: e ** x")
log = _transcendental("log", "log: natural logarithm")
tanh = _transcendental("tanh", "tanh: hyperbolic tangent")
sqrt = _transcendental("sqrt", "sqrt: square root")
rsqrt = _transcendental("rsqrt", "rsqrt: 1 / sqrt(x) (lax.rsqrt)")
sin = _transcendental("sin", "sin: sine")
cos = _transcendental("cos", "cos: cosine")
logistic = _transcendental("logistic", "logistic: 1 / (1 + exp(-x)) (lax.logistic)")
sigmoid = logistic
exp2 = _transcendental("exp2", "exp2: 2 ** x")
expm1 = _transcendental("expm1", "expm1: e ** x - 1, exact near 0")
log1p = _transcendental("log1p", "log1p: log(1 + x), exact near 0")
tan = _transcendental("tan", "tan: tangent")
arcsin = asin = _transcendental("asin", "arcsin: inverse sine")
arctan = atan = _transcendental("atan", "arctan: inverse tangent")
sinh = _transcendental("sinh", "sinh: hyperbolic sine")
cosh = _transcendental("cosh", "cosh: hyperbolic cosine")
arcsinh = asinh = _transcendental("asinh", "arcsinh: inverse hyperbolic sine")
cbrt = _transcendental("cbrt", "cbrt: cube root")


def _inexact_binary(name: str, doc: str) -> Any:
    def fn(x: Any, y: Any, /) -> TracedArray:
        x, y = _v.promote_operands(x, y)
        if not _dtypes.is_float(x.type.dtype):
            x, y = _v.astype(x, float32), _v.astype(y, float32)
        return _v.emit_array(name, [x, y])

    return _named(fn, doc)


arctan2 = atan2 = _inexact_binary("atan2", "arctan2: the angle of the point (y=x1, x=x2)")
nextafter = _inexact_binary("nextafter", "nextafter: the next float after x1 towards x2")


def right_shift(x: Any, y: Any, /) -> TracedArray:
    """``x >> y``: arithmetic for signed ints, logical for unsigned ones, as jnp.right_shift."""
    x, y = _v.promote_operands(x, y)
    signed = _dtypes.is_signed(x.type.dtype)
    return _v.emit_array("shift_right_arithmetic" if signed else "shift_right_logical", [x, y])


bitwise_right_shift = right_shift


def square(x: Any, /) -> TracedArray:
    """``x * x``."""
    return _v.multiply(x, x)


def _exact(x: Any) -> bool:
    """Whether ``x`` is integral or bool, which rounding leaves as it is (as jnp does)."""
    return not _dtypes.is_float(x.type.dtype)


def floor(x: Any, /) -> TracedArray:
    """The largest integer <= x; integers and bools are returned as they are."""
    x = _v.asarray(x)
    return x if _exact(x) else _v.unary("floor", x)


def ceil(x: Any, /) -> TracedArray:
    """The smallest integer >= x; integers and bools are returned as they are."""
    x = _v.asarray(x)
    return x if _exact(x) else _v.unary("ceil", x)


def round(a: Any, decimals: int = 0) -> TracedArray:  # noqa: A001 - jax.numpy's name
    """Round half to even, to ``decimals`` places: ``round(a * 10**d) / 10**d`` as jnp.round
    computes it (in float32 for float16); integers are returned as they are."""
    a = _v.asarray(a)
    if _exact(a):
        if decimals < 0:
            raise _trace_error("round of integers to negative decimals is not supported")
        return a
    if decimals == 0:
        return _v.unary("round_even", a)
    if decimals > np.log10(float(np.finfo(_dtypes.to_numpy(a.type.dtype)).max)):
        return a
    x = _v.astype(a, float32) if a.type.dtype == "float16" else a
    factor = _v.constant(10**decimals, x.type.dtype)
    scaled = _v.unary("round_even", _v.elementwise("mul", x, factor))
    return _v.astype(_v.elementwise("div", scaled, factor), a.type.dtype)


around = round


def sign(x: Any, /) -> TracedArray:
    """-1, 0 or 1 by the sign of x; NaN and signed zeros are their own sign (lax.sign)."""
    x = _v.asarray(x)
    dtype = x.type.dtype
    if dtype == "bool":
        raise _trace_error("sign of bools is not defined", fix="convert to int32 first")
    zero, one = _v.constant(0, dtype), _v.constant(1, dtype)
    positive = _v.compare("gt", x, zero)
    if _dtypes.is_unsigned(dtype):
        return _v.where(positive, one, zero)
    rest = x if _dtypes.is_float(dtype) else zero
    return _v.where(positive, one, _v.where(_v.compare("lt", x, zero), -1, rest))


def clip(a: Any, /, min: Any = None, max: Any = None) -> TracedArray:  # noqa: A002
    """``a`` limited to ``[min, max]`` (either may be None): ``minimum(max, maximum(min, a))``,
    so NaN bounds or values give NaN, as in jnp.clip."""
    out = _v.asarray(a)
    if min is not None:
        out = _v.elementwise("max", min, out)
    if max is not None:
        out = _v.elementwise("min", max, out)
    return out


def isfinite(x: Any, /) -> TracedArray:
    """Whether each element is neither infinite nor NaN (always, for integers and bools)."""
    x = _v.asarray(x)
    if _exact(x):
        return full(x.shape, True, bool_)
    return _v.compare("lt", _v.absolute(x), inf)


def isnan(x: Any, /) -> TracedArray:
    """Whether each element is NaN (never, for integers and bools)."""
    x = _v.asarray(x)
    return full(x.shape, False, bool_) if _exact(x) else _v.compare("ne", x, x)


def flip(a: Any, axis: Any = None) -> TracedArray:
    """``a`` with the order of elements along ``axis`` (all axes by default) reversed."""
    a = _v.asarray(a)
    dims = tuple(sorted(_v.normalize_axes(axis, a.ndim)))
    return _v.emit_array("reverse", [a], dims=dims) if dims else a


# ----- reductions and products -----


def sum(a: Any, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> TracedArray:  # noqa: A001
    """Sum over ``axis`` (all by default); bools and narrow ints sum as 32-bit, as in jnp.sum."""
    a = _v.asarray(a, dtype)
    return _v.reduction("reduce_sum", a, axis, keepdims)


def max(a: Any, axis: Any = None, keepdims: bool = False) -> TracedArray:  # noqa: A001
    return _v.reduction("reduce_max", a, axis, keepdims)


def min(a: Any, axis: Any = None, keepdims: bool = False) -> TracedArray:  # noqa: A001
    return _v.reduction("reduce_min", a, axis, keepdims)


amax, amin = max, min
mean, var, prod = _r.mean, _r.var, _r.prod
argmax, argmin, cumsum, cumprod = _r.argmax, _r.argmin, _r.cumsum, _r.cumprod
sort, argsort = _r.sort, _r.argsort


def matmul(
    a: Any, b: Any, *, preferred_element_type: Any = None, precision: Any = None
) -> TracedArray:
    """``a @ b`` for 1-D and 2-D operands (see ``dot``)."""
    return _v.dot(a, b, preferred_element_type, precision)
