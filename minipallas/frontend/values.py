"""Traced arrays: the immutable values of a traced program, with numpy-style operators.

``TracedArray`` overloads Python's operators the way ``jax.Array`` does, and the functions
below build the IR for them. Every IR op takes operands of one type, so mixing is made explicit:
operands are promoted (``promotion``) with ``convert`` ops and broadcast numpy-style with
``broadcast_in_dim`` ops; a Python scalar becomes a scalar ``constant`` first. Operations whose
``jax.numpy`` meaning is more than one primitive are spelled out from primitives with the same
results: ``/`` converts integers to float32, ``//`` and ``%`` round towards negative infinity.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import reduce
from typing import Any

import numpy as np

from minipallas.frontend import indexing
from minipallas.frontend.foreign import is_jax_tracer, jax_tracer_error
from minipallas.frontend.promotion import (
    canonical,
    check_fits,
    default_dtype,
    is_python_scalar,
    numpy_dtype,
    promote,
    weak_dtype,
)
from minipallas.frontend.scopes import (
    Tracer,
    check_open,
    emit,
    is_nonnegative,
    mark_nonnegative,
    trace_error,
)
from minipallas.ir import dtypes
from minipallas.ir.literal import Literal
from minipallas.ir.opset.arrays import PRECISIONS
from minipallas.ir.opset.indexed import read_op_for


class TracedArray(Tracer):
    """An array value being traced; use it like a ``jax.Array`` (it has no concrete value)."""

    __slots__ = ()
    __array_ufunc__ = None  # numpy scalars and arrays defer to our reflected operators

    def __add__(self, other: Any) -> TracedArray:
        return add(self, other)

    def __radd__(self, other: Any) -> TracedArray:
        return add(other, self)

    def __sub__(self, other: Any) -> TracedArray:
        return subtract(self, other)

    def __rsub__(self, other: Any) -> TracedArray:
        return subtract(other, self)

    def __mul__(self, other: Any) -> TracedArray:
        return multiply(self, other)

    def __rmul__(self, other: Any) -> TracedArray:
        return multiply(other, self)

    def __truediv__(self, other: Any) -> TracedArray:
        return true_divide(self, other)

    def __rtruediv__(self, other: Any) -> TracedArray:
        return true_divide(other, self)

    def __floordiv__(self, other: Any) -> TracedArray:
        return floor_divide(self, other)

    def __rfloordiv__(self, other: Any) -> TracedArray:
        return floor_divide(other, self)

    def __mod__(self, other: Any) -> TracedArray:
        return remainder(self, other)

    def __rmod__(self, other: Any) -> TracedArray:
        return remainder(other, self)

    def __pow__(self, other: Any) -> TracedArray:
        return elementwise("pow", self, other)

    def __rpow__(self, other: Any) -> TracedArray:
        return elementwise("pow", other, self)

    def __matmul__(self, other: Any) -> TracedArray:
        return dot(self, other)

    def __rmatmul__(self, other: Any) -> TracedArray:
        return dot(other, self)

    def __and__(self, other: Any) -> TracedArray:
        return elementwise("and", self, other)

    def __rand__(self, other: Any) -> TracedArray:
        return elementwise("and", other, self)

    def __or__(self, other: Any) -> TracedArray:
        return elementwise("or", self, other)

    def __ror__(self, other: Any) -> TracedArray:
        return elementwise("or", other, self)

    def __xor__(self, other: Any) -> TracedArray:
        return elementwise("xor", self, other)

    def __rxor__(self, other: Any) -> TracedArray:
        return elementwise("xor", other, self)

    def __eq__(self, other: Any) -> TracedArray:  # type: ignore[override]
        return compare("eq", self, other)

    def __ne__(self, other: Any) -> TracedArray:  # type: ignore[override]
        return compare("ne", self, other)

    def __lt__(self, other: Any) -> TracedArray:
        return compare("lt", self, other)

    def __le__(self, other: Any) -> TracedArray:
        return compare("le", self, other)

    def __gt__(self, other: Any) -> TracedArray:
        return compare("gt", self, other)

    def __ge__(self, other: Any) -> TracedArray:
        return compare("ge", self, other)

    __hash__ = None  # type: ignore[assignment]  # like jax.Array: == builds an array

    def __neg__(self) -> TracedArray:
        return unary("neg", self)

    def __pos__(self) -> TracedArray:
        return self

    def __abs__(self) -> TracedArray:
        return absolute(self)

    def __invert__(self) -> TracedArray:
        return unary("not", self)

    def __getitem__(self, idx: Any) -> TracedArray:
        return getitem(self, idx)

    def __len__(self) -> int:
        if not self.shape:
            raise trace_error("len() of a 0-d array")
        return self.shape[0]

    def __iter__(self) -> Iterator[TracedArray]:
        return (self[i] for i in range(len(self)))

    def __bool__(self) -> bool:
        raise _concrete_error("a bool")

    def __index__(self) -> int:
        raise _concrete_error("an int")

    def __int__(self) -> int:
        raise _concrete_error("an int")

    def __float__(self) -> float:
        raise _concrete_error("a float")

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise _concrete_error("a numpy array", fix="use minipallas.numpy instead of numpy")

    def astype(self, dtype: Any) -> TracedArray:
        return astype(self, dtype)

    def reshape(self, *shape: Any) -> TracedArray:
        return reshape(self, shape[0] if len(shape) == 1 else shape)

    def transpose(self, *axes: Any) -> TracedArray:
        return transpose(self, axes[0] if len(axes) == 1 else (axes or None))

    @property
    def T(self) -> TracedArray:  # noqa: N802 - numpy's name
        return transpose(self)

    def sum(self, axis: Any = None, keepdims: bool = False) -> TracedArray:
        return reduction("reduce_sum", self, axis, keepdims)

    def max(self, axis: Any = None, keepdims: bool = False) -> TracedArray:
        return reduction("reduce_max", self, axis, keepdims)

    def min(self, axis: Any = None, keepdims: bool = False) -> TracedArray:
        return reduction("reduce_min", self, axis, keepdims)


BROADCAST_FIX = (
    "aligned from the right, each pair of dimensions must be equal or one of them 1: add a "
    "size-1 axis where one is missing (x[:, None], expand_dims) or reshape an operand"
)


def _concrete_error(what: str, fix: str | None = None) -> Exception:
    return trace_error(
        f"a traced value has no concrete value, so it cannot be used as {what}",
        fix=fix
        or "use minipallas.cond / when / fori_loop / numpy.where for data-dependent "
        "choices; shapes and loop counts must be static Python values",
    )


# ----- making values -----


def emit_array(name: str, operands: Sequence[Any], **attrs: Any) -> TracedArray:
    """Records a one-result array op at the user's line."""
    (result,) = emit(TracedArray, name, operands, attrs)
    return result


