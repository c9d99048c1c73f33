"""Triton rules for the pure array ops: ``arith``/``math`` elementwise, shapes, ``tt.reduce``,
``tt.dot``.

The module means what the reference interpreter means, as the StableHLO rules do:

- integer ``div`` and ``rem`` where C traps, as ``ir/opset/meanings.py`` says (the GPU would
  trap or return garbage);
- float ``max``/``min`` propagate NaN (``arith.maximumf``), ``ne`` is unordered;
- float-to-int ``convert`` rounds toward zero, saturates and maps NaN to 0;
- transcendentals and division of bfloat16/float16 are computed in float32 and rounded once
  (``logistic``: each step rounded, XLA's expansion); sums of bfloat16/float16 accumulate in
  float32;
- ``dot`` takes its input precision as upstream's Triton lowering chooses it from the op's
  ``precision``: TF32 when either operand's is "default" or "high" (so a float32 dot at
  jax's default precision multiplies TF32-rounded operands on the tensor cores, where the
  interpreter multiplies float32 exactly), ``ieee`` for float32 operands at "highest", the
  dialect's default otherwise. 16-bit float operands with a float32 result go to the tensor
  cores as they are (their products are exact in float32), and so do int8 operands, into an
  int32 accumulator truncated for an int8 result (the same bits as wrapping int8 sums).

- shifts by the bit width or more (the amount read as unsigned) shift every bit out: 0, or the
  sign's bits for ``shift_right_arithmetic`` (upstream emits a bare ``arith.shli``/``shrui``/
  ``shrsi``, which LLVM leaves undefined there).

Integer ``pow`` has no Triton op and is rejected; so are ``round``, ``round_even`` and ``erf``
(upstream's Triton lowering has no rule for them) and ``nextafter`` of bfloat16/float16
(libdevice has it in float32 only, and the float32 neighbour rounded back is not the 16-bit
one). ``erf_inv`` is upstream's expansion (Giles' float32 polynomial, the interpreter's).

Transcendentals (CUDA's libdevice, as upstream calls them) match the interpreter to a few ulps,
float sums and ``dot`` to rounding (the order of additions differs).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.core import Op
from minipallas.ir.errors import PassError
from minipallas.ir.opset.meanings import ERF_INV_COEFFICIENTS, IntegerOps, integer_div_rem
from minipallas.lowering.gpu import emit
from minipallas.lowering.gpu.context import LoweringContext, rule
from minipallas.lowering.gpu.emit import arith, ir, math, tt
from minipallas.lowering.gpu.unsupported import no_triton_rule

_FLOAT = {
    "add": arith.addf,
    "sub": arith.subf,
    "mul": arith.mulf,
    "div": arith.divf,
    "rem": arith.remf,
    "max": arith.maximumf,
    "min": arith.minimumf,
}
_INT = {
    "add": arith.addi,
    "sub": arith.subi,
    "mul": arith.muli,
    "and": arith.andi,
    "or": arith.ori,
    "xor": arith.xori,
}
_SIGNED = {"max": arith.maxsi, "min": arith.minsi}
_UNSIGNED = {"max": arith.maxui, "min": arith.minui}
# CUDA's libdevice functions, called through ``tt.extern_elementwise`` as upstream Pallas does
# (Triton links libdevice itself); ``math.exp`` & co. would lower to the fast approximations.
_LIBDEVICE = {
    "exp": "__nv_expf",
    "log": "__nv_logf",
    "tanh": "__nv_tanhf",
    "sqrt": "__nv_sqrtf",
    "rsqrt": "__nv_rsqrtf",
    "sin": "__nv_sinf",
    "cos": "__nv_cosf",
    "pow": "__nv_powf",
    "floor": "__nv_floorf",
    "ceil": "__nv_ceilf",
    "exp2": "__nv_exp2f",
    "expm1": "__nv_expm1f",
    "log1p": "__nv_log1pf",
    "tan": "__nv_tanf",
    "asin": "__nv_asinf",
    "atan": "__nv_atanf",
    "sinh": "__nv_sinhf",
    "cosh": "__nv_coshf",
    "asinh": "__nv_asinhf",
    "cbrt": "__nv_cbrtf",
    "atan2": "__nv_atan2f",
    "nextafter": "__nv_nextafterf",
    "population_count": "__nv_popc",
    "clz": "__nv_clz",
}
_SHIFTS = {
    "shift_left": arith.shli,
    "shift_right_logical": arith.shrui,
    "shift_right_arithmetic": arith.shrsi,
}
_P = arith.CmpIPredicate
_F = arith.CmpFPredicate
_CMP_FLOAT = {"eq": _F.OEQ, "ne": _F.UNE, "lt": _F.OLT, "le": _F.OLE, "gt": _F.OGT, "ge": _F.OGE}
_CMP_SIGNED = {"eq": _P.eq, "ne": _P.ne, "lt": _P.slt, "le": _P.sle, "gt": _P.sgt, "ge": _P.sge}
_CMP_UNSIGNED = {"eq": _P.eq, "ne": _P.ne, "lt": _P.ult, "le": _P.ule, "gt": _P.ugt, "ge": _P.uge}


def _dtype(op: Op, i: int = 0) -> str:
    return op.operands[i].type.dtype


def _int_kind(name: str, dtype: str) -> Callable[..., ir.Value]:
    if name in ("max", "min"):
        if dtype == "bool":
            return arith.ori if name == "max" else arith.andi
        return (_SIGNED if dtypes.is_signed(dtype) else _UNSIGNED)[name]
    return _INT[name]


@rule("add", "sub", "mul", "max", "min", "and", "or", "xor")
def binary(ctx: LoweringContext, op: Op, x: ir.Value, y: ir.Value) -> Sequence[ir.Value]:
    dtype = _dtype(op)
    if dtypes.is_float(dtype):
        return [_FLOAT[op.name](x, y)]
    return [_int_kind(op.name, dtype)(x, y)]


@rule("pow")
def pow_(ctx: LoweringContext, op: Op, x: ir.Value, y: ir.Value) -> Sequence[ir.Value]:
    dtype = _dtype(op)
    if not dtypes.is_float(dtype):
        raise PassError(
            "on integers has no Triton op",
            op=op.name,
            loc=op.loc,
            fix="compute the power with multiplications in a loop, or in floating point",
        )
    return [_in_float32(_libdevice("pow"), dtype, x, y)]


@rule("div", "rem")
def div_rem(ctx: LoweringContext, op: Op, x: ir.Value, y: ir.Value) -> Sequence[ir.Value]:
    """Floats divide as IEEE says; integers get a defined result where C would trap."""
    dtype = _dtype(op)
    if op.name == "div" and dtypes.is_float(dtype):
        return [_divf(x, y, dtype)]
    if dtypes.is_float(dtype):
        return [_FLOAT[op.name](x, y)]
    signed = dtypes.is_signed(dtype)
    if op.name == "div":
        kind = arith.divsi if signed else arith.divui
    else:
        kind = arith.remsi if signed else arith.remui
    if emit.known_int(y) not in (None, 0, -1):  # a constant divisor cannot trap
        return [kind(x, y)]
    ints = IntegerOps(
        constant=lambda value, like: emit.like(value, like, dtype),
        eq=lambda a, b: _compare("eq", dtype, a, b),
        both=arith.andi,
        either=arith.ori,
        select=arith.select,
    )  # Triton's operations for integer division's meaning (ir/opset/meanings.py)
    return [integer_div_rem(op.name, dtypes.to_numpy(dtype), x, y, ints, kind)]


def _divf(x: ir.Value, y: ir.Value, dtype: str) -> ir.Value:
    """Float division; bfloat16/float16 in float32, rounded once (Triton cannot lower a 16-bit
    ``divf``; float32 has more than twice their precision, so the result is the correctly
    rounded 16-bit quotient)."""
    return _in_float32(arith.divf, dtype, x, y)


def _compare(name: str, dtype: str, x: ir.Value, y: ir.Value) -> ir.Value:
    if dtypes.is_float(dtype):
        return arith.cmpf(_CMP_FLOAT[name], x, y)
    table = _CMP_SIGNED if dtypes.is_signed(dtype) else _CMP_UNSIGNED
    return arith.cmpi(table[name], x, y)


@rule("eq", "ne", "lt", "le", "gt", "ge")
def compare(ctx: LoweringContext, op: Op, x: ir.Value, y: ir.Value) -> Sequence[ir.Value]:
    return [_compare(op.name, _dtype(op), x, y)]


@rule("neg")
def neg(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    if dtypes.is_float(_dtype(op)):
        return [arith.negf(x)]
    return [arith.subi(emit.like(0, x, _dtype(op)), x)]


@rule("not")
def not_(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    ones = True if _dtype(op) == "bool" else -1
    return [arith.xori(x, emit.like(ones, x, _dtype(op)))]


@rule("abs")
def abs_(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    dtype = _dtype(op)
    if dtypes.is_float(dtype):
        return [math.absf(x)]
    if dtypes.is_unsigned(dtype):
        return [x]
    return [math.absi(x)]


@rule("exp", "log", "tanh", "sqrt", "rsqrt", "sin", "cos", "floor", "ceil", "exp2")
@rule("expm1", "log1p", "tan", "asin", "atan", "sinh", "cosh", "asinh", "cbrt", "atan2")
def transcendental(ctx: LoweringContext, op: Op, *xs: ir.Value) -> Sequence[ir.Value]:
    return [_in_float32(_libdevice(op.name), _dtype(op), *xs)]


@rule("nextafter")
def nextafter(ctx: LoweringContext, op: Op, x: ir.Value, y: ir.Value) -> Sequence[ir.Value]:
    if _dtype(op) != "float32":
        raise PassError(
            f"of {_dtype(op)} has no Triton lowering (libdevice's nextafter is float32 only, "
            "as upstream's rule is)",
            op=op.name,
            loc=op.loc,
            fix="compute nextafter in float32 outside the kernel, or step the 16-bit pattern "
            "with bitcast and integer add",
        )
    return [_libdevice(op.name)(x, y)]


@rule("population_count", "clz")
def bit_count(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    """libdevice's 32-bit count, as upstream calls it; narrower integers zero-extended to 32
    bits for it (Triton cannot legalize ``math.ctpop``/``ctlz``, upstream's fallback), ``clz``
    less the 32 - width leading zeros the extension adds."""
    dtype = _dtype(op)
    bits = 8 * dtypes.itemsize(dtype)
    if bits == 32:
        return [_libdevice(op.name)(x)]
    wide = arith.extui(emit.shaped(emit.element_type("int32"), emit.shape_of(x)), x)
    count = _libdevice(op.name)(wide)
    if op.name == "clz":
        count = arith.subi(count, emit.like(32 - bits, count, "int32"))
    return [arith.trunci(x.type, count)]


@rule(*_SHIFTS)
def shift(ctx: LoweringContext, op: Op, x: ir.Value, amount: ir.Value) -> Sequence[ir.Value]:
    """The shift, with amounts of the bit width or more (unsigned) giving every bit out."""
    dtype = _dtype(op)
    bits = 8 * dtypes.itemsize(dtype)
    if (known := emit.known_int(amount)) is not None and 0 <= known < bits:
        return [_SHIFTS[op.name](x, amount)]
    out = arith.cmpi(_P.uge, amount, emit.like(bits, amount, dtype))
    if op.name == "shift_right_arithmetic":  # every bit out is every bit the sign
        shifted = arith.shrsi(x, arith.select(out, emit.like(bits - 1, amount, dtype), amount))
        return [shifted]
    safe = _SHIFTS[op.name](x, arith.select(out, emit.like(0, amount, dtype), amount))
    return [arith.select(out, emit.like(0, x, dtype), safe)]


@rule("round", "round_even", "erf", "reciprocal")
def no_rule(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    fix = f"compute {op.name} outside the kernel, or from floor/ceil/exp/... inside it"
    if op.name == "reciprocal":
        fix = "divide: 1.0 / x"
    raise no_triton_rule(op, fix=fix)


@rule("multiple_of")
def multiple_of(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    """The value itself, its defining op marked ``tt.divisibility`` as upstream marks it."""
    owner = x.owner
    if isinstance(owner, ir.OpView):
        values = np.asarray([op.attrs["multiple"]], dtype=np.int32)
        owner.attributes["tt.divisibility"] = ir.DenseIntElementsAttr.get(values)
    return [x]


@rule("erf_inv")
def erf_inv(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    """Giles' approximation, as upstream expands it: ``w = -log1p(-x**2)``; a degree-8
    polynomial in ``w - 2.5`` (``w < 5``) or ``sqrt(w) - 3``, times ``x``; ``x * inf`` at
    ``|x| = 1``. bfloat16/float16 in float32, rounded once (as chlo; upstream rejects them)."""

    def giles(x: ir.Value) -> ir.Value:
        def const(value: float) -> ir.Value:
            return emit.like(value, x, "float32")

        w = arith.negf(_libdevice("log1p")(arith.mulf(x, arith.negf(x))))
        central = arith.cmpf(_F.OLT, w, const(5.0))
        root = _libdevice("sqrt")(w)
        w = arith.select(central, arith.subf(w, const(2.5)), arith.subf(root, const(3.0)))
        p = None
        for a, b in ERF_INV_COEFFICIENTS:
            c = arith.select(central, const(float(a)), const(float(b)))
            p = c if p is None else arith.addf(c, arith.mulf(p, w))
        at_one = arith.cmpf(_F.OEQ, math.absf(x), const(1.0))
        return arith.select(at_one, arith.mulf(const(np.inf), x), arith.mulf(p, x))

    return [_in_float32(giles, _dtype(op), x)]


def _libdevice(name: str) -> Callable[..., ir.Value]:
    """A float32 function of libdevice, applied elementwise."""

    def call(*xs: ir.Value) -> ir.Value:
        symbol = _LIBDEVICE[name]
        return tt.extern_elementwise(xs[0].type, list(xs), "", "", symbol, True)

    return call


def _in_float32(kind: Callable[..., ir.Value], dtype: str, *xs: ir.Value) -> ir.Value:
    """bfloat16/float16 computed in float32 and rounded once."""
    if dtype == "float32":
        return kind(*xs)
    wide = kind(*(_convert(x, dtype, "float32") for x in xs))
    return _convert(wide, "float32", dtype)


@rule("logistic")
def logistic(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    """``1 / (1 + exp(-x))``, each step rounded to the dtype."""
    dtype = _dtype(op)
    one = emit.like(1, x, dtype)
    e = _in_float32(_libdevice("exp"), dtype, arith.negf(x))
    return [_divf(one, arith.addf(one, e), dtype)]


@rule("select")
def select(ctx: LoweringContext, op: Op, p: ir.Value, x: ir.Value, y: ir.Value) -> Sequence:
    return [arith.select(p, x, y)]


@rule("constant")
def constant(ctx: LoweringContext, op: Op) -> Sequence[ir.Value]:
    literal = op.attrs["value"]
    t = literal.type
    array = literal.array()
    if literal.is_splat():
        return [emit.constant(array.reshape(-1)[0] if array.size else 0, t.dtype, t.shape)]
    return [emit.dense(array, t.dtype)]


@rule("iota")
def iota(ctx: LoweringContext, op: Op) -> Sequence[ir.Value]:
    t = op.attrs["type"]
    dim = op.attrs["dimension"]
    steps = tt.make_range(emit.shaped(emit.element_type("int32"), [t.shape[dim]]), 0, t.shape[dim])
    steps = emit.broadcast_to(emit.expand(steps, t.ndim, [dim]), t.shape)
    return [_convert(steps, "int32", t.dtype)]


@rule("convert")
def convert(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    return [_convert(x, _dtype(op), op.result.type.dtype)]


def _convert(x: ir.Value, source: str, target: str) -> ir.Value:
    same_width = dtypes.itemsize(source) == dtypes.itemsize(target)
    if source == target or (dtypes.is_int(source) and dtypes.is_int(target) and same_width):
        return x  # signless: int32 and uint32 are one type
    to = emit.shaped(emit.element_type(target), emit.shape_of(x))
    if target == "bool":
        zero = emit.like(0, x, source)
        return _compare("ne", source, x, zero)
    if source == "bool":
        return arith.uitofp(to, x) if dtypes.is_float(target) else arith.extui(to, x)
    if dtypes.is_float(source) and dtypes.is_float(target):
        wider = dtypes.itemsize(target) > dtypes.itemsize(source)
        if dtypes.itemsize(target) == dtypes.itemsize(source):  # bf16 <-> f16, via f32
            return _convert(_convert(x, source, "float32"), "float32", target)
        return arith.extf(to, x) if wider else arith.truncf(to, x)
    if dtypes.is_float(target):
        return arith.sitofp(to, x) if dtypes.is_signed(source) else arith.uitofp(to, x)
    if dtypes.is_float(source):
        return _float_to_int(x, source, target, to)
    wide, narrow = dtypes.itemsize(target), dtypes.itemsize(source)
    if wide < narrow:
        return arith.trunci(to, x)
    return arith.extsi(to, x) if dtypes.is_signed(source) else arith.extui(to, x)


def _float_to_int(x: ir.Value, source: str, target: str, to: ir.Type) -> ir.Value:
    """Round toward zero, saturate, NaN to 0: clamp in the float type, then convert (the
    clamp's ends are the floats nearest the integer range from inside it)."""
    info = np.iinfo(dtypes.to_numpy(target))
    low, high = dtypes.saturation_ends(source, target)
    x = arith.select(_compare("ne", source, x, x), emit.like(0, x, source), x)
    clamped = arith.minimumf(
        arith.maximumf(x, emit.like(low, x, source)), emit.like(high, x, source)
    )
    signed = dtypes.is_signed(target)
    result = arith.fptosi(to, clamped) if signed else arith.fptoui(to, clamped)
    for limit, end, name in ((info.max, high, "gt"), (info.min, low, "lt")):
        if int(end) != limit:
            beyond = _compare(name, source, x, emit.like(end, x, source))
            result = arith.select(beyond, emit.like(limit, result, target), result)
    return result


@rule("bitcast")
def bitcast(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    """``tt.bitcast``, as upstream emits it (Triton does not legalize a tensor
    ``arith.bitcast``)."""
    if op.result.type.ndim != op.operands[0].type.ndim:
        raise PassError(
            f"bitcast from {op.operands[0].type.dtype} to {op.result.type.dtype} changes the "
            "element width, which tt.bitcast cannot",
            op=op.name,
            loc=op.loc,
            fix="bitcast outside the kernel, or between dtypes of one width",
        )
    target = emit.value_type(op.result.type)
    return [x if target == x.type else tt.bitcast(target, x)]


@rule("broadcast_in_dim")
def broadcast_in_dim(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    shape, dims = op.attrs["shape"], list(op.attrs["dims"])
    if not emit.is_tensor(x):
        return [emit.splat(x, shape)]
    if dims != sorted(dims):
        order = sorted(range(len(dims)), key=lambda i: dims[i])
        x = tt.trans(x, order)
        dims = sorted(dims)
    return [emit.broadcast_to(emit.expand(x, len(shape), dims), shape)]


@rule("reshape")
def reshape(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    return [emit.reshape(x, op.attrs["shape"])]


@rule("transpose")
def transpose(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    perm = list(op.attrs["permutation"])
    return [x if perm == sorted(perm) else tt.trans(x, perm)]


# --- reductions and dot ------------------------------------------------------------------------


def _combine(name: str, dtype: str) -> Callable[..., ir.Value]:
    if name == "reduce_sum":
        return arith.addf if dtypes.is_float(dtype) else arith.addi
    kind = "max" if name == "reduce_max" else "min"
    return _FLOAT[kind] if dtypes.is_float(dtype) else _int_kind(kind, dtype)


@rule("reduce_sum", "reduce_max", "reduce_min")
def reduce(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    """One ``tt.reduce`` per axis, innermost first; 16-bit float sums accumulate in float32."""
    dtype = _dtype(op)
    work = "float32" if op.name == "reduce_sum" and dtype in ("bfloat16", "float16") else dtype
    x = _convert(x, dtype, work)
    combine = _combine(op.name, work)
    for axis in sorted(op.attrs["axes"], reverse=True):
        reduce_op = tt.ReduceOp([x], axis)
        element = emit.element_type(work)
        body = reduce_op.regions[0].blocks.append(element, element)
        with ir.InsertionPoint(body):
            tt.reduce_return([combine(*body.arguments)])
        x = reduce_op.results[0]
    return [_convert(x, work, dtype)]


_ACCUMULATOR = {"bfloat16": "float32", "float16": "float32"}
_ACCUMULATOR.update({d: "int32" for d in dtypes.NAMES if dtypes.is_int(d)})
# operand dtypes the tensor cores multiply as they are into the accumulator, exactly
_EXACT_PRODUCTS = {("bfloat16", "float32"), ("float16", "float32"), ("int8", "int32")}


def _input_precision(op: Op, source: str) -> object:
    """Upstream's choice (``_dot_general_lowering`` of Pallas Triton): TF32 when an operand's
    precision is "default" or "high", IEEE for float32 operands otherwise, else Triton's own."""
    if set(op.attrs.get("precision", ("default", "default"))) & {"default", "high"}:
        return tt.InputPrecision.TF32
    return tt.InputPrecision.IEEE if source == "float32" else None


@rule("dot")
def dot(ctx: LoweringContext, op: Op, a: ir.Value, b: ir.Value) -> Sequence[ir.Value]:
    """``tt.dot`` into a zero accumulator of the result type (float32 for 16-bit float
    results, int32 for narrower integer ones: the tensor cores have no int8 accumulator, and
    wrapping int32 sums truncated to the result width are its wrapping sums)."""
    if op.result.type.ndim != 2:
        raise PassError(
            "a batched dot has no Triton lowering here",
            op=op.name,
            loc=op.loc,
            fix="loop over the batch dimension",
        )
    source, target = _dtype(op), op.result.type.dtype
    acc_dtype = _ACCUMULATOR.get(target, target)
    exact = (source, acc_dtype) in _EXACT_PRODUCTS
    if not exact and source != acc_dtype:
        a, b = _convert(a, source, acc_dtype), _convert(b, source, acc_dtype)
    zero = emit.constant(0, acc_dtype, op.result.type.shape)
    out = tt.dot(a, b, zero, input_precision=_input_precision(op, source))
    return [_convert(out, acc_dtype, target)]
