"""The elementwise ops of issue 11 item 6 in Mosaic: each op upstream's Mosaic lowering has a
rule for emits the ``math``/``arith`` op upstream's module holds (both modules checked, ours by
the Mosaic dialect verifier), ``erf_inv`` upstream's expansion; the others are rejected with a
fix, and upstream rejects them too; ``nextafter`` upstream's expansion in float32 (bf16/f16
rejected, as upstream rejects them)."""

import collections
import re

import jax
import jax.numpy as jjnp
import pytest
from jax import lax
from jax.experimental import pallas as pl
from tpu_util import kernel, mosaic_refuses, spec

from minipallas.frontend import values
from minipallas.ir.errors import MiniPallasError, PassError
from minipallas.lowering.tpu import lower_to_mosaic
from minipallas.tools.difftest.mosaic import upstream_mosaic

S = (8, 128)
FLOAT_UNARY = {
    "floor": (lax.floor, "math.floor"),
    "ceil": (lax.ceil, "math.ceil"),
    "round": (lambda x: lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO), "math.round"),
    "round_even": (lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN), "math.roundeven"),
    "exp2": (lax.exp2, "math.exp2"),
    "log1p": (lax.log1p, "math.log1p"),
    "erf": (lax.erf, "math.erf"),
    "tan": (lax.tan, "math.tan"),
}
INT_OPS = {
    "clz": (1, lax.clz, "math.ctlz"),
    "population_count": (1, lax.population_count, "math.ctpop"),
    "shift_left": (2, lax.shift_left, "arith.shli"),
    "shift_right_logical": (2, lax.shift_right_logical, "arith.shrui"),
    "shift_right_arithmetic": (2, lax.shift_right_arithmetic, "arith.shrsi"),
}
EMITTED = {
    **{k: (1, f, m, "float32") for k, (f, m) in FLOAT_UNARY.items()},
    "atan2": (2, lax.atan2, "math.atan2", "float32"),
    **{k: (n, f, m, "int32") for k, (n, f, m) in INT_OPS.items()},
}
NO_RULE = {"expm1": lax.expm1, "asin": lax.asin, "atan": lax.atan, "sinh": lax.sinh,
           "cosh": lax.cosh, "asinh": lax.asinh, "cbrt": lax.cbrt}  # fmt: skip


def ours(name: str, arity: int, dtype: str, shape=S) -> str:
    def body(x_ref, y_ref, o_ref):
        operands = [x_ref[...], y_ref[...]][:arity]
        o_ref[...] = values.emit_array(name, operands)

    k = kernel(body, (1,), [spec(shape, dtype)] * 2, [spec(shape, dtype)])
    return lower_to_mosaic(k).as_text(debug_info=False)  # verified by the Mosaic dialect verifier


def upstream(f, arity: int, dtype: str) -> str:
    def body(x_ref, y_ref, o_ref):
        o_ref[...] = f(*[x_ref[...], y_ref[...]][:arity])

    arg = jax.ShapeDtypeStruct(S, dtype)
    return str(upstream_mosaic(pl.pallas_call(body, arg), arg, arg))


@pytest.mark.parametrize("name", EMITTED)
def test_op_emits_what_upstream_emits(name):
    arity, f, mlir_op, dtype = EMITTED[name]
    mine, theirs = ours(name, arity, dtype), upstream(f, arity, dtype)
    line = f"= {mlir_op} "
    assert line in mine and line in theirs, (mine, theirs)
    # one op on the loaded operands, nothing rebuilt around it (both sides)
    assert mine.count(line) == theirs.count(line) == 1


F16 = mosaic_refuses("a v5e has no f16 vectors: 'Invalid vector type for load'")


@pytest.mark.parametrize("dtype", ["bfloat16", pytest.param("float16", marks=F16)])
def test_rounding_stays_in_the_16_bit_dtype_as_upstream(dtype):
    text = ours("floor", 1, dtype)
    elem = {"bfloat16": "bf16", "float16": "f16"}[dtype]
    (line,) = [t for t in text.splitlines() if "= math.floor " in t]
    assert line.endswith(f": vector<8x128x{elem}>"), line


@pytest.mark.parametrize("name", NO_RULE)
def test_ops_without_an_upstream_rule_are_rejected_with_a_fix(name):
    with pytest.raises(PassError, match=f"{name} has no Mosaic TPU lowering") as err:
        ours(name, 1, "float32")
    assert isinstance(err.value, MiniPallasError)
    assert "compute" in str(err.value) and "outside the kernel" in str(err.value)
    with pytest.raises(Exception, match="upstream Pallas rejects the kernel"):
        upstream(NO_RULE[name], 1, "float32")


def _ops(text: str) -> collections.Counter:
    return collections.Counter(re.findall(r"= ((?:arith|math|tpu)\.\w+) ", text))


def test_erf_inv_is_upstreams_expansion():
    """The same ops as upstream's module, but ``-x`` is ``arith.negf`` (upstream: ``0 - x``,
    which loses ``-0.0``): two negations for two of upstream's subtractions."""
    mine, theirs = _ops(ours("erf_inv", 1, "float32")), _ops(upstream(lax.erf_inv, 1, "float32"))
    assert mine.pop("arith.negf") == 2
    theirs["arith.subf"] -= 2
    mine.pop("arith.constant"), theirs.pop("arith.constant")  # upstream shares some
    assert mine == theirs, (mine, theirs)
    assert mine["arith.select"] == 11 and mine["math.log1p"] == mine["math.sqrt"] == 1


def test_bf16_erf_inv_is_computed_in_f32_and_rounded_once():
    ops = _ops(ours("erf_inv", 1, "bfloat16"))
    assert ops["arith.extf"] == 1 and ops["arith.truncf"] == 1


def test_nextafter_is_upstreams_expansion_on_the_bits():
    mine = _ops(ours("nextafter", 2, "float32"))
    theirs = _ops(upstream(lax.nextafter, 2, "float32"))
    mine.pop("arith.constant"), theirs.pop("arith.constant")  # upstream shares some
    assert mine == theirs, (mine, theirs)
    assert mine["tpu.bitcast"] == 3 and mine["arith.select"] == 5


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_16_bit_nextafter_is_rejected_as_upstream_rejects_it(dtype):
    with pytest.raises(PassError, match="float32 only") as err:
        ours("nextafter", 2, dtype)
    assert "outside the kernel" in str(err.value)
    with pytest.raises(Exception, match="only supports float32"):
        upstream(lax.nextafter, 2, dtype)


def test_population_count_of_a_scalar_is_rejected_as_upstream_rejects_it():
    with pytest.raises(PassError, match="population_count of a scalar") as err:

        def body(x_ref, o_ref):
            o_ref[0] = values.unary("population_count", x_ref[0])

        lower_to_mosaic(kernel(body, (1,), [spec((8,), "int32")], [spec((8,), "int32")]))
    assert "broadcast the scalar" in str(err.value)
    with pytest.raises(Exception, match="not supported on scalars"):

        def upstream_body(x_ref, o_ref):
            o_ref[0] = lax.population_count(x_ref[0])

        arg = jax.ShapeDtypeStruct((8,), jjnp.int32)
        upstream_mosaic(pl.pallas_call(upstream_body, arg), arg)
