"""Import rules for the common ``lax`` primitives: elementwise math, comparisons, ``select_n``,
conversions, shape changes, reductions, ``iota`` and ``dot_general``.

Most map one to one onto minipallas ops, whose numerics are XLA's. Where upstream's meaning is
built from several minipallas ops, the rule spells out what XLA computes:

- binary ops take a scalar operand next to an array, or a size-1 dimension next to a longer
  one (upstream's jaxprs allow both): it is broadcast explicitly;
- comparisons of bools are written with ``and``/``or``/``xor``/``not``;
- ``mul`` with ``out_dtype`` converts both operands to it, then multiplies (XLA's lowering and
  Mosaic's); a transcendental's ``accuracy`` imports only as None (``params.ACCURACY``);
- ``integer_pow`` is upstream's own square-and-multiply chain (``lax._integer_pow``), so it
  rounds the same way; ``square`` is ``x * x``;
- ``pow`` (of a float: upstream has no integer ``pow``) converts an integer exponent to the
  base's dtype first, as upstream's lowering does;
- ``sign`` is built from comparisons and ``select`` (NaN and signed zeros pass through);
- ``clamp(lo, x, hi)`` is ``min(max(x, lo), hi)``, XLA's definition;
- ``select_n`` with an integer predicate is a chain of ``select``s (upstream leaves an
  out-of-range predicate undefined);
- ``dot_general`` with any contracting and batch dimensions imports as a ``dot`` (batched when
  it has batch dimensions) between transposes and reshapes; bfloat16 operands are converted
  to float32 first where XLA:CPU converts them; its ``precision`` becomes the ``dot``'s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from jax import lax

from minipallas.interop.importer.avals import dtype_of, type_of
from minipallas.interop.importer.engine import ImportScope, rule
from minipallas.interop.importer.params import ACCURACY, READ, SHARDING, NoEffect
from minipallas.ir import dtypes
from minipallas.ir.core import Value
from minipallas.ir.types import ArrayType
from minipallas.lowering.compat.jax_private import core as jax_core

_SAME_NAME = ("add", "sub", "div", "rem", "max", "min", "and", "or", "xor", "atan2")
_SAME_NAME += ("nextafter", "shift_left", "shift_right_logical", "shift_right_arithmetic")
_UNARY = ("neg", "abs", "not", "floor", "ceil", "erf", "erf_inv", "asin", "atan", "sinh", "cosh")
_UNARY += ("asinh", "population_count", "clz")
# the transcendentals that take ``accuracy=`` (only None imports, as upstream's Mosaic rules)
_TRANSCENDENTAL = ("exp", "exp2", "expm1", "log", "log1p", "tanh", "logistic", "sin", "cos")
_TRANSCENDENTAL += ("tan", "sqrt", "rsqrt", "cbrt")
_COMPARE = ("eq", "ne", "lt", "le", "gt", "ge")


def operands(scope: ImportScope, eqn: jax_core.JaxprEqn) -> list[Value]:
    """The equation's operands, each broadcast explicitly to their common shape.

    Upstream's jaxprs broadcast implicitly: a scalar next to an array, and (jax 0.10.2, for
    ``jnp`` ops on ``(n, 1)`` and ``(n, m)`` operands) a size-1 dimension next to a longer one
    of the same rank. minipallas ops take operands of one shape, so each becomes a
    ``broadcast_in_dim``."""
    values = [scope.read(a) for a in eqn.invars]
    shapes = [v.type.shape for v in values]
    try:
        shape = np.broadcast_shapes(*shapes)
    except ValueError:
        raise scope.error(f"operands of shapes {shapes} do not broadcast together") from None
    return [scope.broadcast(v, shape) for v in values]


@rule(*_SAME_NAME, params={})
def binary(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    return [scope.emit(eqn.primitive.name, operands(scope, eqn))]


@rule(*_UNARY, params={})
@rule(*_TRANSCENDENTAL, params={"accuracy": ACCURACY})
def unary(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    return [scope.emit(eqn.primitive.name, operands(scope, eqn))]


@rule("mul", params={"out_dtype": READ})
def mul(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    """``lax.mul(x, y, out_dtype=t)`` converts both operands to ``t``, then multiplies: XLA's
    lowering (``_nary_lower_hlo``: broadcast, ``convert``, ``multiply``) and Mosaic's
    (``_mul_lowering_rule``) both do."""
    x, y = operands(scope, eqn)
    if eqn.params.get("out_dtype") is not None:
        dtype = dtype_of(eqn.params["out_dtype"], "the out_dtype of mul")
        x, y = scope.convert(x, dtype), scope.convert(y, dtype)
    return [scope.emit("mul", [x, y])]


@rule("round", params={"rounding_method": READ})
def round_(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    """``lax.round``'s default rounds half away from zero; ``jnp.round`` asks for half to even."""
    even = int(eqn.params["rounding_method"]) == int(lax.RoundingMethod.TO_NEAREST_EVEN)
    return [scope.emit("round_even" if even else "round", operands(scope, eqn))]


