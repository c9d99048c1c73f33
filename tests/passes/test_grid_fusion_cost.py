"""``fuse-grid-steps``' cost model (``passes/kernel/grid_fusion/cost.py``) and the choices made
from it (``choose.py``), on made-up kernels, and ``minipallas-opt --explain``'s text.

The model is arithmetic on the kernel, so its terms are checked against counts made by hand or
by brute force; a choice is checked to be the least modelled time among the settings a user
could force, and a limit the user sets to override it. No wall clock: the chip's times are in
``bench/results/fusion_cost_v5e.txt``.
"""

import itertools
import math
import sys
from pathlib import Path

import numpy as np
import pytest

import minipallas as mp
from minipallas.cli import main
from minipallas.ir.types import TPU_VMEM
from minipallas.ir.verifier import verify
from minipallas.passes.kernel.grid_fusion import fuse_grid_steps
from minipallas.passes.kernel.grid_fusion.cost import (
    V5E,
    Operand,
    Plan,
    body_ops,
    fetches,
    kernel_cost,
    plan_of,
)
from minipallas.passes.kernel.grid_fusion.vmem import tiled_bytes

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from filecheck_util import filecheck  # noqa: E402


def _steps(grid):
    return itertools.product(*(range(n) for n in grid))


@pytest.mark.parametrize("grid", [(4, 4, 4), (3, 1, 5), (2, 6), (1, 7, 1, 3)])
def test_fetches_counts_the_steps_where_a_block_index_changes(grid):
    for r in range(len(grid) + 1):
        for axes in itertools.combinations(range(len(grid)), r):
            picked = [tuple(step[a] for a in axes) for step in _steps(grid)]
            changes = 1 + sum(a != b for a, b in itertools.pairwise(picked))
            assert fetches(grid, frozenset(axes)) == changes, (grid, axes)


def test_the_model_adds_the_steps_to_the_larger_of_copies_and_compute():
    block = Operand(4096, frozenset({0}))
    plan = Plan((100,), (block, Operand(4096, frozenset({0}), True)), 0, 1e-3, 2e-4)
    cost = plan.cost(V5E)
    assert cost.steps_s == 100 * V5E.step_s
    assert cost.hbm_s == 2 * 4096 * 100 / V5E.hbm_bytes_s
    assert cost.compute_s == pytest.approx(1.2e-3)
    assert cost.seconds == cost.steps_s + cost.compute_s + 2 * 4096 / V5E.hbm_bytes_s
    fused = plan.fused(0, 8)
    assert fused.grid == (13,) and fused.vmem == 2 * 2 * 8 * 4096
    guarded = 13 * 4  # 100 = 12 * 8 + 4: the last 4 sub-steps of every step test the end
    assert fused.guarded == guarded
    assert fused.cost(V5E).steps_s == 13 * V5E.step_s + guarded * V5E.guard_s


def _elementwise(steps: int, block: int = 1024):
    def body(x_ref, o_ref):
        o_ref[...] = mp.numpy.tanh(x_ref[...]) * 2.0

    n = steps * block
    call = mp.pallas_call(
        body,
        mp.ArrayType((n,), "float32"),
        grid=(steps,),
        in_specs=[mp.BlockSpec((block,), lambda i: (i,))],
        out_specs=mp.BlockSpec((block,), lambda i: (i,)),
    )
    return call.trace(mp.ArrayType((n,), "float32"), memory_space=TPU_VMEM)


def _seconds(kernel) -> float:
    return kernel_cost(kernel).seconds