def constant(value: Any, dtype: str) -> TracedArray:
    return emit_array("constant", [], value=Literal.of(value, dtype))


def asarray(x: Any, dtype: Any = None) -> TracedArray:
    """``x`` as a traced array: tracers pass through (converted to ``dtype`` if given), Python
    scalars and numpy arrays become constants."""
    if isinstance(x, TracedArray):
        return x if dtype is None else astype(x, dtype)
    if isinstance(x, Tracer):
        raise trace_error("a ref is not an array value", fix="read it first: ref[...]")
    if is_python_scalar(x):
        name = default_dtype(x) if dtype is None else canonical(dtype)
        if isinstance(x, int) and dtypes.is_int(name):
            check_fits(x, name)
        return constant(x, name)
    if isinstance(x, np.ndarray | np.generic | list | tuple):
        array = np.asarray(x)
        if array.dtype == object:
            raise trace_error(
                "cannot make an array out of traced values",
                fix="build it with minipallas.numpy operations instead",
            )
        return constant(array, numpy_dtype(array) if dtype is None else canonical(dtype))
    if is_jax_tracer(x):
        raise jax_tracer_error(x)
    raise trace_error(f"cannot use {type(x).__name__} {x!r} as an array")


def as_result(x: Any, what: str) -> TracedArray:
    """A value returned from traced code: an array (Python and numpy values become constants),
    never a ref."""
    if isinstance(x, Tracer) and not isinstance(x, TracedArray):
        raise trace_error(
            f"{what} returned a ref; only arrays can be returned",
            fix="return the ref's contents (ref[...]), or write results into a ref passed in",
        )
    return asarray(x)


def astype(x: Any, dtype: Any) -> TracedArray:
    """``x`` converted to ``dtype`` by value (a ``convert`` op when the dtype changes)."""
    x = asarray(x)
    name = canonical(dtype)
    return x if x.type.dtype == name else emit_array("convert", [x], dtype=name)


def broadcast_to(x: Any, shape: Sequence[int]) -> TracedArray:
    """``x`` broadcast numpy-style to ``shape`` (a ``broadcast_in_dim`` when it changes)."""
    x = asarray(x)
    shape = tuple(int(d) for d in shape)
    lead = len(shape) - x.ndim
    if lead < 0 or any(d not in (1, s) for d, s in zip(x.shape, shape[lead:], strict=True)):
        raise trace_error(f"cannot broadcast shape {x.shape} to {shape}", fix=BROADCAST_FIX)
    if x.shape == shape:
        return x
    return emit_array("broadcast_in_dim", [x], shape=shape, dims=tuple(range(lead, len(shape))))