@rule("copy", params={})
def identity(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    return [scope.read(a) for a in eqn.invars]


@rule("optimization_barrier", params={})
def optimization_barrier(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    """One barrier an array operand (XLA folds through none, as through upstream's); a ref
    passes as it is."""
    values = [scope.read(a) for a in eqn.invars]
    return [
        scope.emit("optimization_barrier", [v]) if isinstance(v.type, ArrayType) else v
        for v in values
    ]


@rule(*_COMPARE, params={})
def compare(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    a, b = operands(scope, eqn)
    name = eqn.primitive.name
    if a.type.dtype != "bool":
        return [scope.emit(name, [a, b])]
    if name in ("eq", "ne"):
        differ = scope.emit("xor", [a, b])
        return [differ if name == "ne" else scope.emit("not", [differ])]
    if name in ("gt", "ge"):
        a, b = b, a  # a > b is b < a
    not_a = scope.emit("not", [a])
    return [scope.emit("and" if name in ("lt", "gt") else "or", [not_a, b])]


@rule("pow", params={})
def pow_(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    """Upstream's ``pow`` takes a float base; an integer exponent is converted to it first."""
    x, y = operands(scope, eqn)
    return [scope.emit("pow", [x, scope.convert(y, x.type.dtype)])]


@rule("integer_pow", params={"y": READ})
def integer_pow(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    (x,) = operands(scope, eqn)
    y = int(eqn.params["y"])
    one = scope.constant(1, x.type.dtype, x.type.shape)
    if y == 0:
        return [one]
    acc, n = None, abs(y)
    while n > 0:
        if n & 1:
            acc = x if acc is None else scope.emit("mul", [acc, x])
        n >>= 1
        if n > 0:
            x = scope.emit("mul", [x, x])
    return [scope.emit("div", [one, acc]) if y < 0 else acc]


@rule("square", params={})
def square(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    (x,) = operands(scope, eqn)
    return [scope.emit("mul", [x, x])]


@rule("sign", params={})
def sign(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    (x,) = operands(scope, eqn)
    dtype, shape = x.type.dtype, x.type.shape
    zero, one = scope.constant(0, dtype, shape), scope.constant(1, dtype, shape)
    positive = scope.emit("gt", [x, zero])
    if dtypes.is_unsigned(dtype):
        return [scope.emit("select", [positive, one, zero])]
    negative = scope.emit("lt", [x, zero])
    rest = x if dtypes.is_float(dtype) else zero  # NaN and signed zeros are their own sign
    below = scope.emit("select", [negative, scope.constant(-1, dtype, shape), rest])
    return [scope.emit("select", [positive, one, below])]


@rule("is_finite", params={})
def is_finite(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    (x,) = operands(scope, eqn)
    infinity = scope.constant(np.inf, x.type.dtype, x.type.shape)
    return [scope.emit("lt", [scope.emit("abs", [x]), infinity])]


@rule("clamp", params={})
def clamp(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    low, x, high = operands(scope, eqn)
    result = scope.emit("min", [scope.emit("max", [x, low]), high])
    floor = scope.static(eqn.invars[0])
    if floor is not None and dtypes.is_int(x.type.dtype) and np.all(floor >= 0):
        scope.nonnegative.add(result)
    return [result]


@rule("select_n", params={})
def select_n(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    pred, *cases = (scope.read(a) for a in eqn.invars)
    if len(cases) == 1:
        return [cases[0]]
    shape = cases[0].type.shape
    pred = scope.broadcast(pred, shape)
    if pred.type.dtype == "bool":
        return [scope.emit("select", [pred, cases[1], cases[0]])]
    out = cases[0]
    for k, case in enumerate(cases[1:], start=1):
        hit = scope.emit("eq", [pred, scope.constant(k, pred.type.dtype, shape)])
        out = scope.emit("select", [hit, case, out])
    return [out]


_WEAK_TYPE = NoEffect(
    "a typing fact for jax's later dtype promotion; the value is new_dtype's either way"
)


@rule(
    "convert_element_type",
    params={"new_dtype": READ, "weak_type": _WEAK_TYPE, "sharding": SHARDING},
)
def convert_element_type(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    x = scope.read(eqn.invars[0])
    dtype = dtype_of(eqn.params["new_dtype"], "the converted value")
    return [scope.convert(x, dtype)]


@rule("bitcast_convert_type", params={"new_dtype": READ})
def bitcast_convert_type(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    x = scope.read(eqn.invars[0])
    dtype = dtype_of(eqn.params["new_dtype"], "the bitcast value")
    return [x if dtype == x.type.dtype else scope.emit("bitcast", [x], dtype=dtype)]


@rule(
    "broadcast_in_dim", params={"shape": READ, "broadcast_dimensions": READ, "sharding": SHARDING}
)
def broadcast_in_dim(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    x = scope.read(eqn.invars[0])
    shape = tuple(eqn.params["shape"])
    dims = tuple(eqn.params["broadcast_dimensions"])
    if x.type.shape == shape and dims == tuple(range(len(shape))):
        return [x]
    return [scope.emit("broadcast_in_dim", [x], shape=shape, dims=dims)]


@rule("reshape", params={"new_sizes": READ, "dimensions": READ, "sharding": SHARDING})
def reshape(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    x = scope.read(eqn.invars[0])
    if eqn.params.get("dimensions") is not None:
        x = scope.emit("transpose", [x], permutation=tuple(eqn.params["dimensions"]))
    return [_reshape(scope, x, tuple(eqn.params["new_sizes"]))]


def _reshape(scope: ImportScope, x: Value, shape: tuple[int, ...]) -> Value:
    return x if x.type.shape == shape else scope.emit("reshape", [x], shape=shape)


@rule("squeeze", params={"dimensions": READ})  # through the result's shape
def squeeze(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    x = scope.read(eqn.invars[0])
    return [_reshape(scope, x, type_of(eqn.outvars[0].aval).shape)]


@rule("transpose", params={"permutation": READ})
def transpose(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    x = scope.read(eqn.invars[0])
    perm = tuple(eqn.params["permutation"])
    if perm == tuple(range(len(perm))):
        return [x]
    return [scope.emit("transpose", [x], permutation=perm)]


@rule("iota", params={"dtype": READ, "shape": READ, "dimension": READ, "sharding": SHARDING})
def iota(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    t = ArrayType(tuple(eqn.params["shape"]), dtype_of(eqn.params["dtype"], "an iota"))
    result = scope.emit("iota", [], type=t, dimension=int(eqn.params["dimension"]))
    scope.nonnegative.add(result)
    return [result]


_REDUCE = {"reduce_sum": "reduce_sum", "reduce_max": "reduce_max", "reduce_min": "reduce_min"}
_REDUCE_BOOL = {"reduce_or": "reduce_max", "reduce_and": "reduce_min"}


@rule("reduce_sum", params={"axes": READ, "out_sharding": SHARDING})
@rule("reduce_max", "reduce_min", *_REDUCE_BOOL, params={"axes": READ})
def reduce(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    x = scope.read(eqn.invars[0])
    name = eqn.primitive.name
    if name in _REDUCE_BOOL and x.type.dtype != "bool":
        raise scope.error(f"'{name}' of integers (a bitwise reduction) cannot be imported")
    axes = tuple(int(a) for a in eqn.params["axes"])
    if not axes:
        return [x]
    return [scope.emit({**_REDUCE, **_REDUCE_BOOL}[name], [x], axes=axes)]


@rule(
    "dot_general",
    params={
        "dimension_numbers": READ,
        "precision": READ,
        "preferred_element_type": READ,
        "out_sharding": SHARDING,
    },
)
def dot_general(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    """Any contracting and batch dimensions, as one (batched) ``dot`` of
    ``(B..., M, K) x (B..., K, N)``: each operand is transposed to batch, free, contracted
    (lhs) or batch, contracted, free (rhs) order and its free and contracted dimensions
    merged by a reshape; the product's ``(M, N)`` is split back into the free dimensions,
    which is upstream's result order (batch, lhs free, rhs free). Operands of two dtypes are
    converted to the result dtype (``preferred_element_type``) first. Without contracting
    dimensions it is an outer product, a ``mul`` of broadcasts (as XLA computes it: a sum of
    one product would turn a ``-0.0`` product into ``+0.0``).
    A bfloat16 dot into float32 is converted to float32 first where XLA:CPU converts it
    (``upcast``: a ``ki,kj`` form, or an operand that is a ``transpose`` 's result, which XLA
    lays out column-major); the others it sums in its bfloat16 kernel's order
    (``ir/interpret/xla/dot_order.py``), which the interpreter follows, and the lowering folds
    this rule's transposes back into upstream's ``dot_general``. ``precision`` (a pair of
    ``lax.Precision``) becomes the ``dot``'s (``_precision``). A float result narrower than its
    operands (``f32 x f32 -> bf16``) is the product in the operands' dtype, rounded once, as
    XLA:CPU computes it (rounding the operands first is another number)."""
    precision = _precision(scope, eqn.params.get("precision"))
    a, b = (scope.read(v) for v in eqn.invars)
    (contract_a, contract_b), (batch_a, batch_b) = eqn.params["dimension_numbers"]
    result = type_of(eqn.outvars[0].aval)
    upcast = (a.type.dtype, result.dtype) == ("bfloat16", "float32") and (
        _lhs_column_major(eqn) or _transposed(scope, a) or _transposed(scope, b)
    )
    if a.type.dtype != b.type.dtype or not contract_a or upcast:
        a, b = scope.convert(a, result.dtype), scope.convert(b, result.dtype)
    if not contract_a:
        return [_outer(scope, a, b, tuple(batch_a), tuple(batch_b), result.shape)]
    lhs, m = _dot_operand(scope, a, tuple(batch_a), tuple(contract_a), contracted_last=True)
    rhs, n = _dot_operand(scope, b, tuple(batch_b), tuple(contract_b), contracted_last=False)
    narrowing = (
        dtypes.is_float(result.dtype)
        and dtypes.is_float(a.type.dtype)
        and (dtypes.itemsize(result.dtype) < dtypes.itemsize(a.type.dtype))
    )
    accumulated = a.type.dtype if narrowing else result.dtype
    product = scope.emit("dot", [lhs, rhs], dtype=accumulated, **precision)
    batch = tuple(a.type.shape[d] for d in batch_a)
    return [scope.convert(_reshape(scope, product, (*batch, *m, *n)), result.dtype)]


def _precision(scope: ImportScope, given: object) -> dict[str, tuple[str, str]]:
    """The ``dot``'s ``precision`` attribute for upstream's: None or a pair of
    ``lax.Precision``, as two of "default", "high", "highest" (no attribute when both are
    "default"). An algorithm (a ``lax.DotAlgorithmPreset`` or ``lax.DotAlgorithm``) is
    refused: no target of minipallas computes one, and upstream's Mosaic lowering takes a
    pair of precisions only."""
    if given is None:
        return {}
    pair = tuple(given) if isinstance(given, tuple | list) else (given,)
    if len(pair) != 2 or not all(isinstance(p, lax.Precision) for p in pair):
        raise scope.error(
            f"'dot_general' with precision={given!r} cannot be imported: minipallas imports "
            "None or a pair of lax.Precision, not a dot algorithm (upstream's Mosaic lowering "
            "takes a pair of precisions only)",
            fix="pass precision=lax.Precision.HIGHEST (or DEFAULT, HIGH) instead of the algorithm",
        )
    names = tuple(p.name.lower() for p in pair)
    return {} if names == ("default", "default") else {"precision": names}


def _dot_operand(
    scope: ImportScope,
    x: Value,
    batch: tuple[int, ...],
    contracted: tuple[int, ...],
    contracted_last: bool,
) -> tuple[Value, tuple[int, ...]]:
    """``x`` as ``(batch..., free, contracted)`` (lhs) or ``(batch..., contracted, free)``
    (rhs), free and contracted dimensions each merged into one; and the free dimensions."""
    free = tuple(d for d in range(x.type.ndim) if d not in batch and d not in contracted)
    inner = (*free, *contracted) if contracted_last else (*contracted, *free)
    perm = (*batch, *inner)
    if perm != tuple(range(x.type.ndim)):
        x = scope.emit("transpose", [x], permutation=perm)
    shape = x.type.shape
    free_shape = tuple(shape[perm.index(d)] for d in free)
    k = math.prod(shape[perm.index(d)] for d in contracted)
    rows = (math.prod(free_shape), k) if contracted_last else (k, math.prod(free_shape))
    return _reshape(scope, x, (*shape[: len(batch)], *rows)), free_shape


def _lhs_column_major(eqn: jax_core.JaxprEqn) -> bool:
    """Whether the left side is ``(batch..., k, m)``: batch dims leading, then the one
    contracted dim, then one free dim (``ki,kj``, ``bki,bkj``). XLA:CPU converts such a dot
    to float32 (with a right side whose batch dims do not lead, jaxlib 0.10.2 fails to run
    it); any other layout it runs in bfloat16, rewritten where it must be (measured on all
    36 layouts of a batched dot, ``bench/numerics/bf16_dot_bits.py``, and einsum forms)."""
    (contract_a, _), (batch_a, _) = eqn.params["dimension_numbers"]
    nb = len(batch_a)
    shaped = eqn.invars[0].aval.ndim == nb + 2 and tuple(batch_a) == tuple(range(nb))
    return shaped and tuple(contract_a) == (nb,)


def _transposed(scope: ImportScope, x: Value) -> bool:
    """Whether ``x`` is the result of a ``transpose`` emitted in this block."""
    producer = next((op for op in reversed(scope.builder.ops) if x in op.results), None)
    return producer is not None and producer.name == "transpose"


def _outer(
    scope: ImportScope, a: Value, b: Value, batch_a: tuple, batch_b: tuple, shape: tuple[int, ...]
) -> Value:
    """``a * b`` broadcast to upstream's result order (batch, ``a``'s free, ``b``'s free)."""
    nb, n_free_a = len(batch_a), a.type.ndim - len(batch_a)
    wide = []
    for x, batch, dims in (
        (a, batch_a, range(nb + n_free_a)),
        (b, batch_b, (*range(nb), *range(nb + n_free_a, len(shape)))),
    ):
        perm = (*batch, *(d for d in range(x.type.ndim) if d not in batch))
        if perm != tuple(range(x.type.ndim)):
            x = scope.emit("transpose", [x], permutation=perm)
        if x.type.shape != shape:
            x = scope.emit("broadcast_in_dim", [x], shape=shape, dims=tuple(dims))
        wide.append(x)
    return scope.emit("mul", wide)
