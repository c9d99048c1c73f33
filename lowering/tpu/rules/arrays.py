"""Mosaic rules for the pure array ops: elementwise math, shapes and reductions.

Elementwise ops are ``arith`` / ``math`` on scalars and vectors alike, picked by dtype (signed,
unsigned or float). Shapes: ``broadcast_in_dim`` is a ``vector.shape_cast`` placing the kept
dimensions then a ``vector.broadcast``; ``reshape`` a ``vector.shape_cast``; ``transpose``
``tpu.transpose``. Reductions are ``vector.multi_reduction`` (a full reduction to a scalar goes
through a leading unit dimension and ``vector.extract``, as upstream does); ``dot`` has a file
of its own (``dot.py``). ``reciprocal`` is ``tpu.reciprocal`` (``approx``, ``full_range``),
``multiple_of`` ``tpu.assume_multiple``.

Where minipallas's meaning and upstream's lowering part ways, minipallas's meaning wins:
``neg`` of a float is ``arith.negf`` (upstream emits ``0 - x``, which turns ``-0.0`` into
``+0.0``). Where Mosaic has no lowering, another form with the same bits: unsigned ``max`` /
``min`` are a compare and a select, 8-bit integer vectors compute on 32 bits (``widen``), float
``!=`` is ``one`` (``_CMPF``); ``pow`` of integers is refused. Integer division and ``rem`` by
zero, and float-to-integer conversion out of range, are the TPU's, as upstream leaves them; so
are shifts by the bit width or more (upstream emits a bare ``arith.shli``/``shrui``/
``shrsi``). A convert between bf16 and f16 (same width; ``arith.truncf`` needs a narrower
result, and upstream rejects it with "Unsupported cast") goes through f32, which holds either
exactly, so it rounds once.

``erf_inv`` is upstream's expansion (Giles' float32 polynomial, the interpreter's); bf16/f16
compute it in f32 and round once, as chlo does (upstream rejects them). Elementwise ops
upstream's Mosaic lowering has no rule for (``expm1``, ``asin``, ``atan``, ``sinh``, ``cosh``,
``asinh``, ``cbrt``) are rejected with a fix; so are ``population_count`` of a scalar and
``nextafter`` of bf16/f16, as upstream rejects them (float32 ``nextafter`` is upstream's
expansion in the float's bits).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.conversions import to_dtype
from minipallas.ir.core import Op
from minipallas.ir.opset.meanings import ERF_INV_COEFFICIENTS
from minipallas.ir.types import ArrayType
from minipallas.lowering.compat.jaxlib_shim import arith, ir, math, tpu, vector
from minipallas.lowering.tpu import emit
from minipallas.lowering.tpu.context import LoweringContext, rule, unsupported
from minipallas.lowering.tpu.widen import widened


def _kind(dtype: str) -> str:
    """``f`` (float), ``s`` (signed int), ``u`` (unsigned int) or ``b`` (bool)."""
    if dtypes.is_float(dtype):
        return "f"
    if dtype == "bool":
        return "b"
    return "s" if dtypes.is_signed(dtype) else "u"


def _unsigned(predicate: str):  # noqa: ANN202
    """Unsigned ``max``/``min``: Mosaic does not legalize ``arith.maxui``/``minui`` (upstream
    emits them and fails to compile). A signed compare of the values with their top bit
    flipped orders them as unsigned ones do, then a select; compared directly, the
    canonicalizer would fold the select back into ``maxui``."""

    def build(x: ir.Value, y: ir.Value) -> ir.Value:
        top = arith.constant(x.type, _splat_attr(x.type))
        flipped = [arith.xori(v, top) for v in (x, y)]
        keep_x = arith.cmpi(getattr(arith.CmpIPredicate, predicate), *flipped)
        return arith.select(keep_x, x, y)

    return build


def _splat_attr(t: ir.Type) -> ir.Attribute:
    """The top bit alone, in ``t`` (an integer or a vector of them)."""
    vector_type = isinstance(t, ir.VectorType)
    element = ir.VectorType(t).element_type if vector_type else t
    top = ir.IntegerAttr.get(element, -(1 << (ir.IntegerType(element).width - 1)))
    return ir.DenseElementsAttr.get_splat(t, top) if vector_type else top


# op -> kind -> arith builder; a missing kind is rejected by the op's type rule.
_BINARY = {
    "add": {"f": arith.addf, "s": arith.addi, "u": arith.addi},
    "sub": {"f": arith.subf, "s": arith.subi, "u": arith.subi},
    "mul": {"f": arith.mulf, "s": arith.muli, "u": arith.muli},
    "div": {"f": arith.divf, "s": arith.divsi, "u": arith.divui},
    "rem": {"f": arith.remf, "s": arith.remsi, "u": arith.remui},
    "max": {"f": arith.maximumf, "s": arith.maxsi, "u": _unsigned("sgt"), "b": arith.ori},
    "min": {"f": arith.minimumf, "s": arith.minsi, "u": _unsigned("slt"), "b": arith.andi},
    "and": {"s": arith.andi, "u": arith.andi, "b": arith.andi},
    "or": {"s": arith.ori, "u": arith.ori, "b": arith.ori},
    "xor": {"s": arith.xori, "u": arith.xori, "b": arith.xori},
    "pow": {"f": math.powf},  # integer pow: refused (``binary``)
}
# ``ne`` is ``one``, as upstream emits it: Mosaic refuses ``une`` ("Unsupported comparison
# direction"), and compiles ``one`` to the chip's not-equal, for which NaN != NaN is True, as
# numpy's and minipallas's ``ne`` (measured on a v5e: [nan,1,-0.,inf] != [nan,1,0.,nan] gives
# [1,0,0,1]). So ``x != x`` finds NaNs, and a float is True as a bool when it is not 0.
_CMPF = {"eq": "OEQ", "ne": "ONE", "lt": "OLT", "le": "OLE", "gt": "OGT", "ge": "OGE"}
_CMPI = {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge"}
_FLOAT_UNARY = {
    "exp": math.exp,
    "log": math.log,
    "tanh": math.tanh,
    "sqrt": math.sqrt,
    "rsqrt": math.rsqrt,
    "sin": math.sin,
    "cos": math.cos,
    "floor": math.floor,
    "ceil": math.ceil,
    "round": math.round,  # half away from zero
    "round_even": math.roundeven,
    "exp2": math.exp2,
    "log1p": math.log1p,
    "erf": math.erf,
    "tan": math.tan,
}
_SHIFTS = {
    "shift_left": arith.shli,
    "shift_right_logical": arith.shrui,
    "shift_right_arithmetic": arith.shrsi,
}
# op -> why Mosaic has no lowering for it
_NO_MOSAIC_RULE = {
    **{n: "upstream Pallas has no Mosaic rule for it" for n in ("expm1", "asin", "atan")},
    **{n: "upstream Pallas has no Mosaic rule for it" for n in ("sinh", "cosh", "asinh", "cbrt")},
}


def _type(op: Op, i: int = 0) -> ArrayType:
    return op.operands[i].type


@rule(*_BINARY)
@widened
def binary(ctx: LoweringContext, op: Op, x: ir.Value, y: ir.Value) -> Sequence[ir.Value]:
    kind = _kind(_type(op).dtype)
    if kind not in _BINARY[op.name]:
        raise unsupported(
            op,
            "pow of integers has no Mosaic TPU lowering (Mosaic does not legalize math.ipowi; "
            "upstream's rule emits powf, which takes floats only)",
            fix="raise to a constant power (x ** 3 multiplies), or compute in float32",
        )
    return [_BINARY[op.name][kind](x, y)]


@rule(*_CMPF)
@widened
def compare(ctx: LoweringContext, op: Op, x: ir.Value, y: ir.Value) -> Sequence[ir.Value]:
    kind = _kind(_type(op).dtype)
    if kind == "f":
        return [arith.cmpf(getattr(arith.CmpFPredicate, _CMPF[op.name]), x, y)]
    prefix = "" if op.name in ("eq", "ne") else ("s" if kind == "s" else "u")
    return [arith.cmpi(getattr(arith.CmpIPredicate, prefix + _CMPI[op.name]), x, y)]


@rule(*_FLOAT_UNARY)
def float_unary(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    return [_FLOAT_UNARY[op.name](x)]


@rule("atan2")
def atan2(ctx: LoweringContext, op: Op, y: ir.Value, x: ir.Value) -> Sequence[ir.Value]:
    return [math.atan2(y, x)]


@rule(*_SHIFTS)
@widened
def shift(ctx: LoweringContext, op: Op, x: ir.Value, amount: ir.Value) -> Sequence[ir.Value]:
    return [_SHIFTS[op.name](x, amount)]


@rule("clz")
def clz(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    return [math.ctlz(x)]


@rule("population_count")
@widened
def population_count(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    if not _type(op).shape:
        raise unsupported(
            op,
            "population_count of a scalar has no Mosaic TPU lowering (upstream rejects it too)",
            fix="broadcast the scalar to a vector, e.g. jnp.full((8, 128), x), and count that",
        )
    return [math.ctpop(x)]


@rule(*_NO_MOSAIC_RULE)
def no_mosaic_rule(ctx: LoweringContext, op: Op, *xs: ir.Value) -> Sequence[ir.Value]:
    raise unsupported(
        op,
        f"{op.name} has no Mosaic TPU lowering ({_NO_MOSAIC_RULE[op.name]})",
        fix=f"compute {op.name} outside the kernel, or from ops Mosaic lowers (exp, log, "
        "sqrt, tanh, ...) inside it",
    )


@rule("erf_inv")
def erf_inv(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    """Giles' approximation, as upstream expands it: ``w = -log1p(-x**2)``; a degree-8
    polynomial in ``w - 2.5`` (``w < 5``) or ``sqrt(w) - 3``, times ``x``; ``x * inf`` at
    ``|x| = 1``."""
    t = _type(op)
    f32 = ArrayType(t.shape, "float32")
    x = _convert(x, t.dtype, "float32", t.shape)

    def const(value: float) -> ir.Value:
        return emit.constant(value, f32)

    w = arith.negf(math.log1p(arith.mulf(x, arith.negf(x))))
    central = arith.cmpf(arith.CmpFPredicate.OLT, w, const(5.0))
    w = arith.select(central, arith.subf(w, const(2.5)), arith.subf(math.sqrt(w), const(3.0)))
    p = None
    for a, b in ERF_INV_COEFFICIENTS:
        c = arith.select(central, const(float(a)), const(float(b)))
        p = c if p is None else arith.addf(c, arith.mulf(p, w))
    at_one = arith.cmpf(arith.CmpFPredicate.OEQ, math.absf(x), const(1.0))
    y = arith.select(at_one, arith.mulf(const(np.inf), x), arith.mulf(p, x))
    return [_convert(y, "float32", t.dtype, t.shape)]


@rule("logistic")
def logistic(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    """``1 / (1 + exp(-x))``, upstream's expansion."""
    one = emit.constant(1.0, _type(op))
    return [arith.divf(one, arith.addf(one, math.exp(arith.negf(x))))]


