"""``fuse-grid-steps``: which index maps it follows, the fused kernel's shape, and its bits.

The pass must keep every result bit for bit: each suite and realistic kernel it fuses gives the
unfused kernel's bytes on the CPU (and the fused Mosaic modules compile with libtpu: the
conftest compiles every module a test emits). The FileCheck test of the TPU module is
``filecheck/grid_fusion.py``.
"""

from pathlib import Path

import numpy as np
import pytest

import minipallas as mp
import minipallas.numpy as jnp
from minipallas.ir.errors import MiniPallasError, PassError
from minipallas.ir.types import TPU_VMEM
from minipallas.lowering import TARGETS
from minipallas.passes.kernel.grid_fusion import fuse_grid_steps
from minipallas.passes.kernel.grid_fusion.index_maps import STAYS, motion
from minipallas.passes.pipeline import run

ROOT = Path(__file__).resolve().parents[2]
from bench.realistic_kernels import realistic_cases  # noqa: E402
from minipallas.tools.corpora.suite import KERNELS, Case  # noqa: E402

EAGER = "fuse-grid-steps{min_steps=1,target_bytes=1000000000,max_unroll=4,max_carried=9}"


def _traced(case: Case, **options):
    call = case.minipallas(**options)
    return call, call.trace(*case.inputs(), memory_space=TPU_VMEM)


def _same(a, b) -> bool:
    pairs = zip(a, b, strict=True) if isinstance(a, tuple) else [(a, b)]
    return all(np.asarray(x).tobytes() == np.asarray(y).tobytes() for x, y in pairs)


@pytest.mark.parametrize("case", KERNELS, ids=lambda c: c.name)
def test_every_suite_kernel_keeps_its_bits(case):
    plain, fused = case.minipallas(), case.minipallas(passes=EAGER)
    args = case.inputs()
    assert _same(plain(*args), fused(*args))


def test_the_suite_has_kernels_it_fuses():
    """The bit test above is not vacuous: most suite kernels with a grid are fused."""
    fused = [c.name for c in KERNELS if _traced(c, passes=EAGER)[1].grid != c.grid]
    assert len(fused) >= 10, fused


@pytest.mark.parametrize("case", realistic_cases(), ids=lambda c: c.name)
def test_realistic_kernels_fuse_by_default_on_the_tpu_and_keep_their_bits(case):
    _, kernel = _traced(case)
    ran = run(kernel, TARGETS["tpu"].pipeline_for(kernel))
    if np.prod(case.grid) >= 64:  # flash attention's chained scratch: in a loop
        assert np.prod(ran.grid) < np.prod(case.grid)
    else:  # a short grid: left alone
        assert ran.grid == case.grid
    args = case.inputs()
    assert _same(case.minipallas()(*args), case.minipallas(passes="fuse-grid-steps")(*args))


def test_matmul_fuses_k_then_j():
    (case,) = [c for c in realistic_cases() if c.name == "matmul_1024"]
    _, kernel = _traced(case)
    fused = fuse_grid_steps(kernel, wide_block=1)  # widening: test_grid_fusion_axes.py
    assert fused.grid == (8, 1, 1)  # all 8 k steps, then all 8 j steps
    x, y = fused.in_specs
    assert (x.block_shape, y.block_shape) == ((128, 1024), (1024, 1024))
    assert fused.out_specs[0].block_shape == (128, 1024)
    assert fused.scratch_types == kernel.scratch_types


