"""The elementwise ops of issue 11 item 6 on the Triton path: float ops call the libdevice
function upstream's Triton lowering calls (checked against upstream's module for the same
``lax`` op), bfloat16/float16 in float32; bit counts call libdevice's 32-bit count (narrower
integers zero-extended for it); shifts guard amounts of the bit width or more; ``erf_inv``
is upstream's expansion. Each dtype's
ops compile to PTX together. Ops upstream's Triton lowering has no rule for are rejected with
a fix."""

import collections
import re

import jax
import numpy as np
import pytest
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

import minipallas as mp
from minipallas.frontend import values
from minipallas.ir import dtypes
from minipallas.ir.errors import MiniPallasError
from minipallas.lowering.gpu.ptx import compile_ptx
from minipallas.tools.difftest.triton import upstream_triton

pytest.importorskip("triton")

S = (8, 128)
FLOATS = ("float32", "bfloat16", "float16")
INTS = ("int32", "uint32", "int8", "int16", "uint16", "uint8")
# op -> (arity, lax function, libdevice symbol)
LIBDEVICE = {
    "floor": (1, lax.floor, "__nv_floorf"),
    "ceil": (1, lax.ceil, "__nv_ceilf"),
    "exp2": (1, lax.exp2, "__nv_exp2f"),
    "expm1": (1, lax.expm1, "__nv_expm1f"),
    "log1p": (1, lax.log1p, "__nv_log1pf"),
    "tan": (1, lax.tan, "__nv_tanf"),
    "asin": (1, lax.asin, "__nv_asinf"),
    "atan": (1, lax.atan, "__nv_atanf"),
    "sinh": (1, lax.sinh, "__nv_sinhf"),
    "cosh": (1, lax.cosh, "__nv_coshf"),
    "asinh": (1, lax.asinh, "__nv_asinhf"),
    "cbrt": (1, lax.cbrt, "__nv_cbrtf"),
    "atan2": (2, lax.atan2, "__nv_atan2f"),
    "nextafter": (2, lax.nextafter, "__nv_nextafterf"),
    "population_count": (1, lax.population_count, "__nv_popc"),
    "clz": (1, lax.clz, "__nv_clz"),
}
SHIFTS = ("shift_left", "shift_right_logical", "shift_right_arithmetic")
SHIFT_OP = dict(zip(SHIFTS, ("arith.shli", "arith.shrui", "arith.shrsi"), strict=True))


def call(ops, dtype: str, name: str = "k"):
    """A ``pallas_call`` writing each op of ``ops`` (op -> arity) on (x, y) to its own output."""

    def kernel(x_ref, y_ref, *out_refs):
        x, y = x_ref[...], y_ref[...]
        for (op, arity), o_ref in zip(ops.items(), out_refs, strict=True):
            o_ref[...] = values.emit_array(op, [x, y][:arity])

    return mp.pallas_call(kernel, tuple(mp.ArrayType(S, dtype) for _ in ops), name=name)


def ours(ops, dtype: str) -> str:
    x = np.ones(S, dtypes.to_numpy(dtype))
    return call(ops, dtype).lower(x, x, target="gpu").as_text(debug_info=False)


def upstream(f, arity: int, dtype: str) -> str:
    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = f(*[x_ref[...], y_ref[...]][:arity])

    arg = jax.ShapeDtypeStruct(S, dtype)
    return upstream_triton(
        pl.pallas_call(kernel, arg, compiler_params=plgpu.CompilerParams()), arg, arg
    )


def _float_ops(dtype: str) -> dict[str, int]:
    skip = {"population_count", "clz"} | ({"nextafter"} if dtype != "float32" else set())
    return {k: a for k, (a, _, _) in LIBDEVICE.items() if k not in skip}


@pytest.mark.parametrize("name", LIBDEVICE)
def test_op_calls_the_libdevice_function_upstream_calls(name):
    arity, f, symbol = LIBDEVICE[name]
    dtype = "int32" if name in ("population_count", "clz") else "float32"
    line = f'symbol = "{symbol}"'
    assert ours({name: arity}, dtype).count(line) == 1
    assert upstream(f, arity, dtype).count(line) == 1


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_16_bit_floats_compute_in_float32_and_round_once(dtype):
    text = ours({"floor": 1, "atan2": 2}, dtype)
    for symbol in ("__nv_floorf", "__nv_atan2f"):
        (line,) = [t for t in text.splitlines() if symbol in t]
        assert "tensor<8x128xf32>" in line and ("bf16" not in line and "f16>" not in line)
    assert text.count("arith.truncf") == 2