def promote_operands(*xs: Any) -> list[TracedArray]:
    """The operands of an elementwise op converted to one dtype and broadcast to one shape.

    Tracers and numpy values decide the dtype; Python scalars then take it weakly.
    """
    check_open(*xs)
    for x in xs:
        if isinstance(x, Tracer) and not isinstance(x, TracedArray):
            raise trace_error("a ref is not an array value", fix="read it first: ref[...]")
    weak = [x for x in xs if is_python_scalar(x)]
    strong = [_dtype_of(x) for x in xs if not is_python_scalar(x)]
    dtype = reduce(promote, strong) if strong else reduce(promote, map(default_dtype, weak))
    for x in weak:
        dtype = weak_dtype(x, dtype)
    arrays = []
    for x in xs:
        if is_python_scalar(x):
            check_fits(x, dtype)
        arrays.append(asarray(x, dtype))
    try:
        shape = np.broadcast_shapes(*(a.shape for a in arrays))
    except ValueError:
        raise trace_error(
            f"shapes {', '.join(str(a.shape) for a in arrays)} do not broadcast together",
            fix=BROADCAST_FIX,
        ) from None
    return [broadcast_to(a, shape) for a in arrays]


def _dtype_of(x: Any) -> str:
    if isinstance(x, TracedArray):
        return x.type.dtype
    if is_jax_tracer(x):
        raise jax_tracer_error(x)
    array = np.asarray(x)
    if array.dtype == object:
        raise trace_error(f"cannot use {type(x).__name__} {x!r} as an array")
    return numpy_dtype(array)


# ----- elementwise -----


def elementwise(name: str, *xs: Any) -> TracedArray:
    """IR op ``name`` on the promoted, broadcast operands."""
    return emit_array(name, promote_operands(*xs))


def unary(name: str, x: Any) -> TracedArray:
    return emit_array(name, [asarray(x)])


def add(x: Any, y: Any) -> TracedArray:
    return _keeps_nonnegative(elementwise("add", x, y), x, y)


def subtract(x: Any, y: Any) -> TracedArray:
    return elementwise("sub", x, y)


def multiply(x: Any, y: Any) -> TracedArray:
    return _keeps_nonnegative(elementwise("mul", x, y), x, y)


def surely_nonnegative(x: Any) -> bool:
    """Whether ``x`` is known to be >= 0: a non-negative Python or numpy int, or a tracer
    recorded as such (grid and counting loop indices, sums and products of those)."""
    if isinstance(x, Tracer):
        return is_nonnegative(x)
    return isinstance(x, int | np.integer) and x >= 0


def _keeps_nonnegative(out: TracedArray, *xs: Any) -> TracedArray:
    """Records an integer sum or product of surely non-negative operands as non-negative, so
    that an index computed from grid or loop indices (``i * 8 + 1``) needs no negative wrap.
    int32 overflow is not considered, as for the grid's block starts (``kernels.programs.grid``)."""
    if dtypes.is_int(out.type.dtype) and all(surely_nonnegative(x) for x in xs):
        mark_nonnegative(out)
    return out


def compare(name: str, x: Any, y: Any) -> TracedArray:
    """A comparison giving bool; bools compare as the ints 0 and 1, as in numpy."""
    x, y = promote_operands(x, y)
    if x.type.dtype == "bool":
        x, y = astype(x, "int32"), astype(y, "int32")
    return emit_array(name, [x, y])


def true_divide(x: Any, y: Any) -> TracedArray:
    """``x / y``; integers and bools are converted to float32 first, as jnp.true_divide does."""
    x, y = promote_operands(x, y)
    if not dtypes.is_float(x.type.dtype):
        x, y = astype(x, "float32"), astype(y, "float32")
    return emit_array("div", [x, y])


def floor_divide(x: Any, y: Any) -> TracedArray:
    """``x // y`` on integers, rounding towards negative infinity exactly as jnp.floor_divide.

    ``div`` truncates towards zero, so where the signs differ and the division is inexact the
    quotient is one too high. Float floor division needs a rounding op the IR does not have,
    so it is refused.
    """
    x, y = promote_operands(x, y)
    dtype = x.type.dtype
    if dtypes.is_float(dtype):
        raise trace_error(
            f"'//' on {dtype} values is not supported (the IR has no floor op)",
            fix="divide integers, or use '/' on floats",
        )
    quotient = emit_array("div", [x, y])
    if not dtypes.is_signed(dtype):
        return quotient
    signs_differ = _sign_differs(x, y)
    inexact = compare("ne", emit_array("rem", [x, y]), 0)
    return where(elementwise("and", signs_differ, inexact), quotient - 1, quotient)