@rule("neg")
@widened
def neg(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    t = _type(op)
    if _kind(t.dtype) == "f":
        return [arith.negf(x)]
    return [arith.subi(emit.constant(0, t), x)]


@rule("abs")
@widened
def abs_(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    if _kind(_type(op).dtype) == "f":
        return [math.absf(x)]
    if _kind(_type(op).dtype) == "u":
        return [x]
    return [math.absi(x)]


@rule("not")
@widened
def not_(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    t = _type(op)
    return [arith.xori(x, emit.constant(True if t.dtype == "bool" else -1, t))]


@rule("select")
@widened
def select(
    ctx: LoweringContext, op: Op, pred: ir.Value, on_true: ir.Value, on_false: ir.Value
) -> Sequence[ir.Value]:
    return [arith.select(pred, on_true, on_false)]


@rule("constant")
def constant(ctx: LoweringContext, op: Op) -> Sequence[ir.Value]:
    """A splat, or refused: Mosaic places any other vector constant in a scratch buffer it
    adds itself, which a Pallas kernel function cannot take ("Not implemented: function has
    scratch_operands"; a 1-D one: "large 1D constants"). Upstream refuses a kernel that
    captures an array constant."""
    literal = op.attrs["value"]
    array = to_dtype(literal.array(), literal.type.dtype)
    if literal.type.shape and array.size > 1 and not emit.is_splat(array):
        raise unsupported(
            op,
            f"a vector constant with more than one value ({literal.type}) has no Mosaic TPU "
            "lowering: Mosaic would need a scratch buffer for it ('Not implemented: function "
            "has scratch_operands')",
            fix="pass the array to the pallas_call as an input, or build it in the kernel "
            "(from broadcasted_iota and arithmetic)",
        )
    return [emit.constant(array, literal.type)]


@rule("iota")
def iota(ctx: LoweringContext, op: Op) -> Sequence[ir.Value]:
    """``tpu.iota`` (``i32``), converted to the op's dtype."""
    t: ArrayType = op.attrs["type"]
    x = emit.iota(t.shape, op.attrs["dimension"])
    return [_convert(x, "int32", t.dtype, t.shape)]


@rule("convert")
def convert(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    t = _type(op)
    return [_convert(x, t.dtype, op.attrs["dtype"], t.shape)]


def _convert(x: ir.Value, src: str, dst: str, shape: tuple[int, ...]) -> ir.Value:
    """Upstream's table of ``arith`` casts (bool goes through ``i32``, and compares with 0)."""
    if src == dst:
        return x
    out = emit.value_type(ArrayType(shape, dst))
    a, b = _kind(src), _kind(dst)
    if a == "b":
        x = arith.extui(emit.value_type(ArrayType(shape, "int32")), x)
        return _convert(x, "int32", dst, shape)
    if b == "b":
        zero = emit.constant(0, ArrayType(shape, src))
        if a == "f":
            return arith.cmpf(arith.CmpFPredicate.ONE, x, zero)
        return arith.cmpi(arith.CmpIPredicate.ne, x, zero)
    wide = dtypes.itemsize(dst) > dtypes.itemsize(src)
    narrow = dtypes.itemsize(dst) < dtypes.itemsize(src)
    if a == "f" and b == "f":
        if not wide and not narrow:  # bf16 <-> f16: exact to f32, then one rounding
            x = _convert(x, src, "float32", shape)
            return arith.truncf(out, x)
        return arith.extf(out, x) if wide else arith.truncf(out, x)
    if a != "f" and b != "f":
        if wide:
            return (arith.extui if a == "u" else arith.extsi)(out, x)
        return arith.trunci(out, x) if narrow else x
    if a == "f":
        return (arith.fptoui if b == "u" else arith.fptosi)(out, x)
    return (arith.uitofp if a == "u" else arith.sitofp)(out, x)


@rule("bitcast")
def bitcast(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    if op.result.type.ndim != op.operands[0].type.ndim:
        raise unsupported(
            op,
            f"bitcast from {op.operands[0].type.dtype} to {op.result.type.dtype} changes the "
            "element width (upstream: 'Changing bitwidths not supported.')",
            fix="use minipallas.tpu.bitcast (pltpu.bitcast), which packs along the "
            "second-minor dim instead",
        )
    return [_bitcast(x, op.result.type)]


def _bitcast(x: ir.Value, t: ArrayType) -> ir.Value:
    """``tpu.bitcast`` of a vector, ``arith.bitcast`` of a scalar."""
    out = emit.value_type(t)
    return tpu.bitcast(out, x) if t.shape else arith.bitcast(out, x)


@rule("nextafter")
def nextafter(ctx: LoweringContext, op: Op, x: ir.Value, y: ir.Value) -> Sequence[ir.Value]:
    """Upstream's expansion on the bits: ``x`` stepped by one toward ``y`` (down in magnitude
    when the signs differ or ``|x| > |y|``); from zero the smallest subnormal signed like
    ``y``; ``y`` when ``x == y`` (or both are zeros); NaN when either is NaN."""
    t = _type(op)
    if t.dtype != "float32":
        raise unsupported(
            op,
            f"nextafter of {t.dtype} has no Mosaic TPU lowering (upstream's is float32 only)",
            fix="compute nextafter outside the kernel, or step the bits: bitcast to an "
            "integer and add or subtract 1",
        )
    u = ArrayType(t.shape, "uint32")

    def const(value: int) -> ir.Value:
        return emit.constant(value, u)

    def cmp(predicate: str, a: ir.Value, b: ir.Value) -> ir.Value:
        return arith.cmpi(getattr(arith.CmpIPredicate, predicate), a, b)

    xi, yi = _bitcast(x, u), _bitcast(y, u)
    x_abs, y_abs = (arith.andi(v, const(0x7FFFFFFF)) for v in (xi, yi))
    x_sign, y_sign = (arith.andi(v, const(0x80000000)) for v in (xi, yi))
    smaller = arith.ori(cmp("ugt", x_abs, y_abs), cmp("ne", x_sign, y_sign))
    stepped = arith.addi(xi, arith.select(smaller, const(0xFFFFFFFF), const(1)))
    from_zero = arith.select(cmp("eq", y_abs, const(0)), yi, arith.ori(y_sign, const(1)))
    result = arith.select(cmp("eq", x_abs, const(0)), from_zero, stepped)
    result = arith.select(arith.cmpf(arith.CmpFPredicate.OEQ, x, y), yi, result)
    nan = arith.ori(*(arith.cmpf(arith.CmpFPredicate.ONE, v, v) for v in (x, y)))
    result = arith.select(nan, const(0x7FC00000), result)
    return [_bitcast(result, t)]


@rule("broadcast_in_dim")
def broadcast_in_dim(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    src, out = _type(op), op.result.type
    if src.shape == out.shape:
        return [x]
    if src.shape:
        placed = [1] * out.ndim
        for d, size in zip(op.attrs["dims"], src.shape, strict=True):
            placed[d] = size
        x = emit.shape_cast(x, ArrayType(placed, src.dtype))
    return [emit.broadcast(x, out)]


@rule("reshape")
def reshape(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    return [emit.shape_cast(x, op.result.type)]


@rule("transpose")
def transpose(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    perm = op.attrs["permutation"]
    if list(perm) == sorted(perm):
        return [x]
    return [tpu.transpose(emit.value_type(op.result.type), x, list(perm))]


# Mosaic has no unsigned max/min reduction (upstream: "Reductions over unsigned integers not
# implemented"): ``_reduce`` runs them signed on the values with their top bit flipped (which
# orders them as unsigned ones do) and flips the result back.
_REDUCE_KIND = {
    "reduce_sum": {"f": "ADD", "s": "ADD", "u": "ADD"},
    "reduce_max": {"f": "MAXIMUMF", "s": "MAXSI", "u": "MAXSI"},
    "reduce_min": {"f": "MINIMUMF", "s": "MINSI", "u": "MINSI"},
}


def _identity(name: str, dtype: str) -> object:
    if name == "reduce_sum":
        return 0
    if dtypes.is_float(dtype):
        return -np.inf if name == "reduce_max" else np.inf
    info = np.iinfo(dtypes.to_numpy(dtype))
    return info.min if name == "reduce_max" else info.max


@rule(*_REDUCE_KIND)
def reduce(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    t, out = _type(op), op.result.type
    axes = list(op.attrs["axes"])
    if t.dtype == "bool":  # as upstream: reduce 1.0 / 0.0 in f32, then compare with 0
        ones = emit.constant(1.0, ArrayType(t.shape, "float32"))
        zeros = emit.constant(0.0, ArrayType(t.shape, "float32"))
        as_float = arith.select(x, ones, zeros)
        y = _reduce(op.name, as_float, ArrayType(t.shape, "float32"), axes)
        zero = emit.constant(0.0, ArrayType(out.shape, "float32"))
        return [arith.cmpf(arith.CmpFPredicate.OGT, y, zero)]
    return [_reduce(op.name, x, t, axes)]


def _reduce(name: str, x: ir.Value, t: ArrayType, axes: list[int]) -> ir.Value:
    if not axes:
        return x
    out_shape = tuple(d for i, d in enumerate(t.shape) if i not in axes)
    scalar = not out_shape
    if scalar:  # Mosaic has no 0-d vectors: reduce (1, *shape) over all but the unit dim
        x = emit.shape_cast(x, ArrayType((1, *t.shape), t.dtype))
        axes, out_shape = [a + 1 for a in axes], (1,)
    kind = getattr(vector.CombiningKind, _REDUCE_KIND[name][_kind(t.dtype)])
    flip = name != "reduce_sum" and _kind(t.dtype) == "u"
    if flip:  # unsigned order as signed order of the top-bit-flipped values
        x = arith.xori(x, arith.constant(x.type, _splat_attr(x.type)))
    identity = _identity(name, dtypes.signed_twin(t.dtype) if flip else t.dtype)
    acc = emit.constant(identity, ArrayType(out_shape, t.dtype))
    y = vector.multi_reduction(kind, x, acc, axes)
    if flip:
        y = arith.xori(y, arith.constant(y.type, _splat_attr(y.type)))
    return vector.extract(y, [], [0]) if scalar else y


@rule("reciprocal")
def reciprocal(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    """``tpu.reciprocal``: the chip's approximate reciprocal with ``approx``, and ``full_range``
    as upstream passes it. Upstream takes float32 vectors only."""
    t = _type(op)
    if t.dtype != "float32" or not t.shape:
        raise unsupported(
            op,
            f"Only float32 is supported. (upstream's Mosaic lowering of pl.reciprocal; got {t})",
            fix="take the reciprocal of a float32 array (convert first)",
        )
    return [tpu.reciprocal(x, approx=op.attrs["approx"], full_range=op.attrs["full_range"])]


@rule("multiple_of")
def multiple_of(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    """``tpu.assume_multiple``: the promise Mosaic reads to prove an offset aligned."""
    return [tpu.assume_multiple(x, op.attrs["multiple"])]
