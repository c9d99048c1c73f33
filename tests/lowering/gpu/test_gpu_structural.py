"""The structural ops on the Triton path, against upstream Pallas's Triton lowering.

``cumsum`` (``tt.scan``) and ``argmax`` / ``argmin`` (``tt.reduce`` over value/index pairs)
are emitted as upstream emits them, save where minipallas's meaning differs (a NaN wins an
argmax; a float cumsum gives +0.0 for -0.0), verified and compiled to PTX by Triton in every
dtype they take; the simulation (the reference interpreter over the grid) agrees with the CPU
path bit for bit. ``reverse``, ``pad``, the other cumulative ops, ``reduce_prod``, ``sort``,
``top_k`` and a reverse cumsum, which upstream rejects, are rejected with a fix.
"""

import re

import jax
import jax.numpy as jjnp
import numpy as np
import pytest
from jax import lax

import minipallas as mp
from minipallas.frontend.scopes import emit
from minipallas.frontend.values import TracedArray, constant
from minipallas.ir import dtypes
from minipallas.ir.errors import PassError
from minipallas.lowering.gpu.simulate import simulate
from minipallas.tools.difftest.triton import upstream_triton
from minipallas.tools.generate.check import same_bits

S = (8, 128)


def _op(name, x, **attrs):
    return emit(TracedArray, name, [x], attrs)[0]


def _structural_call(dtype, with_cumsum=True):
    """One kernel: argmax/argmin along both axes (and cumsum along both, unless bool)."""
    outs = [mp.ArrayType((8,), "int32"), mp.ArrayType((128,), "int32")] * 2
    if with_cumsum:
        outs += [mp.ArrayType(S, dtype)] * 2

    def kernel(x_ref, *o_refs):
        x = x_ref[...]
        results = [_op(name, x, axis=axis, dtype="int32")
                   for name in ("argmax", "argmin") for axis in (1, 0)]  # fmt: skip
        if with_cumsum:
            results += [_op("cumsum", x, axis=a, reverse=False) for a in (1, 0)]
        for o_ref, r in zip(o_refs, results, strict=True):
            o_ref[...] = r

    return mp.pallas_call(kernel, tuple(outs), name=f"structural_{dtype}")


def _sample(rng, dtype):
    """Values with ties; floats with NaNs, signed zeros, infinities and a subnormal."""
    if dtype == "bool":
        return rng.random(S) < 0.5
    if not dtypes.is_float(dtype):
        low = -3 if dtypes.is_signed(dtype) else 0
        return rng.integers(low, 4, S).astype(dtypes.to_numpy(dtype))
    x = np.round(rng.standard_normal(S) * 4) / 2  # small halves: every sum is exact
    where = rng.random(S) < 0.05
    x[where] = rng.choice([np.nan, -0.0, 0.0, np.inf, -np.inf, 1e-40], int(where.sum()))
    x[0, :5] = [-0.0, -0.0, np.nan, 1.0, np.nan]  # a cumsum of -0, a NaN winning twice
    return x.astype(np.float32).astype(dtypes.to_numpy(dtype))


DTYPES = ("float32", "bfloat16", "float16", "int32", "uint32", "int8", "bool")


@pytest.mark.parametrize("dtype", DTYPES)
def test_simulation_matches_the_cpu_path_bit_for_bit(dtype):
    """Every output agrees bit for bit (a NaN's payload aside), NaN winners included."""
    rng = np.random.default_rng(0)
    x = _sample(rng, dtype)
    call = _structural_call(dtype, with_cumsum=dtype != "bool")
    got = simulate(call.lower(x, target="gpu"), x)
    want = [np.asarray(w) for w in call(x)]
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert same_bits(g, w), k
    if dtypes.is_float(dtype):
        assert got[0][0] == 2  # the first NaN of row 0
        assert np.signbit(np.asarray(got[4][0, :2], np.float32)).tolist() == [False, False]


