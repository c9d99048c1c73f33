"""Windows past Mosaic's default VMEM scope (issue 49): ``fuse-grid-steps`` may take up to
``V5E.vmem_most`` of VMEM when the kernel sets no ``vmem_limit_bytes``, and the fused kernel then
asks the custom call for what its windows take (``Kernel.vmem_limit_bytes``); a limit the user
set is the budget and is kept as it is. libtpu's ahead-of-time compile (the VMEM check the chip
would run) accepts the fused module with the limit it asks for and refuses it in 16 MiB.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import minipallas as mp
from bench.benchmarks.tpu_bench import benches
from minipallas.interop.importer.rules.kernel_call import kernel_from_eqn
from minipallas.ir.types import TPU_VMEM
from minipallas.kernels.spec.params import TpuCompilerParams
from minipallas.lowering import TARGETS
from minipallas.lowering.tpu.aot import MosaicCompileError, compile_check, libtpu_available
from minipallas.passes.kernel.grid_fusion import fuse_grid_steps
from minipallas.passes.kernel.grid_fusion.choose import Limits, fuse_factor, moves_along
from minipallas.passes.kernel.grid_fusion.cost import MOSAIC_VMEM, V5E, Plan, plan_of
from minipallas.passes.pipeline import run
from minipallas.platforms.mosaic import custom_call_params

MIB = 1 << 20


def _bench(name: str, **params):
    (bench,) = [b for b in benches(False, True) if b.case.name == name]
    extra = {"compiler_params": TpuCompilerParams(**params)} if params else {}
    call = bench.case.minipallas(**extra)
    return call.trace(*bench.case.inputs(), memory_space=TPU_VMEM)


def _tpu(kernel):
    return run(kernel, TARGETS["tpu"].pipeline_for(kernel))


def test_windows_past_the_default_scope_ask_for_the_vmem_they_take():
    """matmul f32 2048^3 in 512-blocks: 1024x2048 windows over the whole of k take 32 MiB, so
    the kernel asks for 34 (0.137 ms on a v5e, against 0.182 within 14 MiB)."""
    written = _bench("matmul_f32_2048")
    assert written.vmem_limit_bytes is None
    fused = _tpu(written)
    need = plan_of(fused, V5E).vmem
    assert need > V5E.vmem_bytes
    assert fused.vmem_limit_bytes == -(-(need + MOSAIC_VMEM) // MIB) * MIB == 34 * MIB
    lowered = TARGETS["tpu"].lower(written)
    assert lowered.info["vmem_limit_bytes"] == 34 * MIB
    assert (
        custom_call_params(None, lowered.info["vmem_limit_bytes"])["vmem_limit_bytes"] == 34 * MIB
    )
    assert "vmem limit 35651584 bytes" in str(fused)


def test_a_kernel_within_the_default_scope_asks_for_nothing():
    """softmax 8192x2048 fuses within 14 MiB: its custom call is upstream's, no limit set."""
    fused = _tpu(_bench("softmax_8192"))
    assert fused.grid != _bench("softmax_8192").grid
    assert fused.vmem_limit_bytes is None
    assert custom_call_params(None, fused.vmem_limit_bytes)["vmem_limit_bytes"] is None


def test_the_users_limit_is_the_budget_and_is_kept():
    """With vmem_limit_bytes=16 MiB the windows stay within 14 (the 512-block f32 matmul fuses
    as it did before the limit was raised: 2x4x4), and the call asks for the user's 16."""
    kernel = _bench("matmul_f32_2048", vmem_limit_bytes=16 * MIB)
    assert kernel.vmem_limit_bytes == 16 * MIB
    fused = _tpu(kernel)
    assert fused.grid == (2, 4, 4)
    assert plan_of(fused, V5E).vmem <= 16 * MIB - MOSAIC_VMEM
    assert fused.vmem_limit_bytes == 16 * MIB
    wide = _tpu(_bench("matmul_f32_2048", vmem_limit_bytes=64 * MIB))
    assert (wide.grid, wide.vmem_limit_bytes) == ((2, 4, 1), 64 * MIB)
    params = TpuCompilerParams(vmem_limit_bytes=16 * MIB)
    assert custom_call_params(params, 34 * MIB)["vmem_limit_bytes"] == 16 * MIB


