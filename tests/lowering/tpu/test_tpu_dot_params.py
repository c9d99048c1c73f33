"""The parameters of upstream's dot and reciprocal reach Mosaic as upstream's lowering writes
them: each imported kernel's module is upstream's text (``compare(...).same_text``), both
compile for a v5e, and what upstream refuses minipallas refuses with upstream's message."""

import jax
import jax.numpy as jnp
import pytest
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import minipallas as mp
from minipallas.interop.importer.rules.kernel_call import kernel_from_jaxpr
from minipallas.ir.errors import MiniPallasError
from minipallas.lowering.tpu import compile_check, lower_to_mosaic
from minipallas.platforms.mesh_tpu import on_tpu
from minipallas.tools.difftest.mosaic import UpstreamError, compare, upstream_mosaic

F32 = jax.ShapeDtypeStruct((128, 128), jnp.float32)
BF16 = jax.ShapeDtypeStruct((128, 128), jnp.bfloat16)
HIGHEST, HIGH, DEFAULT = lax.Precision.HIGHEST, lax.Precision.HIGH, lax.Precision.DEFAULT


def dot_kernel(contracting, precision=None, out_dtype=jnp.float32):
    def body(x_ref, y_ref, o_ref):
        dims = (contracting, ((), ()))
        o_ref[...] = lax.dot_general(
            x_ref[...], y_ref[...], dims, precision=precision, preferred_element_type=out_dtype
        )

    return body


def approx_reciprocal(x_ref, y_ref, o_ref):
    o_ref[...] = pl.reciprocal(x_ref[...], approx=True) + pl.reciprocal(y_ref[...])


CASES = {
    "highest": (dot_kernel(((1,), (0,)), HIGHEST), (F32, F32), F32, {}),
    "highest_transposed_rhs": (dot_kernel(((1,), (1,)), HIGHEST), (F32, F32), F32, {}),
    "transposed_lhs": (dot_kernel(((0,), (0,))), (F32, F32), F32, {}),
    "transposed_both_bf16": (dot_kernel(((0,), (1,))), (BF16, BF16), F32, {}),
    "bf16_matvec": (
        dot_kernel(((1,), (1,)), out_dtype=jnp.bfloat16),
        (BF16, jax.ShapeDtypeStruct((1, 128), jnp.bfloat16)),
        jax.ShapeDtypeStruct((128, 1), jnp.bfloat16),
        {},
    ),
    "reciprocal": (approx_reciprocal, (F32, F32), F32, {}),
}


def imported(body, specs, out, params):
    call = pl.pallas_call(body, out_shape=out, **params)
    kernel = kernel_from_jaxpr(jax.make_jaxpr(call)(*specs), memory_space=mp.tpu.VMEM)
    return call, kernel


@pytest.mark.parametrize("name", CASES)
def test_the_module_is_upstreams_and_compiles(name):
    body, specs, out, params = CASES[name]
    call, kernel = imported(body, specs, out, params)
    ours = lower_to_mosaic(kernel)
    diff = compare(ours.module, upstream_mosaic(call, *specs))
    assert diff.same_text, diff
    compile_check(kernel, ours)


FUSED = {"compiler_params": pltpu.CompilerParams(fuse_transposed_lhs_in_matmul=True)}


def test_the_hint_follows_fuse_transposed_lhs_in_matmul_and_both_sides_refuse_it():
    """With the flag, a transposed left side's matmul carries ``transpose_lhs_hint``, as
    upstream's. Lowered with no TPU backend (here), jax 0.10.2 writes Mosaic's version 11,
    which cannot hold the hint, and refuses both modules alike; ``run_module`` defers the
    custom call's lowering to jax, whose own ``MLIRError`` it is."""
    body, specs, out, _ = CASES["transposed_lhs"]
    assert (
        "transpose_lhs_hint = false" in lower_to_mosaic(imported(body, specs, out, {})[1]).as_text()
    )
    call, kernel = imported(body, specs, out, FUSED)
    assert "transpose_lhs_hint = true" in lower_to_mosaic(kernel).as_text()
    refusal = "Can only downgrade below version 12 when transpose_lhs_hint is False"
    with pytest.raises(Exception, match=refusal):  # noqa: PT011 - jax's own MLIRError
        jax.jit(on_tpu(call)).trace(*specs).lower(lowering_platforms=("tpu",))
    x = jnp.ones((128, 128), jnp.float32)
    with pytest.raises(MiniPallasError, match=refusal) as ours:
        jax.jit(
            mp.pallas_call(
                body_fused_mp,
                out,
                compiler_params=mp.tpu.CompilerParams(fuse_transposed_lhs_in_matmul=True),
            )
        ).trace(x, x).lower(lowering_platforms=("tpu",))
    assert ours.value.op == "pallas_call"
    with pytest.raises(UpstreamError, match=refusal):
        upstream_mosaic(call, *specs)


def body_fused_mp(x_ref, y_ref, o_ref):
    o_ref[...] = mp.numpy.dot(x_ref[...].T, y_ref[...])


def test_a_bf16_matvec_into_f32_runs_where_upstream_fails_to_verify():
    """Upstream broadcasts the row to the float32 result's type before widening it, which
    Mosaic's verifier refuses; minipallas widens after broadcasting."""
    body = dot_kernel(((1,), (1,)))
    specs = (BF16, jax.ShapeDtypeStruct((1, 128), jnp.bfloat16))
    call, kernel = imported(body, specs, jax.ShapeDtypeStruct((128, 1), jnp.float32), {})
    with pytest.raises(UpstreamError, match="same element type"):
        upstream_mosaic(call, *specs)
    ours = lower_to_mosaic(kernel)
    assert "vector.multi_reduction" in ours.as_text()
    compile_check(kernel, ours)


@pytest.mark.parametrize(
    "precision, message",
    [
        (HIGH, "Unsupported dot precision: HIGH"),
        ((HIGHEST, DEFAULT), "Per-operand dot precision unsupported"),
    ],
)
def test_what_upstream_refuses_is_refused_with_its_message(precision, message):
    body, specs, out = dot_kernel(((1,), (0,)), precision), (F32, F32), F32
    call, kernel = imported(body, specs, out, {})
    with pytest.raises(MiniPallasError, match=message) as ours:
        lower_to_mosaic(kernel)
    assert ours.value.op == "dot" and "test_tpu_dot_params.py" in str(ours.value.loc)
    with pytest.raises(UpstreamError, match=message):
        upstream_mosaic(call, *specs)