def test_modules_follow_upstreams_scan_and_reduce():
    """Upstream's shapes: a ``tt.scan`` adding along the axis; a ``tt.reduce`` over (f32, i32)
    pairs choosing the smaller index on a tie. minipallas adds the NaN and flush terms."""
    x = np.zeros(S, np.float32)
    ours = _structural_call("float32").lower(x, target="gpu").as_text(debug_info=False)

    def body(x_ref, a_ref, c_ref):
        a_ref[...] = jjnp.argmax(x_ref[...], axis=1).astype(jjnp.int32)
        c_ref[...] = jjnp.cumsum(x_ref[...], axis=1)

    outs = (jax.ShapeDtypeStruct((8,), jjnp.int32), jax.ShapeDtypeStruct(S, jjnp.float32))
    theirs = upstream_triton(_gpu_call(body, outs), jax.ShapeDtypeStruct(S, jjnp.float32))
    pair = re.compile(r"\^bb0\(%\w+: f32, %(\w+): i32, %\w+: f32, %(\w+): i32\):")
    for text in (ours, str(theirs)):
        assert '"tt.scan"(%' in text and "axis = 1 : i32, reverse = false" in text
        assert re.search(r"arith.addf %\w+, %\w+ : f32\n\s*tt.scan.return", text)
        (a, b) = pair.search(text).groups()
        assert f"arith.minsi %{a}, %{b} : i32" in text and "tt.reduce.return" in text
    (scan,) = re.findall(r"%(\w+) = \"tt.scan\"\(%\w+\) <\{axis = 1 ", ours)
    assert re.search(rf"arith.addf %{scan}, %\w+ : tensor<8x128xf32>", ours)  # -0.0 to +0.0
    assert "arith.maxnumf" in str(theirs)  # upstream: NaNs lose
    assert "arith.cmpf uno" in ours and "arith.maxnumf" not in ours


def _gpu_call(body, outs):
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as plgpu

    return pl.pallas_call(body, outs, compiler_params=plgpu.CompilerParams())


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_compiles_to_ptx(dtype):
    pytest.importorskip("triton")
    from minipallas.lowering.gpu.ptx import compile_ptx

    x = np.zeros(S, dtypes.to_numpy(dtype))
    compiled = compile_ptx(_structural_call(dtype, dtype != "bool").lower(x, target="gpu"))
    assert f".visible .entry structural_{dtype}(" in compiled.ptx
    assert compiled.cubin[:4] == b"\x7fELF"


UPSTREAM = {
    "reverse": (lambda x: lax.rev(x, (1,)), {"dims": (1,)}, "rev"),
    "cumprod": (lambda x: lax.cumprod(x, axis=1), {"axis": 1, "reverse": False}, "cumprod"),
    "cummax": (lambda x: lax.cummax(x, axis=1), {"axis": 1, "reverse": False}, "cummax"),
    "cummin": (lambda x: lax.cummin(x, axis=1), {"axis": 1, "reverse": False}, "cummin"),
    "sort": (lambda x: jjnp.sort(x, axis=1), {"dimension": 1, "num_keys": 1}, "sort"),
}


@pytest.mark.parametrize("name", UPSTREAM)
def test_ops_upstream_has_no_rule_for_are_rejected_with_a_fix(name):
    theirs, attrs, primitive = UPSTREAM[name]
    with pytest.raises(NotImplementedError, match=f"Triton lowering: {primitive}\\."):

        def body(x_ref, o_ref):
            o_ref[...] = theirs(x_ref[...])

        upstream_triton(
            _gpu_call(body, jax.ShapeDtypeStruct(S, jjnp.float32)),
            jax.ShapeDtypeStruct(S, jjnp.float32),
        )
    _check_rejected(name, lambda x: _op(name, x, **attrs), mp.ArrayType(S, "float32"))


def _check_rejected(name, fn, out, match="no Triton lowering"):
    def kernel(x_ref, o_ref):
        o_ref[...] = fn(x_ref[...])

    call = mp.pallas_call(kernel, out)
    with pytest.raises(PassError, match=match) as e:
        call.lower(np.zeros(S, np.float32), target="gpu")
    assert e.value.op == name and "test_gpu_structural.py" in str(e.value.loc)
    assert e.value.fix


def test_pad_reduce_prod_top_k_reverse_cumsum_and_int8_indices_are_rejected():
    f32 = lambda shape: mp.ArrayType(shape, "float32")  # noqa: E731
    pad = {"low": (1, 0), "high": (-1, 0), "interior": (0, 0)}
    zero = lambda: constant(0.0, "float32")  # noqa: E731
    _check_rejected("pad", lambda x: emit(TracedArray, "pad", [x, zero()], pad)[0], f32(S))
    _check_rejected("reduce_prod", lambda x: _op("reduce_prod", x, axes=(1,)), f32((8,)))
    _check_rejected(
        "top_k",
        lambda x: emit(TracedArray, "top_k", [x], {"k": 4})[0],
        f32((8, 4)),
    )
    _check_rejected(
        "cumsum",
        lambda x: _op("cumsum", x, axis=1, reverse=True),
        f32(S),
        match="Reverse cumsum is not supported",
    )
    _check_rejected(
        "argmax",
        lambda x: _op("argmax", x, axis=1, dtype="int8"),
        mp.ArrayType((8,), "int8"),
        match="must be i32",
    )