def test_an_elementwise_grid_is_fused_to_the_least_modelled_time():
    kernel = _elementwise(4096)
    chosen = fuse_grid_steps(kernel)
    factor = math.ceil(4096 / chosen.grid[0])
    assert factor <= V5E.unrolled_ops // body_ops(kernel)  # the code budget
    for most in (1, 2, 8, 32, factor // 2):  # what the old defaults or a user could force
        assert _seconds(chosen) <= _seconds(fuse_grid_steps(kernel, max_unroll=most))
    verify(chosen.body)


def test_a_limit_given_overrides_the_model():
    kernel = _elementwise(4096)
    assert fuse_grid_steps(kernel, max_unroll=8).grid == (512,)
    assert fuse_grid_steps(kernel, vmem_budget=4 * 4096).grid == (4096,)  # 4 buffers of 4 KiB
    small = fuse_grid_steps(kernel, vmem_budget=4 * 4 * 4096)
    assert small.grid == (1024,) and small.in_specs[0].block_shape == (4096,)
    assert fuse_grid_steps(kernel, target_bytes=4 * 8192).grid == (1024,)


def _matmul(n: int, block: int = 128, **options):
    def body(x_ref, y_ref, o_ref, acc_ref):
        @mp.when(mp.program_id(2) == 0)
        def _():
            acc_ref[...] = mp.numpy.zeros(acc_ref.shape, "float32")

        acc_ref[...] += x_ref[...] @ y_ref[...]
        o_ref[...] = acc_ref[...]

    spec = (block, block)
    return mp.pallas_call(
        body,
        mp.ArrayType((n, n), "float32"),
        grid=(n // block,) * 3,
        in_specs=[
            mp.BlockSpec(spec, lambda i, j, k: (i, k)),
            mp.BlockSpec(spec, lambda i, j, k: (k, j)),
        ],
        out_specs=mp.BlockSpec(spec, lambda i, j, k: (i, j)),
        scratch_shapes=[mp.tpu.VMEM(spec, "float32")],
        **options,
    )


def test_a_matmul_is_widened_where_the_model_times_it_least():
    """Taller dots load the MXU's weights fewer times for the same flops, and wider blocks are
    copied fewer times: of every widening the old ``wide_block`` could force, none is faster
    in the model than the one chosen, nor the old defaults (at most 512 rows, 4 MiB a step)."""
    call = _matmul(1024)
    kernel = call.trace(*[mp.ArrayType((1024, 1024), "float32")] * 2, memory_space=TPU_VMEM)
    chosen = fuse_grid_steps(kernel)
    for cap in (1, 128, 256, 512):
        assert _seconds(chosen) <= _seconds(fuse_grid_steps(kernel, wide_block=cap))
    old = fuse_grid_steps(kernel, wide_block=512, max_unroll=32, target_bytes=4 << 20)
    assert _seconds(chosen) <= _seconds(old)
    assert fuse_grid_steps(kernel, wide_block=1).out_specs[0].block_shape == (128, 1024)
    x = np.random.default_rng(0).standard_normal((1024, 1024), dtype=np.float32)
    widened = _matmul(1024, passes="fuse-grid-steps")
    assert widened.trace(*[mp.ArrayType((1024, 1024), "float32")] * 2).grid == chosen.grid
    fused = widened(x, x)  # the widened kernel, on the CPU
    assert np.asarray(fused).tobytes() == np.asarray(call(x, x)).tobytes()


KERNEL_FILE = """
import minipallas as mp

def matmul(x_ref, y_ref, o_ref, acc_ref):
    @mp.when(mp.program_id(2) == 0)
    def _():
        acc_ref[...] = mp.numpy.zeros(acc_ref.shape, "float32")

    acc_ref[...] += x_ref[...] @ y_ref[...]
    o_ref[...] = acc_ref[...] + mp.program_id(1).astype("float32")

b = 128
kernel = mp.pallas_call(
    matmul,
    mp.ArrayType((2048, 2048), "float32"),
    grid=(16, 16, 16),
    in_specs=[
        mp.BlockSpec((b, b), lambda i, j, k: (i, k)),
        mp.BlockSpec((b, b), lambda i, j, k: (k, j)),
    ],
    out_specs=mp.BlockSpec((b, b), lambda i, j, k: (i, j)),
    scratch_shapes=[mp.tpu.VMEM((b, b), "float32")],
)
args = [mp.ArrayType((2048, 2048), "float32")] * 2
"""

EXPLAINED = r"""
CHECK: kernel matmul: grid 16x16x16 -> [[I:[0-9]+]]x{{[0-9]+}}x1
CHECK-NEXT: model (TPU v5e): {{[0-9.]+}} ms -> [[BEST:[0-9.]+]] ms (steps {{.*}} + max(HBM {{.*}}
CHECK-NEXT: input 0: f32[2048,2048] in blocks 128x128 -> [[ROWS:[0-9]+]]x2048
CHECK-NEXT: input 1: f32[2048,2048] in blocks 128x128 -> 2048x[[COLS:[0-9]+]]
CHECK-NEXT: output 0: f32[2048,2048] in blocks 128x128 -> [[ROWS]]x[[COLS]]
CHECK-NEXT: axis 1: not widened: the body reads program_id of this axis
CHECK-NEXT: axes 0 widened [[W:[0-9]+]]: weighed (ms) [[W]] [[BEST]], {{[0-9]+ [0-9.]+}},
CHECK-NEXT: widenings weighed, 0 over the VMEM budget
CHECK-NEXT: axis 2: 16 sub-steps a step (16 -> 1 steps), {{[0-9.]+}} ms
CHECK-NEXT: unfused {{[0-9.]+}} ms; more sub-steps: the axis's length
CHECK-NEXT: axis 1: {{[0-9]+}} sub-steps a step (16 -> {{[0-9]+}} steps), [[BEST]] ms
CHECK-NEXT: unfused {{[0-9.]+}} ms; more sub-steps: the model (the pipeline's fill and drain
CHECK-NEXT: VMEM: the windows take {{[0-9.]+}} MiB, over Mosaic's default scope: the kernel asks
CHECK-SAME: for {{[0-9]+}} MiB (vmem_limit_bytes)
"""


def test_explain_says_which_windows_and_why(tmp_path, capsys):
    path = tmp_path / "matmul.py"
    path.write_text(KERNEL_FILE)
    assert main([str(path), "--explain"]) == 0
    filecheck(capsys.readouterr().out, EXPLAINED)
    options = "fuse-grid-steps{min_steps=8192}"
    assert main([str(path), "--explain", "--pass-pipeline", options]) == 0
    filecheck(capsys.readouterr().out, "CHECK: not fused: 4096 grid steps, fewer than min_steps")


def test_explain_takes_a_kernel_file_only(tmp_path, capsys):
    path = tmp_path / "f.mir"
    path.write_text("func @f() -> () {\n  return\n}\n")
    assert main([str(path), "--explain"]) == 2
    assert "--explain takes a kernel file" in capsys.readouterr().err


def test_vmem_holds_whole_tiles():
    """A 128x1 running max takes 128 rows of 128 lanes in VMEM; bf16 packs 16 rows a tile."""
    assert tiled_bytes((128, 1), "float32") == 128 * 128 * 4
    assert tiled_bytes((3, 200), "float32") == 8 * 256 * 4
    assert tiled_bytes((3, 200), "bfloat16") == 16 * 256 * 2
    assert tiled_bytes((1000,), "float32") == 1024 * 4
    assert tiled_bytes((), "float32") == 4


def _plan(kernel_fn, grid=(64,), block=(8, 128), scratch=()):
    call = mp.pallas_call(
        kernel_fn,
        mp.ArrayType((grid[0] * block[0], block[1]), "float32"),
        grid=grid,
        in_specs=[mp.BlockSpec(block, lambda i: (i, 0))],
        out_specs=mp.BlockSpec(block, lambda i: (i, 0)),
        scratch_shapes=list(scratch),
    )
    kernel = call.trace(mp.ArrayType((grid[0] * block[0], block[1]), "float32"))
    return kernel, plan_of(kernel, V5E)


def _tanh(x_ref, o_ref):
    o_ref[...] = mp.numpy.tanh(x_ref[...])


def test_a_value_over_the_registers_costs_its_vmem_traffic_and_room():
    _, small = _plan(_tanh)  # 4 KiB values: in registers
    _, big = _plan(_tanh, block=(256, 256))  # 256 KiB: spilled
    assert small.spilled_bytes == 0 and big.spilled_bytes == 256 * 256 * 4
    per_element = big.vpu_s / (64 * 256 * 256)
    assert per_element > small.vpu_s / (64 * 8 * 128)  # the store and load of each element
    assert big.vmem == 2 * 2 * 256 * 256 * 4 + big.spilled_bytes


def test_a_loop_of_sub_steps_counts_its_trips_and_unrolled_ones_their_copies():
    """The model of a fused kernel times what it runs: a sub-step loop's body once per trip,
    and it knows its unrolled copies (which overlap MXU and VPU work)."""
    kernel, plan = _plan(_tanh)
    looped = fuse_grid_steps(kernel, max_unroll=8, substep_loop=True)
    unrolled = fuse_grid_steps(kernel, max_unroll=8)
    assert " for " in str(looped.body) and " for " not in str(unrolled.body)
    for fused in (looped, unrolled):
        # the same elementwise work (and a few index ops), not one eighth of it
        assert plan_of(fused, V5E).vpu_s == pytest.approx(plan.vpu_s, rel=0.05)
    assert plan_of(unrolled, V5E).copies == 8 and plan_of(looped, V5E).copies == 1


def test_an_axis_left_with_steps_is_not_fused_again():
    """Fused 16 -> 3 steps (the VMEM budget), the axis is not fused a second time over its
    fused steps, nor is the next axis out."""
    kernel = _matmul(1024).trace(
        *[mp.ArrayType((1024, 1024), "float32")] * 2, memory_space=TPU_VMEM
    )
    notes: list[str] = []
    fused = fuse_grid_steps(kernel, wide_block=1, vmem_budget=1 << 20, notes=notes)
    assert fused.grid[0] == 8 and 1 < fused.grid[2] < 8
    assert sum(n.startswith("axis 2:") and "sub-steps a step" in n for n in notes) == 1
    assert not any(n.startswith("axis 1:") and "sub-steps a step" in n for n in notes)
