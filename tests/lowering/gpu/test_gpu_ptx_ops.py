"""Every op the Triton path accepts, in every dtype it accepts, compiles to PTX (not only
verifies): one module per dtype and op family, each result written to its own output, so a
failure names the family and the dtype. Ops a dtype does not have are left out as the IR's type
rules leave them out; integer ``pow`` is the one op the Triton path rejects. Then dots, random
kernels and an upstream kernel's scan over rows."""

import random

import jax
import jax.numpy as jjnp
import numpy as np
import pytest
from gpu_util import upstream_running_rows
from jax.experimental import pallas as pl

import minipallas as mp
import minipallas.numpy as jnp
from minipallas.interop.importer.rules.kernel_call import kernel_from_jaxpr
from minipallas.ir import dtypes
from minipallas.kernels.pallas_call import lower_for_target
from minipallas.lowering.gpu.ptx import compile_ptx
from minipallas.tools.generate.choices import RandomChoices
from minipallas.tools.generate.kernels import kernel_inputs, minipallas_call, random_kernel

pytest.importorskip("triton")

FLOATS = ("float32", "bfloat16", "float16")
INTS = ("int32", "uint32", "int8", "int16", "uint16", "uint8")
DTYPES = (*FLOATS, *INTS, "bool")
S = (8, 128)

ARITH = {
    "add": lambda x, y: x + y,
    "sub": lambda x, y: x - y,
    "mul": lambda x, y: x * y,
    "div": lambda x, y: x / y if x.dtype in FLOATS else x // y,
    "rem": lambda x, y: x % y,
    "max": jnp.maximum,
    "min": jnp.minimum,
}
BITS = {"and": lambda x, y: x & y, "or": lambda x, y: x | y, "xor": lambda x, y: x ^ y}
COMPARE = {
    "eq": lambda x, y: x == y,
    "ne": lambda x, y: x != y,
    "lt": lambda x, y: x < y,
    "le": lambda x, y: x <= y,
    "gt": lambda x, y: x > y,
    "ge": lambda x, y: x >= y,
}
FLOAT_UNARY = {
    "pow": lambda x: x**x,
    "exp": jnp.exp,
    "log": jnp.log,
    "tanh": jnp.tanh,
    "sqrt": jnp.sqrt,
    "rsqrt": jnp.rsqrt,
    "sin": jnp.sin,
    "cos": jnp.cos,
    "logistic": jnp.logistic,
}
SHAPES = {
    "row_sum": lambda x: jnp.broadcast_to(jnp.sum(x, axis=1, keepdims=True), S).astype(x.dtype),
    "row_max": lambda x: jnp.broadcast_to(jnp.max(x, axis=1, keepdims=True), S),
    "col_min": lambda x: jnp.broadcast_to(jnp.min(x, axis=0, keepdims=True), S),
    "transpose": lambda x: x.reshape(8, 8, 16).transpose((1, 0, 2)).reshape(S),
}


def _families(dtype: str) -> dict[str, dict]:
    """The op families ``dtype`` has: name -> {op name: (arity, function)}."""
    binary = {**(ARITH if dtype != "bool" else {}), **(BITS if dtype not in FLOATS else {})}
    unary: dict = {"neg": lambda x: -x, "abs": jnp.abs} if dtype != "bool" else {}
    if dtype in FLOATS:
        unary.update(FLOAT_UNARY)
    else:
        unary["not"] = lambda x: ~x
    if dtype not in FLOATS and dtype != "bool":
        unary["iota"] = lambda x: x + jnp.broadcasted_iota(dtype, S, 1)
    select = {"select": (3, lambda p, x, y: jnp.where(p != p, x, y))}
    return {
        "binary": {k: (2, f) for k, f in binary.items()},
        "compare": {k: (2, f) for k, f in COMPARE.items()},
        "unary": {k: (1, f) for k, f in {**unary, **SHAPES}.items()},
        "select": select,
        "convert": {t: (1, lambda x, t=t: x.astype(t)) for t in DTYPES if t != dtype},
    }


CASES = [(d, family) for d in DTYPES for family in _families(d)]


