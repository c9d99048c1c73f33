"""``fuse-grid-steps`` over every grid axis: outer axes widened to bigger blocks (``widen``).

A matmul written in 128-blocks runs in 512-blocks, bit for bit the unfused kernel's and
upstream's interpret mode's; the Mosaic modules it emits are compiled by libtpu after the test
(``tests/mosaic_compile.py``). Kernels whose steps along an axis are not independent rows
(scratch carried across the axis, a body that asks its position, a float sum that sees the
widened rows) are left unwidened.
"""

import numpy as np
import pytest

from bench.realistic_kernels import realistic_cases
from minipallas.ir.interpret import interpret
from minipallas.ir.types import TPU_VMEM
from minipallas.ir.verifier import verify
from minipallas.lowering import TARGETS
from minipallas.passes.kernel.grid_fusion import fuse_grid_steps
from minipallas.passes.pipeline import run
from minipallas.tools.corpora.suite import KERNELS, Case, inputs, matmul, normal

WIDEN_ONLY = "fuse-grid-steps{max_unroll=1}"


def _matmul(n: int, block: int = 128, kernel=matmul) -> Case:
    spec = (block, block)
    return Case(
        f"matmul_{n}",
        kernel,
        ((n, n), "float32"),
        inputs(normal(n, n), normal(n, n)),
        grid=(n // block,) * 3,
        in_specs=[(spec, lambda i, j, k: (i, k)), (spec, lambda i, j, k: (k, j))],
        out_specs=(spec, lambda i, j, k: (i, j)),
        scratch=((spec, "float32"),),
    )


def _kernel(case: Case, **options):
    """The kernel the TPU runs: its default passes, or ``fuse-grid-steps`` with ``options``."""
    kernel = case.minipallas().trace(*case.inputs(), memory_space=TPU_VMEM)
    if options:
        return fuse_grid_steps(kernel, **options)
    return run(kernel, TARGETS["tpu"].pipeline_for(kernel))


def _bytes(x) -> bytes:
    return np.asarray(x).tobytes()


@pytest.mark.parametrize("passes", ["", WIDEN_ONLY])
def test_the_128_block_matmul_runs_in_512_blocks_with_upstreams_bits(passes):
    case = _matmul(512)
    ran = _kernel(case, **({"max_unroll": 1} if passes else {}))
    assert ran.grid == (1, 1, 4)  # k left: 3 steps saved cost less than filling 4x the window
    x, y = ran.in_specs
    assert (x.block_shape, y.block_shape) == ((512, 128), (128, 512))
    assert ran.out_specs[0].block_shape == (512, 512)
    assert [t.shape for t in ran.scratch_types] == [(512, 512)]
    args = case.inputs()
    fused = _bytes(case.minipallas(passes=passes or "fuse-grid-steps")(*args))
    assert fused == _bytes(case.minipallas()(*args))
    assert fused == _bytes(case.upstream()(*args))
    if not passes:  # the default pipeline's module
        module = str(case.minipallas().lower(*args, target="tpu"))
        assert "iteration_bounds = array<i64: 1, 1, 4>" in module


def test_the_2048_matmul_in_128_blocks_runs_in_the_blocks_the_cost_model_picks():
    """The chip bench's kernel (``tpu_bench --large``): 16x16x16 steps -> 2x8x1, 1024-row dots
    over the whole of k in 16 sub-steps, its windows in 23 MiB of VMEM, past Mosaic's default
    scope, so the kernel asks for 25 (0.130 ms on a v5e; 0.181 as 2x4x4 within 14 MiB:
    bench/results/tpu_bench_large_v5e.txt)."""
    ran = _kernel(_matmul(2048))
    assert ran.grid == (2, 8, 1)
    blocks = [s.block_shape for s in (*ran.in_specs, *ran.out_specs)]
    assert blocks == [(1024, 2048), (2048, 256), (1024, 256)]
    assert ran.vmem_limit_bytes == 25 << 20
    case = _matmul(2048)  # its module, compiled by libtpu after the test
    assert "iteration_bounds = array<i64: 2, 8, 1>" in str(
        case.minipallas().lower(*case.inputs(), target="tpu")
    )


def test_a_float_sum_over_the_other_dimension_keeps_the_rows_apart():
    """Flash attention sums each query row's probabilities (``p.sum(axis=1)``) and the suite's
    row_sum its rows: XLA:CPU orders such a sum by the operand's whole shape (row_sum in 64-row
    blocks rounds otherwise than in 16-row ones), so neither is widened."""
    (flash,) = [c for c in realistic_cases() if c.name == "flash_attention"]
    assert _kernel(flash, max_carried=9, max_unroll=1).grid == flash.grid
    (row_sum,) = [c for c in KERNELS if c.name == "row_sum"]
    assert _kernel(row_sum, min_steps=1, max_unroll=1).grid == row_sum.grid


def test_blocks_already_wide_are_left_as_they_are():
    assert _kernel(_matmul(1024, block=512)).grid == (2, 2, 2)


def carried_over_rows(ns, x_ref, y_ref, o_ref, acc_ref):
    """The accumulator is reset only at the very first step: every row block adds to the
    previous one's sum, so the steps along i are not independent."""

    @ns.when((ns.program_id(0) == 0) & (ns.program_id(2) == 0))
    def _():
        acc_ref[...] = ns.np.zeros(acc_ref.shape, ns.np.float32)

    acc_ref[...] += ns.np.dot(x_ref[...], y_ref[...], preferred_element_type=ns.np.float32)
    o_ref[...] = acc_ref[...]


def row_offset(ns, x_ref, y_ref, o_ref, acc_ref):
    """A body that asks its row block's index."""
    acc_ref[...] = ns.np.dot(x_ref[...], y_ref[...], preferred_element_type=ns.np.float32)
    o_ref[...] = acc_ref[...] + ns.program_id(0).astype(ns.np.float32)


@pytest.mark.parametrize("kernel", [carried_over_rows, row_offset], ids=lambda k: k.__name__)
def test_steps_that_are_not_independent_rows_are_not_widened(kernel):
    case = _matmul(512, kernel=kernel)
    widened = _kernel(case, max_unroll=1)
    assert widened.grid[:2] == (4, 4)
    args = case.inputs()
    assert _bytes(case.minipallas(passes="fuse-grid-steps")(*args)) == _bytes(
        case.minipallas()(*args)
    )


def test_wide_block_1_keeps_the_innermost_fusion_alone():
    case = _matmul(1024)
    assert _kernel(case, wide_block=1).grid == (8, 1, 1)
    assert _kernel(case).grid == (1, 8, 1)


def test_widening_builds_a_verified_kernel_and_leaves_its_input_alone():
    kernel = _matmul(1024).minipallas().trace(*_matmul(1024).inputs(), memory_space=TPU_VMEM)
    before = str(kernel)
    widened = fuse_grid_steps(kernel, max_unroll=1)
    assert widened.grid == (1, 2, 8)
    verify(widened.body)
    assert str(kernel) == before


def test_on_the_tpu_a_row_sum_of_wider_blocks_widens():
    """Mosaic sums each row of a block alone, so the TPU target sets ``rows_alone``: flash
    attention's query rows widen there (on a v5e, 256 to 2048 rows gave the unfused kernel's
    bits, bench/results/fusion_cost_v5e.txt). The pass's own default keeps XLA:CPU's bits; the
    reference interpreter, which sums each row alone too, gives the widened kernel the old bits."""
    assert "rows_alone=true" in TARGETS["tpu"].optimizations
    (flash,) = [c for c in realistic_cases() if c.name == "flash_attention"]
    kernel = flash.minipallas().trace(*flash.inputs(), memory_space=TPU_VMEM)
    options = {"max_unroll": 1, "discharge_carried": False}
    assert fuse_grid_steps(kernel, **options).grid == flash.grid
    wide = fuse_grid_steps(kernel, rows_alone=True, wide_block=512, **options)
    assert wide.grid[0] < flash.grid[0] and wide.in_specs[0].block_shape[0] == 512
    verify(wide.body)
    args = flash.inputs()
    passes = "fuse-grid-steps{rows_alone=true,wide_block=512,max_unroll=1}"
    plain, widened = flash.minipallas(optimize=False), flash.minipallas(passes=passes)
    assert widened.trace(*args).grid == wide.grid
    want = interpret(plain.program(*args), *args)
    assert _bytes(interpret(widened.program(*args), *args)) == _bytes(want)