def _sign_differs(x: TracedArray, y: TracedArray) -> TracedArray:
    """``sign(x) != sign(y)`` (zero has its own sign), from comparisons."""
    negative = elementwise("xor", compare("lt", x, 0), compare("lt", y, 0))
    positive = elementwise("xor", compare("gt", x, 0), compare("gt", y, 0))
    return elementwise("or", negative, positive)


def remainder(x: Any, y: Any) -> TracedArray:
    """``x % y`` with the sign of ``y``, as jnp.remainder (integer ``x % 0`` is 0)."""
    x, y = promote_operands(x, y)
    if not dtypes.is_float(x.type.dtype):
        y = where(compare("eq", y, 0), 1, y)
    trunc = emit_array("rem", [x, y])
    signs_differ = elementwise("xor", compare("lt", trunc, 0), compare("lt", y, 0))
    fix = elementwise("and", signs_differ, compare("ne", trunc, 0))
    return where(fix, trunc + y, trunc)


def absolute(x: Any) -> TracedArray:
    """``abs(x)``; unsigned ints and bools are their own absolute value."""
    x = asarray(x)
    unsigned = x.type.dtype == "bool" or dtypes.is_unsigned(x.type.dtype)
    return x if unsigned else unary("abs", x)


def where(condition: Any, x: Any, y: Any) -> TracedArray:
    """Elementwise choice; a non-bool condition means ``condition != 0``."""
    condition = asarray(condition)
    if condition.type.dtype != "bool":
        condition = compare("ne", condition, 0)
    x, y = promote_operands(x, y)
    try:
        shape = np.broadcast_shapes(condition.shape, x.shape)
    except ValueError:
        raise trace_error(
            f"condition of shape {condition.shape} does not broadcast with "
            f"values of shape {x.shape}",
            fix=BROADCAST_FIX,
        ) from None
    parts = [broadcast_to(v, shape) for v in (condition, x, y)]
    return emit_array("select", parts)


# ----- shapes, reductions, products, indexing -----


