"""Issue 39's two TPU-path fidelity gaps, checked on the CPU with libtpu ahead of time.

1. A kernel with no array inputs, where the default device is a TPU (``on_a_tpu``: the
   compile-only v5e, as a TPU machine's default device): its numpy call once lowered its CPU
   program for the TPU (``NotImplementedError: MLIR translation rule for primitive
   'minipallas_module' not found for platform tpu``), and under ``jax.jit`` it ran at trace
   time, a constant; now it stages out as the kernel's Mosaic module.
2. Upstream's flash attention, causal with segment ids: libtpu refused minipallas's module
   ("cannot statically prove that index in dimension 2 is a multiple of 8"): the ``pl.loop``
   counter, carried by ``scan``, was unbounded, so its slice start was clamped and the clamp
   hid its alignment. The range analysis now bounds a carry stepped by a constant.

``bench/chip/tpu_fidelity.py`` runs both on the chip; its ``--aot`` mode runs here.
"""

import os

import jax
import numpy as np
import pytest
from ir_types import I32

import minipallas as mp
import minipallas.numpy as mnp
from minipallas.interop.importer.rules.kernel_call import kernel_from_eqn
from minipallas.lowering.compat.jax_private import core as jax_core
from minipallas.lowering.runtime import libtpu
from minipallas.lowering.tpu import aot, compile_check
from minipallas.lowering.tpu.ranges import int_ranges
from minipallas.platforms import mesh_tpu

if not aot.libtpu_available():
    if os.environ.get("CI"):
        raise RuntimeError("CI compiles every Mosaic module with libtpu: install requirements.lock")
    pytest.skip("libtpu is not installed (make test installs it)", allow_module_level=True)

from bench.chip import tpu_fidelity as fidelity

ROWS, COLS = fidelity.ROWS, fidelity.BLOCK[1]
FILLED = np.add.outer(np.arange(ROWS), np.arange(COLS) * 0.5).astype(np.float32) + 3


def on_a_tpu():
    return jax.default_device(libtpu.tpu_device())


def pallas_calls(jaxpr):
    """Every ``pallas_call`` equation in ``jaxpr``, custom-derivative calls looked into."""
    found = [e for e in jaxpr.eqns if e.primitive.name == "pallas_call"]
    for sub in jax_core.subjaxprs(jaxpr):
        found += pallas_calls(sub)
    return found


def test_a_kernel_without_inputs_runs_from_numpy_where_the_default_device_is_a_tpu():
    """Its CPU program has no parameter to place on the CPU, so ``jax.jit`` lowered it for
    the default device's backend, which has no rule for it."""
    kernel = fidelity.minipallas_zero_input()
    with on_a_tpu():
        np.testing.assert_array_equal(kernel(), FILLED)


def test_a_kernel_without_inputs_stages_out_under_jit_and_compiles_for_a_tpu():
    kernel = fidelity.minipallas_zero_input()

    def f():
        return kernel() * 2

    text = jax.jit(f).trace().lower(lowering_platforms=("tpu",)).as_text()
    assert "@tpu_custom_call()" in text and 'kernel_name = "fill"' in text
    with on_a_tpu():
        assert "tpu_custom_call" in jax.jit(f).lower().compile().as_text()
    np.testing.assert_array_equal(jax.jit(f)(), FILLED * 2)  # the CPU row: the same values


def test_a_carry_stepped_by_a_constant_is_bounded():
    """``fori_loop``'s counter as ``scan`` carries it: init plus up to trip count - 1 steps."""

    def f(n):
        up = mp.fori_loop(0, 4, lambda k, c: c + 1, mnp.int32(0))
        down = mp.fori_loop(0, 4, lambda k, c: c - 3, mnp.int32(20))
        by_n = mp.fori_loop(0, 4, lambda k, c: c + n, mnp.int32(0))
        unbounded = mp.fori_loop(0, n, lambda k, c: c + 1, mnp.int32(0))
        return up, down, by_n, unbounded

    fn = mp.trace(f, I32)
    found = int_ranges(fn.body, ())
    loops = [op for op in fn.body.ops if op.name == "for"]
    assert [found.get(op.param_group("inits")[0]) for op in loops] == [
        (0, 3),
        (11, 20),
        None,
        None,
    ]


def test_causal_flash_attention_with_segment_ids_compiles_with_libtpu():
    (eqn,) = pallas_calls(jax.make_jaxpr(fidelity.flash_attention)(*fidelity.flash_inputs()))
    compiled = compile_check(kernel_from_eqn(eqn, memory_space=mp.tpu.VMEM))
    assert compiled.as_text()


def test_its_gradient_kernels_compile_with_libtpu():
    """The forward with residuals (refused as the forward was), dkv and dq."""
    jaxpr = jax.make_jaxpr(fidelity.flash_gradient)(*fidelity.flash_inputs())
    eqns = pallas_calls(jaxpr)
    assert len(eqns) == 3
    for eqn in eqns:
        assert compile_check(kernel_from_eqn(eqn, memory_space=mp.tpu.VMEM)).as_text()


def test_the_bench_compiles_both_sides_and_replaces_every_kernel(monkeypatch, capsys):
    """``--aot``: each case's two sides compile for a v5e; minipallas's side runs its own
    module for each kernel, the one inside flash attention's ``custom_vjp`` too (that call's
    equation, bound again as it was, failed: ``KeyError: 'subfuns'``)."""
    replaced = []
    original = mesh_tpu.run_pallas_call_eqn

    def counting(eqn, ins):
        replaced.append(eqn.params["name"])
        return original(eqn, ins)

    monkeypatch.setattr(mesh_tpu, "run_pallas_call_eqn", counting)
    assert fidelity.main(["--aot"]) == 0
    assert len(replaced) == 1 + 1 + 3  # zero-input, forward, the gradient's three
    out = capsys.readouterr().out
    assert out.count("compiles (ahead of time) | compiles (ahead of time)") == len(fidelity.CASES)
