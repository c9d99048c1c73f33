"""StableHLO rules for the pure array ops: constants, elementwise math, shapes, reductions, dot.

Most ops map one to one. Where StableHLO leaves a result implementation-defined, the rule
spells out the reference interpreter's choice with selects, so the module means the same on
every backend:

- integer ``div`` and ``rem`` where C traps, and integer ``pow``, as ``ir/opset/meanings.py``
  says (XLA's);
- ``convert`` from a float to an integer rounds toward zero, saturates at the integer's range,
  and maps NaN to 0;
- transcendental functions of bfloat16/float16 are computed in float32 and rounded once,
  except ``logistic``, whose steps each round to the dtype (XLA's expansion).

Transcendentals match the interpreter (numpy) within a few ulps, not bit for bit; float sums
and ``dot`` match it to rounding (the order of additions differs). XLA:CPU flushes float32 and
bfloat16 subnormals to zero in arithmetic (FTZ/DAZ); the interpreter models that.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.core import Op
from minipallas.ir.opset.meanings import IntegerOps, PowerOps, integer_div_rem, integer_pow
from minipallas.lowering.compat.jaxlib_shim import chlo, ir, stablehlo
from minipallas.lowering.stablehlo import emit
from minipallas.lowering.stablehlo.context import LoweringContext, rule

_BINARY = {
    "add": stablehlo.AddOp,
    "sub": stablehlo.SubtractOp,
    "mul": stablehlo.MulOp,
    "max": stablehlo.MaxOp,
    "min": stablehlo.MinOp,
    "and": stablehlo.AndOp,
    "or": stablehlo.OrOp,
    "xor": stablehlo.XorOp,
}
_UNARY = {"neg": stablehlo.NegOp, "not": stablehlo.NotOp}
# Emitted as upstream emits them, on the operand's own dtype: XLA:CPU then computes each (or
# chlo's formula for it) as the interpreter does, and compile agrees with upstream bit for bit.
_AS_UPSTREAM = {
    "floor": stablehlo.FloorOp,
    "ceil": stablehlo.CeilOp,
    "round": stablehlo.RoundOp,
    "round_even": stablehlo.RoundNearestEvenOp,
    "expm1": stablehlo.Expm1Op,
    "log1p": stablehlo.Log1pOp,
    "tan": stablehlo.TanOp,
    "cbrt": stablehlo.CbrtOp,
    "population_count": stablehlo.PopulationCountOp,
    "clz": stablehlo.ClzOp,
    "erf": chlo.ErfOp,
    "erf_inv": chlo.ErfInvOp,
    "asin": chlo.AsinOp,
    "atan": chlo.AtanOp,
    "sinh": chlo.SinhOp,
    "cosh": chlo.CoshOp,
    "asinh": chlo.AsinhOp,
}
_BINARY_AS_UPSTREAM = {
    "atan2": stablehlo.Atan2Op,
    "nextafter": chlo.NextAfterOp,
    "shift_left": stablehlo.ShiftLeftOp,
    "shift_right_logical": stablehlo.ShiftRightLogicalOp,
    "shift_right_arithmetic": stablehlo.ShiftRightArithmeticOp,
}
_TRANSCENDENTAL = {
    "exp": stablehlo.ExpOp,
    "log": stablehlo.LogOp,
    "tanh": stablehlo.TanhOp,
    "sqrt": stablehlo.SqrtOp,
    "rsqrt": stablehlo.RsqrtOp,
    "sin": stablehlo.SineOp,
    "cos": stablehlo.CosineOp,
}
_COMPARE = {"eq": "EQ", "ne": "NE", "lt": "LT", "le": "LE", "gt": "GT", "ge": "GE"}


def _dtype(op: Op, i: int = 0) -> str:
    return op.operands[i].type.dtype


@rule(*_BINARY)
def binary(ctx: LoweringContext, op: Op, x: ir.Value, y: ir.Value) -> Sequence[ir.Value]:
    return [_BINARY[op.name](x, y).result]


@rule("pow")
def pow_(ctx: LoweringContext, op: Op, x: ir.Value, y: ir.Value) -> Sequence[ir.Value]:
    """Integer ``pow`` as ``ir/opset/meanings.py`` says: ``stablehlo.power`` (XLA's steps)
    where the exponent is not negative; it would give -1 to a negative odd power of -1."""
    dtype = _dtype(op)
    power = stablehlo.PowOp(x, y).result
    if dtypes.is_float(dtype):
        return [power]
    limit, past = 0, "LT"
    if dtypes.is_unsigned(dtype):  # bits read as signed: past the signed maximum is negative
        limit, past = np.iinfo(dtypes.to_numpy(dtypes.signed_twin(dtype))).max, "GT"
    ops = PowerOps(
        _INTEGERS.constant,
        _INTEGERS.eq,
        _INTEGERS.select,
        negative=lambda e: emit.compare(e, emit.like(limit, e), past),
    )
    return [integer_pow(x, y, ops, lambda a, b: power)]


@rule(*_AS_UPSTREAM)
def as_upstream(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    return [_AS_UPSTREAM[op.name](x).result]


@rule(*_BINARY_AS_UPSTREAM)
def binary_as_upstream(
    ctx: LoweringContext, op: Op, x: ir.Value, y: ir.Value
) -> Sequence[ir.Value]:
    return [_BINARY_AS_UPSTREAM[op.name](x, y).result]


@rule("exp2")
def exp2(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    """``exp(ln2 * x)``, upstream's lowering (the product rounded to the dtype)."""
    ln2 = emit.like(float(np.log(2)), x)
    return [stablehlo.ExpOp(stablehlo.MulOp(ln2, x).result).result]


@rule(*_UNARY)
def unary(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    return [_UNARY[op.name](x).result]


@rule(*_TRANSCENDENTAL)
def transcendental(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    """bfloat16 is emitted as is, as jax emits it: XLA:CPU computes it in float32 and rounds
    once anyway, while an explicit ``convert`` of the operand would let XLA skip rounding an
    arithmetic result to bfloat16 (excess precision), unlike the interpreter and upstream."""
    if _dtype(op) == "bfloat16":
        return [_TRANSCENDENTAL[op.name](x).result]
    return [_in_float32(_TRANSCENDENTAL[op.name], x, _dtype(op))]


def _in_float32(kind: type, x: ir.Value, dtype: str) -> ir.Value:
    """bfloat16/float16 computed in float32 and rounded once, whatever the backend does."""
    if dtype in ("bfloat16", "float16"):
        return emit.convert(kind(emit.convert(x, "float32")).result, dtype)
    return kind(x).result


@rule("logistic")
def logistic(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    """``1 / (1 + exp(-x))``, each step rounded to the dtype, as the interpreter defines it.

    Spelled out rather than ``stablehlo.logistic``, whose rounding XLA:CPU picks per dtype
    (bfloat16 once in float32, float16 step by step)."""
    one = emit.like(1, x)
    e = _in_float32(stablehlo.ExpOp, stablehlo.NegOp(x).result, _dtype(op))
    return [stablehlo.DivOp(one, stablehlo.AddOp(one, e).result).result]


@rule("abs")
def abs_(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    if dtypes.is_unsigned(_dtype(op)):
        return [x]  # every unsigned value is its own magnitude; stablehlo.abs rejects ui32
    return [stablehlo.AbsOp(x).result]


@rule(*_COMPARE)
def compare(ctx: LoweringContext, op: Op, x: ir.Value, y: ir.Value) -> Sequence[ir.Value]:
    return [emit.compare(x, y, _COMPARE[op.name])]


@rule("div", "rem")
def div_rem(ctx: LoweringContext, op: Op, x: ir.Value, y: ir.Value) -> Sequence[ir.Value]:
    """Floats divide as IEEE says; integers get a defined result for the two C traps."""
    dtype = _dtype(op)
    kind = stablehlo.DivOp if op.name == "div" else stablehlo.RemOp
    if dtypes.is_float(dtype):
        return [kind(x, y).result]
    np_dtype = dtypes.to_numpy(dtype)
    return [integer_div_rem(op.name, np_dtype, x, y, _INTEGERS, lambda a, b: kind(a, b).result)]


# StableHLO's operations for integer division's meaning (ir/opset/meanings.py)
_INTEGERS = IntegerOps(
    constant=emit.like,
    eq=lambda x, y: emit.compare(x, y, "EQ"),
    both=lambda x, y: stablehlo.AndOp(x, y).result,
    either=lambda x, y: stablehlo.OrOp(x, y).result,
    select=emit.select,
)


@rule("select")
def select(
    ctx: LoweringContext, op: Op, pred: ir.Value, x: ir.Value, y: ir.Value
) -> Sequence[ir.Value]:
    return [emit.select(pred, x, y)]


@rule("constant")
def constant(ctx: LoweringContext, op: Op) -> Sequence[ir.Value]:
    literal = op.attrs["value"]
    return [emit.constant(literal.array(), literal.type.dtype, literal.type.shape)]


@rule("iota")
def iota(ctx: LoweringContext, op: Op) -> Sequence[ir.Value]:
    t = op.attrs["type"]
    return [stablehlo.IotaOp(emit.tensor_type(t), op.attrs["dimension"]).result]


@rule("optimization_barrier")
def optimization_barrier(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    return list(stablehlo.OptimizationBarrierOp([x]).results)


@rule("multiple_of")
def multiple_of(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    """A hint XLA has no form for: upstream's lowering off Mosaic and Triton drops it too."""
    return [x]


@rule("reciprocal")
def reciprocal(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    """``1 / x``, ``approx`` with ``x`` rounded through bfloat16 first, as the interpreter."""
    dtype = _dtype(op)
    if op.attrs["approx"]:
        x = emit.convert(emit.convert(x, "bfloat16"), dtype) if dtype != "bfloat16" else x
    return [stablehlo.DivOp(emit.like(1, x), x).result]


@rule("convert")
def convert(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    return [_convert(x, _dtype(op), op.result.type.dtype)]


def _convert(x: ir.Value, source: str, target: str) -> ir.Value:
    if source == target:
        return x
    if dtypes.is_float(source) and dtypes.is_int(target):
        return _float_to_int(x, source, target)
    return emit.convert(x, target)


def _float_to_int(x: ir.Value, source: str, target: str) -> ir.Value:
    """Round toward zero, saturate, NaN to 0: clamp in the float type first, then convert.

    The clamp's ends are the floats nearest the integer range from inside it (for f32 to i32
    the top is 2147483520); values beyond an end that is not the integer limit itself map to
    that limit.
    """
    info = np.iinfo(dtypes.to_numpy(target))
    low, high = dtypes.saturation_ends(source, target)
    x = emit.select(emit.compare(x, x, "NE"), emit.like(0, x), x)
    clamped = stablehlo.ClampOp(emit.like(low, x), x, emit.like(high, x)).result
    result = emit.convert(clamped, target)
    for limit, end, direction in ((info.max, high, "GT"), (info.min, low, "LT")):
        if int(end) != limit:
            beyond = emit.compare(x, emit.like(end, x), direction)
            result = emit.select(beyond, emit.like(limit, result), result)
    return result


@rule("bitcast")
def bitcast(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    return [stablehlo.BitcastConvertOp(emit.tensor_type(op.result.type), x).result]


@rule("broadcast_in_dim")
def broadcast_in_dim(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    return [emit.broadcast(x, op.attrs["shape"], op.attrs["dims"])]


@rule("reshape")
def reshape(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    return [emit.reshape(x, op.attrs["shape"])]


@rule("transpose")
def transpose(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    return [stablehlo.TransposeOp(x, list(op.attrs["permutation"])).result]


_REDUCE = {
    "reduce_sum": stablehlo.AddOp,
    "reduce_max": stablehlo.MaxOp,
    "reduce_min": stablehlo.MinOp,
}
_REDUCE_BOOL = {"reduce_max": stablehlo.OrOp, "reduce_min": stablehlo.AndOp}


def _identity(name: str, dtype: str) -> object:
    """The reduction's starting value: what an empty axis reduces to."""
    if name == "reduce_sum":
        return 0
    if dtype == "bool":
        return name == "reduce_min"
    if dtypes.is_float(dtype):
        return -np.inf if name == "reduce_max" else np.inf
    info = np.iinfo(dtypes.to_numpy(dtype))
    return info.min if name == "reduce_max" else info.max


@rule(*_REDUCE)
def reduce(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    """``stablehlo.reduce`` with a one-op body. bfloat16/float16 sums accumulate in float32 and
    round once, as the interpreter does; float sums match it only to rounding (tree order)."""
    dtype = _dtype(op)
    combine = _REDUCE_BOOL[op.name] if dtype == "bool" else _REDUCE[op.name]
    widen = op.name == "reduce_sum" and dtype in ("bfloat16", "float16")
    work = "float32" if widen else dtype
    scalar = ir.RankedTensorType.get([], emit.element_type(work))
    result = ir.RankedTensorType.get(list(op.result.type.shape), emit.element_type(work))
    reduce_op = stablehlo.ReduceOp(
        [result],
        [emit.convert(x, work) if widen else x],
        [emit.constant(_identity(op.name, dtype), work)],
        op.attrs["axes"],
    )
    body = reduce_op.body.blocks.append(scalar, scalar)
    with ir.InsertionPoint(body):
        stablehlo.ReturnOp([combine(*body.arguments).result])
    return [emit.convert(reduce_op.result, dtype) if widen else reduce_op.result]


@rule("dot")
def dot(ctx: LoweringContext, op: Op, a: ir.Value, b: ir.Value) -> Sequence[ir.Value]:
    """A ``dot_general`` (leading dims batched) in the result dtype: the operands are first
    converted to it (as ``convert`` does), as the interpreter defines ``dot``; matches it only
    to rounding.
    bfloat16/float16 operands with a float32 result go in as they are (jax's
    ``preferred_element_type``): the products are the same, and XLA:CPU then sums them in
    the order it uses for jax's dots. Transposes feeding a bfloat16 dot are folded into its
    dimension numbers (``_folded``), so it is upstream's own ``dot_general`` again (the
    importer's transposes undone), which XLA:CPU runs as it runs upstream's, where a transpose
    feeding it would make XLA convert the operands to float32 and sum in another order
    (``ir/interpret/xla/dot_order``)."""
    source, target = _dtype(op), op.result.type.dtype
    if source != target and not (source in ("bfloat16", "float16") and target == "float32"):
        a, b = (_convert(x, source, target) for x in (a, b))
    k = op.result.type.ndim - 2
    (a, lhs), (b, rhs) = _folded(a, b, k) if source == "bfloat16" else (_plain(a), _plain(b))
    numbers = stablehlo.DotDimensionNumbers.get(lhs[:k], rhs[:k], [lhs[k + 1]], [rhs[k]])
    precision = op.attrs.get("precision")
    config = None
    if precision is not None:  # as jax writes it; XLA:CPU multiplies float32 alike at each
        config = ir.ArrayAttr.get(
            [ir.Attribute.parse(f"#stablehlo<precision {p.upper()}>") for p in precision]
        )
    result = emit.tensor_type(op.result.type)
    return [stablehlo.DotGeneralOp(result, a, b, numbers, precision_config=config).result]


Operand = tuple[ir.Value, list[int]]  # a dot operand's source and the permutation it needs


def _folded(a: ir.Value, b: ir.Value, batch: int) -> tuple[Operand, Operand]:
    """Each operand that is a ``stablehlo.transpose`` as its source and permutation, except a
    left side's transpose that keeps the batch dims leading: folded, it would contract its
    first matrix dim, which XLA:CPU converts to float32 (as it does unfolded), and next to a
    right side whose batch dims do not lead XLA (jaxlib 0.10.2) fails to run the dot, so
    then the right side stays unfolded too."""
    (lhs_source, lhs), (rhs_source, rhs) = _source(a), _source(b)
    leading = list(range(batch))
    if lhs[:batch] != leading:
        return (lhs_source, lhs), (rhs_source, rhs)
    if lhs != sorted(lhs) and rhs[:batch] != leading:
        return _plain(a), _plain(b)
    return _plain(a), (rhs_source, rhs)


def _source(x: ir.Value) -> Operand:
    owner = x.owner
    if isinstance(owner, ir.OpView) and owner.operation.name == "stablehlo.transpose":
        return owner.operands[0], list(owner.attributes["permutation"])
    return _plain(x)


def _plain(x: ir.Value) -> Operand:
    return x, list(range(ir.RankedTensorType(x.type).rank))