def test_an_option_budget_asks_for_what_it_takes():
    """``vmem_budget`` given to the pass: its windows, past 14 MiB, ask for their VMEM too."""
    fused = fuse_grid_steps(_bench("matmul_f32_2048"), vmem_budget=20 * MIB, rows_alone=True)
    need = plan_of(fused, V5E).vmem
    assert V5E.vmem_bytes < need <= 20 * MIB
    assert fused.vmem_limit_bytes == -(-(need + MOSAIC_VMEM) // MIB) * MIB


def test_an_imported_kernel_keeps_upstreams_limit():
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0

    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        compiler_params=pltpu.CompilerParams(vmem_limit_bytes=48 * MIB),
    )
    (eqn,) = jax.make_jaxpr(call)(jnp.zeros((8, 128), jnp.float32)).jaxpr.eqns
    assert kernel_from_eqn(eqn, memory_space=TPU_VMEM).vmem_limit_bytes == 48 * MIB
    plain = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32))
    (eqn,) = jax.make_jaxpr(plain)(jnp.zeros((8, 128), jnp.float32)).jaxpr.eqns
    assert kernel_from_eqn(eqn, memory_space=TPU_VMEM).vmem_limit_bytes is None


def test_pallas_call_keeps_the_users_limit():
    call = mp.pallas_call(
        lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref[...]),
        mp.ArrayType((8, 128), "float32"),
        compiler_params=mp.tpu.CompilerParams(vmem_limit_bytes=40 * MIB),
    )
    assert call.trace(mp.ArrayType((8, 128), "float32")).vmem_limit_bytes == 40 * MIB


@pytest.mark.skipif(not libtpu_available(), reason="needs libtpu (the test extra)")
def test_libtpu_compiles_the_fused_module_with_its_limit_and_not_in_16_mib():
    written = _bench("matmul_f32_2048")
    lowered = TARGETS["tpu"].lower(written)
    kernel = _tpu(written)
    assert compile_check(kernel, lowered).as_text()
    with pytest.raises(MosaicCompileError, match="VmemOom"):
        compile_check(kernel, lowered, params={"vmem_limit_bytes": 16 * MIB})


def test_unrolled_copies_overlap_while_their_spilled_values_fit():
    """bf16 4096x512 dots unrolled 4 times, spilling 8 MiB of f32 results each, ran 0.939 ms
    on a v5e against 0.823 a dot a step: past ``overlap_bytes`` the copies do not overlap the
    MXU and the VPU. 2048-row dots spilling 4 MiB each, 4 copies: 0.779 ms."""
    plan = Plan((8,), (), 0, mxu_s=1.0, vpu_s=0.5, copies=4, spilled_bytes=4 * MIB)
    assert plan.cost(V5E).compute_s == pytest.approx(1.0 + 0.5 / 4)
    over = dataclasses.replace(plan, spilled_bytes=8 * MIB)
    assert over.cost(V5E).compute_s == pytest.approx(1.5)


def _matmul_tanh(x_ref, w_ref, o_ref):
    o_ref[...] = mp.numpy.tanh(mp.numpy.dot(x_ref[...], w_ref[...]))


def test_a_factor_leaving_as_many_steps_as_the_one_below_is_not_weighed():
    """8 steps, at most 5 a step: 4 (2 steps), never 5 (2 steps too, 2 of its sub-steps past
    the end), which the copies' overlap of the MXU and the VPU alone would make look faster."""
    call = mp.pallas_call(
        _matmul_tanh,
        mp.ArrayType((1024, 128), "float32"),
        grid=(8,),
        in_specs=[
            mp.BlockSpec((128, 128), lambda i: (i, 0)),
            mp.BlockSpec((128, 128), lambda i: (0, 0)),
        ],
        out_specs=mp.BlockSpec((128, 128), lambda i: (i, 0)),
    )
    kernel = call.trace(mp.ArrayType((1024, 128), "float32"), mp.ArrayType((128, 128), "float32"))
    plan = dataclasses.replace(plan_of(kernel, V5E), mxu_s=1e-3, vpu_s=1e-3)  # overlap matters
    limits = Limits(V5E, V5E.vmem_bytes, 5)
    assert plan.fused(0, 5).cost(V5E).seconds < plan.fused(0, 4).cost(V5E).seconds
    assert fuse_factor(kernel, plan, 0, moves_along(kernel, 0), 5, limits) == 4