@pytest.mark.parametrize("dtype, family", CASES, ids=[f"{d}-{f}" for d, f in CASES])
def test_op_family_compiles_to_ptx(dtype, family):
    ops = _families(dtype)[family]

    def kernel(x_ref, y_ref, *out_refs):
        x, y = x_ref[...], y_ref[...]
        for (arity, f), o_ref in zip(ops.values(), out_refs, strict=True):
            o_ref[...] = f(*[x, y, x][:arity])

    x = np.zeros(S, dtypes.to_numpy(dtype))
    out_types = tuple(mp.ArrayType(S, _result(dtype, family, k)) for k in ops)
    call = mp.pallas_call(kernel, out_types, name=f"{family}_{dtype}")
    compiled = compile_ptx(call.lower(x, x, target="gpu"))
    assert f".visible .entry {family}_{dtype}(" in compiled.ptx
    assert compiled.cubin[:4] == b"\x7fELF"


def _result(dtype: str, family: str, op: str) -> str:
    if family == "compare":
        return "bool"
    return op if family == "convert" else dtype


DOTS = [("float32", "float32"), ("bfloat16", "float32"), ("bfloat16", "bfloat16"),
        ("float16", "float32"), ("float16", "float16"), ("int32", "int32"), ("uint32", "uint32"),
        ("int8", "int32"), ("int8", "int8")]  # fmt: skip


@pytest.mark.parametrize("source, acc", DOTS, ids=[f"{s}-{a}" for s, a in DOTS])
def test_dot_compiles_to_ptx(source, acc):
    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = jnp.dot(x_ref[...], y_ref[...], preferred_element_type=acc)

    x = np.zeros((16, 32), dtypes.to_numpy(source))
    y = np.zeros((32, 16), dtypes.to_numpy(source))
    call = mp.pallas_call(kernel, mp.ArrayType((16, 16), acc))
    assert compile_ptx(call.lower(x, y, target="gpu")).cubin[:4] == b"\x7fELF"


def test_int8_dot_accumulates_in_int32_on_the_tensor_cores():
    """The int8 result is the int32 sum truncated, as wrapping int8 sums give."""

    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.int8)

    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (16, 32), dtype=np.int8)
    y = rng.integers(-128, 128, (32, 16), dtype=np.int8)
    call = mp.pallas_call(kernel, mp.ArrayType((16, 16), "int8"))
    low = call.lower(x, y, target="gpu")
    text = low.as_text(debug_info=False)
    assert "tensor<16x32xi8> * tensor<32x16xi8> -> tensor<16x16xi32>" in text
    assert "arith.trunci" in text
    assert "mma" in compile_ptx(low).ptx
    want = (x.astype(np.int32) @ y.astype(np.int32)).astype(np.int8)
    np.testing.assert_array_equal(np.asarray(call(x, y)), want)


@pytest.mark.parametrize("seeds", [range(0, 20), range(20, 40)], ids=["0-19", "20-39"])
def test_random_kernels_compile_to_ptx(seeds):
    """Random kernels (grids of 1-3 axes, partial blocks, scratch, inner loops, run_scoped,
    branches on grid indices, bf16): each verified module also compiles."""
    for seed in seeds:
        spec = random_kernel(RandomChoices(random.Random(seed)))
        low = minipallas_call(spec).lower(*kernel_inputs(spec, seed), target="gpu")
        assert compile_ptx(low).cubin[:4] == b"\x7fELF", spec


def test_upstream_scan_with_extensive_values_compiles_to_ptx():
    """Rows read and written at the loop index: the register-window gathers and selects."""

    out = jax.ShapeDtypeStruct((8, 128), jjnp.float32)
    jaxpr = jax.make_jaxpr(pl.pallas_call(upstream_running_rows, out))(out)
    low = lower_for_target(kernel_from_jaxpr(jaxpr), "gpu")
    # an imported kernel is named as upstream names it: its function's name
    ptx = compile_ptx(low).ptx
    assert "tt.gather" in low.as_text() and ".visible .entry upstream_running_rows(" in ptx