def test_a_length_the_factor_does_not_divide_skips_the_steps_past_its_end():
    (case,) = [c for c in realistic_cases() if c.name == "masked_tanh"]  # 977 steps, a prime
    _, kernel = _traced(case)
    fused = fuse_grid_steps(kernel, max_unroll=32)
    factor = fused.in_specs[0].block_shape[0] // 1024
    assert 977 % factor and fused.grid == (-(-977 // factor),)
    assert " cond " in str(fused.body)


def _kernel(index_map, grid=(64,), block=(8, 128), shape=(512, 128)):
    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0

    call = mp.pallas_call(
        body,
        mp.ArrayType(shape, "float32"),
        grid=grid,
        in_specs=[mp.BlockSpec(block, index_map)],
        out_specs=mp.BlockSpec(block, index_map),
    )
    return call.trace(mp.ArrayType(shape, "float32"))


def test_motion_follows_affine_index_maps_only():
    spec = _kernel(lambda i: (i, 0)).in_specs[0]
    assert motion(spec, 0).dim == 0 and motion(spec, 0).modulus == 0
    assert motion(_kernel(lambda i: (0, 0)).in_specs[0], 0) == STAYS
    shifted = _kernel(lambda i: (i + 4, 0), grid=(60,)).in_specs[0]
    assert motion(shifted, 0).modulus == 4 and not motion(shifted, 0).allows(8)
    assert motion(_kernel(lambda i: (2 * i, 0), grid=(32,)).in_specs[0], 0) is None
    assert motion(_kernel(lambda i: (i, i), grid=(1,), shape=(8, 128)).in_specs[0], 0) is None
    assert motion(_kernel(lambda i: (63 - i, 0)).in_specs[0], 0) is None


def test_a_stride_the_window_cannot_cover_is_left_alone():
    kernel = _kernel(lambda i: (63 - i, 0))  # reversed blocks: no contiguous window
    assert fuse_grid_steps(kernel, min_steps=1) is kernel


def test_a_shifted_index_takes_a_factor_of_its_shift():
    kernel = _kernel(lambda i: (i + 4, 0), grid=(60,))
    fused = fuse_grid_steps(kernel, min_steps=1, target_bytes=1 << 30)
    assert fused.grid == (15,)  # a factor of 4 only: the window starts at block 4


def test_the_vmem_budget_bounds_the_window():
    kernel = _kernel(lambda i: (i, 0))
    fused = fuse_grid_steps(kernel, min_steps=1, target_bytes=1 << 30, vmem_budget=4 * 4096 * 4)
    assert fused.grid == (16,)  # 4 blocks of 4 KiB in and out, double-buffered: 64 KiB


def test_a_body_carrying_several_scratch_buffers_runs_its_sub_steps_in_a_loop():
    """Flash attention hands its running max, sum and output to the next step in scratch. By
    default they are kept in values and the sub-steps unrolled (0.132 ms on a v5e at S=4096,
    0.196 in a loop); through VMEM, unrolled sub-steps ran 0.77x, so there they run in a loop
    (``test_grid_fusion_carried.py``), unless ``max_carried=3``."""
    (case,) = [c for c in realistic_cases() if c.name == "flash_attention"]
    _, kernel = _traced(case)
    assert " for " not in str(fuse_grid_steps(kernel).body)
    assert " for " in str(fuse_grid_steps(kernel, discharge_carried=False).body)
    unrolled = fuse_grid_steps(kernel, discharge_carried=False, max_carried=3)
    assert " for " not in str(unrolled.body)


def test_short_grids_and_dynamic_ones_are_left_alone():
    kernel = _kernel(lambda i: (i, 0))
    assert fuse_grid_steps(kernel) is not kernel
    assert fuse_grid_steps(kernel, min_steps=65) is kernel


def test_a_kernel_pass_in_a_function_pipeline_is_an_error():
    kernel = _kernel(lambda i: (i, 0))
    with pytest.raises(PassError, match="transforms a kernel"):
        run(kernel.body, "fuse-grid-steps")


def test_a_misspelt_pass_is_an_error_at_the_call():
    with pytest.raises(MiniPallasError, match="unknown pass 'fuse-grid-step'") as e:
        mp.pallas_call(lambda x, o: None, mp.ArrayType((8,), "float32"), passes="fuse-grid-step")
    assert "test_grid_fusion.py" in str(e.value)


def test_optimize_false_emits_the_module_as_written():
    (case,) = [c for c in realistic_cases() if c.name == "reduce_1d"]
    call = case.minipallas(optimize=False)
    args = case.inputs()
    plain = str(call.lower(*args, target="tpu"))
    fused = str(case.minipallas().lower(*args, target="tpu"))
    assert "iteration_bounds = array<i64: 1024>" in plain
    assert "iteration_bounds = array<i64: 5>" in fused  # 1024 steps in 5 (the cost model's)


def test_program_ids_inside_loops_and_calls_read_the_old_step():
    """``program_id`` nested in a loop body sees the old step index in every sub-step."""

    def body(x_ref, o_ref):
        def step(k, acc):
            return acc + mp.program_id(0).astype(jnp.float32)

        o_ref[...] = x_ref[...] + mp.fori_loop(0, 2, step, jnp.float32(0.0))

    call = mp.pallas_call(
        body,
        mp.ArrayType((512, 128), "float32"),
        grid=(64,),
        in_specs=[mp.BlockSpec((8, 128), lambda i: (i, 0))],
        out_specs=mp.BlockSpec((8, 128), lambda i: (i, 0)),
        passes="fuse-grid-steps{min_steps=1}",
    )
    x = np.zeros((512, 128), np.float32)
    want = np.repeat(2.0 * np.arange(64, dtype=np.float32), 8)[:, None] * np.ones(128)
    assert call.trace(x).grid != (64,)
    np.testing.assert_array_equal(call(x), want)


@pytest.mark.parametrize("case", [*KERNELS, *realistic_cases()], ids=lambda c: c.name)
def test_fusion_keeps_each_axis_semantics(case):
    """Each axis keeps its semantics (one fused to size 1 is ``parallel``, as any of size 1):
    the inference sees through the sub-steps' calls and their ``program_id * c + s``
    (``lowering/tpu/semantics.py``)."""
    from minipallas.lowering.tpu.semantics import dimension_semantics

    _, kernel = _traced(case)
    fused = fuse_grid_steps(kernel, min_steps=1, target_bytes=1 << 30, max_unroll=4, max_carried=9)
    before, after = dimension_semantics(kernel).values, dimension_semantics(fused).values
    if kernel.dimension_semantics is None:  # inferred: an axis of size 1 is parallel
        before = tuple("parallel" if n == 1 else s for s, n in zip(before, fused.grid, strict=True))
    assert after == before


def test_the_fused_kernel_text_parses_back():
    """Issue 48 §3: each function of the fused kernel's text (``str(kernel)``: the index maps,
    then the body with the sub-steps' copies of the old body) parses back, with distinct names."""
    import minipallas.kernels.programs  # noqa: F401  (registers the kernel passes)

    def double(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0 + mp.program_id(0).astype(np.float32)

    spec = mp.BlockSpec((8, 128), lambda i: (0, i))
    x = np.zeros((8, 512), np.float32)
    call = mp.pallas_call(double, out_shape=x, grid=(4,), in_specs=[spec], out_specs=spec)
    kernel = run(call.trace(x, memory_space=TPU_VMEM), "fuse-grid-steps{min_steps=2}")
    text = str(kernel)
    body = text[text.index("\nfunc @") + 1 :]
    module = mp.parse_module(body)
    names = [f.name for f in module.functions]
    assert len(names) == len(set(names)) > 1, names
    assert str(mp.parse_module(str(module.entry)).entry) == str(module.entry)
    for spec in (*kernel.in_specs, *kernel.out_specs):
        mp.parse_module(str(spec.index_map))