@pytest.mark.parametrize("dtype", ["int8", "uint16"])
def test_narrow_bit_counts_zero_extend_to_libdevices_32_bit_count(dtype):
    text = ours({"population_count": 1, "clz": 1}, dtype)
    bits = 8 * dtypes.itemsize(dtype)
    assert text.count("arith.extui") == 2 and text.count("arith.trunci") == 2
    assert '"__nv_popc"' in text and '"__nv_clz"' in text
    assert f"arith.constant {32 - bits} : i32" in text  # clz less the extension's zeros


def test_shifts_guard_amounts_of_the_bit_width_or_more():
    text = ours(dict.fromkeys(SHIFTS, 2), "int8")
    for op in SHIFT_OP.values():
        assert text.count(f"= {op} ") == 1
    # per shift: an unsigned compare of the amount with the width and a select of a safe
    # amount (7 for the arithmetic one: the sign's bits); the others then select 0
    assert text.count("arith.cmpi uge") == 3 and text.count("arith.constant 8 : i8") == 3
    assert text.count("arith.select") == 5 and text.count("arith.constant 7 : i8") == 1


def test_shift_by_a_constant_in_range_is_the_bare_shift():
    def kernel(x_ref, o_ref):
        o_ref[...] = values.emit_array(
            "shift_left", [x_ref[...], values.broadcast_to(values.constant(3, "int32"), S)]
        )

    x = np.ones(S, np.int32)
    text = mp.pallas_call(kernel, mp.ArrayType(S, "int32")).lower(x, target="gpu").as_text()
    assert "arith.shli" in text and "arith.cmpi uge" not in text and "arith.select" not in text


@pytest.mark.parametrize("dtype", [*FLOATS, *INTS])
def test_each_dtypes_new_ops_compile_to_ptx(dtype):
    if dtype in FLOATS:
        ops = {**_float_ops(dtype), "erf_inv": 1}
    else:
        ops = {"population_count": 1, "clz": 1, **dict.fromkeys(SHIFTS, 2)}
    x = np.ones(S, dtypes.to_numpy(dtype))
    compiled = compile_ptx(call(ops, dtype, name=f"new_{dtype}").lower(x, x, target="gpu"))
    assert f".visible .entry new_{dtype}(" in compiled.ptx
    assert compiled.cubin[:4] == b"\x7fELF"


REJECTED = {
    "round": (lambda x: lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO), "no Triton lowering"),
    "round_even": (lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN), "no Triton"),
    "erf": (lax.erf, "no Triton lowering"),
}


@pytest.mark.parametrize("name", REJECTED)
def test_ops_without_an_upstream_triton_rule_are_rejected_with_a_fix(name):
    f, message = REJECTED[name]
    with pytest.raises(MiniPallasError, match=message) as err:
        ours({name: 1}, "float32")
    assert "outside the kernel" in str(err.value)
    with pytest.raises(NotImplementedError, match="Unimplemented primitive"):
        upstream(f, 1, "float32")


def _ops(text: str) -> collections.Counter:
    found = re.findall(r'= ((?:arith|math)\.\w+) |symbol = "(\w+)"', text)
    return collections.Counter(op or symbol for op, symbol in found)


def test_erf_inv_is_upstreams_expansion():
    """Upstream's ops (libdevice's log1p and sqrt among them), but ``-x`` is ``arith.negf``
    (upstream: ``0 - x``) and ``|x|`` ``math.absf`` (upstream: ``__nv_fabsf``, the same)."""
    mine = _ops(ours({"erf_inv": 1}, "float32"))
    theirs = _ops(upstream(lax.erf_inv, 1, "float32"))
    assert mine.pop("arith.negf") == 2 and mine.pop("math.absf") == 1
    theirs["arith.subf"] -= 2
    assert theirs.pop("__nv_fabsf") == 1
    for counts in (mine, theirs):  # index arithmetic and shared constants differ
        for op in ("arith.constant", "arith.muli", "arith.addi"):
            counts.pop(op, None)
    assert mine == theirs, (mine, theirs)
    assert mine["arith.select"] == 11 and mine["__nv_log1pf"] == mine["__nv_sqrtf"] == 1


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_16_bit_nextafter_is_rejected_as_upstream_rejects_it(dtype):
    with pytest.raises(MiniPallasError, match="float32 only") as err:
        ours({"nextafter": 2}, dtype)
    assert "bitcast" in str(err.value)
    with pytest.raises(NotImplementedError, match="unsupported types for nextafter"):
        upstream(lax.nextafter, 2, dtype)