def resolve_shape(shape: Any, old: tuple[int, ...]) -> tuple[int, ...]:
    """A reshape's target shape, with one -1 inferred; it must hold as many elements."""
    dims = tuple(int(d) for d in (shape if isinstance(shape, Sequence) else (shape,)))
    size = int(np.prod(old, dtype=np.int64))
    known = int(np.prod([d for d in dims if d != -1], dtype=np.int64))
    if dims.count(-1) == 1 and known and size % known == 0:
        dims = tuple(size // known if d == -1 else d for d in dims)
    if any(d < 0 for d in dims) or int(np.prod(dims, dtype=np.int64)) != size:
        raise trace_error(f"cannot reshape shape {old} to {dims}: sizes differ")
    return dims


def reshape(x: Any, shape: Any) -> TracedArray:
    """Row-major reshape; one dimension may be -1 (inferred)."""
    x = asarray(x)
    shape = resolve_shape(shape, x.shape)
    return x if shape == x.shape else emit_array("reshape", [x], shape=shape)


def transpose(x: Any, axes: Any = None) -> TracedArray:
    """Permute dimensions; the default reverses them."""
    x = asarray(x)
    perm = tuple(reversed(range(x.ndim))) if axes is None else normalize_axes(axes, x.ndim)
    if sorted(perm) != list(range(x.ndim)):
        raise trace_error(f"axes {axes} are not a permutation of {x.ndim} dimensions")
    return x if perm == tuple(range(x.ndim)) else emit_array("transpose", [x], permutation=perm)


def normalize_axes(axis: Any, ndim: int) -> tuple[int, ...]:
    """Static axes, negative ones counted from the end, each checked to exist."""
    axes = tuple(range(ndim)) if axis is None else axis
    axes = tuple(axes) if isinstance(axes, Sequence) else (axes,)
    if not all(isinstance(a, int | np.integer) and -ndim <= a < ndim for a in axes):
        raise trace_error(f"axis {axis} is out of range for an array of rank {ndim}")
    return tuple(int(a) % ndim for a in axes)


def reduction(name: str, x: Any, axis: Any = None, keepdims: bool = False) -> TracedArray:
    """``reduce_sum/prod/max/min`` over ``axis`` (all by default); sums and products of bool
    and narrow ints are 32-bit (int32, uint32 for unsigned), as in jnp.sum and jnp.prod."""
    x = asarray(x)
    axes = normalize_axes(axis, x.ndim)
    if len(set(axes)) != len(axes):
        raise trace_error(f"axis {axis} repeats a dimension")
    widens = name in ("reduce_sum", "reduce_prod")
    if widens and x.type.dtype in ("bool", "int8", "int16"):
        x = astype(x, "int32")
    elif widens and x.type.dtype in ("uint8", "uint16"):
        x = astype(x, "uint32")
    out = emit_array(name, [x], axes=tuple(sorted(axes)))
    if keepdims:
        out = reshape(out, tuple(1 if i in axes else d for i, d in enumerate(x.shape)))
    return out


def dot(x: Any, y: Any, preferred_element_type: Any = None, precision: Any = None) -> TracedArray:
    """Matrix product of 1-D or 2-D operands, promoted to one dtype; the result (and
    accumulation) dtype is ``preferred_element_type`` when given, as in jnp.dot.
    ``precision`` is jnp.dot's: None, one ``lax.Precision`` (or its name) for both operands,
    or a pair; it says how the TPU and GPU multiply (``ir/opset/arrays.py``, ``PRECISIONS``)."""
    x, y = asarray(x), asarray(y)
    if not (1 <= x.ndim <= 2 and 1 <= y.ndim <= 2):
        raise trace_error(
            f"dot takes 1-D or 2-D operands, got shapes {x.shape} and {y.shape}",
            fix="reshape to 2-D, or use * for scalars",
        )
    if x.shape[-1] != y.shape[0]:
        raise trace_error(f"dot: contracting dimensions differ: {x.shape} and {y.shape}")
    dtype = promote(x.type.dtype, y.type.dtype)
    out_dtype = dtype if preferred_element_type is None else canonical(preferred_element_type)
    x2 = reshape(astype(x, dtype), (-1, x.shape[-1]))
    y2 = reshape(astype(y, dtype), (y.shape[0], -1))
    attrs = {} if precision is None else {"precision": dot_precision(precision)}
    out = emit_array("dot", [x2, y2], dtype=out_dtype, **attrs)
    return reshape(out, x.shape[:-1] + y.shape[1:])


def dot_precision(precision: Any) -> tuple[str, str]:
    """``precision`` as the ``dot`` op's pair of names: a ``lax.Precision`` or a name
    ("highest"), or a pair of them, one per operand."""
    pair = tuple(precision) if isinstance(precision, tuple | list) else (precision, precision)
    names = tuple(str(getattr(p, "name", p)).lower() for p in pair)
    if len(names) != 2 or not all(n in PRECISIONS for n in names):
        raise trace_error(
            f"dot: precision {precision!r} is not a lax.Precision or a pair of them",
            fix=f"use one of {', '.join(PRECISIONS)} (lax.Precision.HIGHEST...), or a pair",
        )
    return names  # type: ignore[return-value]


def wrap_negative(i: TracedArray, n: int) -> TracedArray:
    """``i`` (an index, elementwise) with ``n`` added where it is negative: a negative index
    counts once from the end, as JAX's indexing and ``lax.dynamic_slice`` take it. An int8
    index is widened to int32 first, where ``i + n`` cannot overflow; unsigned ones never wrap.
    """
    if not dtypes.is_signed(i.type.dtype):
        return i
    i = astype(i, "int32")
    return where(i < 0, i + n, i)


def index_operands(index: indexing.Index) -> list[TracedArray]:
    """The operands of a normalized index as arrays, each traced one that may be negative
    wrapped against its dimension (``Index.extents``)."""
    return [
        asarray(d) if n is None or surely_nonnegative(d) else wrap_negative(asarray(d), n)
        for d, n in zip(index.dynamic, index.extents, strict=True)
    ]


def getitem(x: Any, idx: Any) -> TracedArray:
    """``x[idx]`` as a ``slice``, ``dynamic_slice`` or ``gather``; ``None`` adds an axis."""
    x = asarray(x)
    index = indexing.normalize(idx, x.shape, arrays=True, newaxis=True)
    dynamic = index_operands(index)
    if dynamic or index.indexer != tuple(indexing.Slice(0, d, 1) for d in x.shape):
        x = emit_array(read_op_for(index.indexer), [x, *dynamic], indexer=index.indexer)
    if index.new_axes:
        shape = list(x.shape)
        for position in index.new_axes:
            shape.insert(position, 1)
        x = reshape(x, shape)
    return x
