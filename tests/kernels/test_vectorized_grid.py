"""The vectorized CPU grid: which axes it batches, and that batching changes no bit.

Each case here runs three ways on the same inputs and must agree bit for bit: minipallas's
CPU program (batched where the plan allows), minipallas's loop program (``grid_program``) and
upstream ``pallas_call(..., interpret=True)``. The expected batched axes say why the others
stay loops.
"""

import numpy as np
import pytest
from kernel_helpers import as_tuple, assert_same_bits

from minipallas.kernels.programs.grid import grid_program
from minipallas.kernels.programs.vectorized_grid import (
    vectorized_grid_plan,
    vectorized_grid_program,
)
from minipallas.lowering.runtime.compiled import compile
from minipallas.tools.corpora.suite import BY_NAME, KERNELS, Case, inputs, normal


def blocked_sum(ns, x_ref, o_ref, acc_ref, k_axis=1):
    """Scratch reset at the first k, accumulated, written at the last: batchable along i."""
    k = ns.program_id(k_axis)

    @ns.when(k == 0)
    def _():
        acc_ref[...] = ns.np.zeros(acc_ref.shape, ns.np.float32)

    acc_ref[...] += x_ref[...]

    @ns.when(k == ns.num_programs(k_axis) - 1)
    def _():
        o_ref[...] = acc_ref[...]


def blocked_sum_k_first(ns, x_ref, o_ref, acc_ref):
    blocked_sum(ns, x_ref, o_ref, acc_ref, k_axis=0)


def running_sum(ns, x_ref, o_ref, acc_ref):
    """Scratch never reset: each grid point sees every earlier one's sum, across i too."""

    @ns.when((ns.program_id(0) == 0) & (ns.program_id(1) == 0))
    def _():
        acc_ref[...] = ns.np.zeros(acc_ref.shape, ns.np.float32)

    acc_ref[...] += x_ref[...]
    o_ref[...] = acc_ref[...]


def scaled_by_position(ns, x_ref, o_ref):
    """The batched grid index in arithmetic: each block scaled by its own (i, j)."""
    i, j = ns.program_id(0), ns.program_id(1)
    o_ref[...] = x_ref[...] * (i * 10 + j + 1).astype(ns.np.float32)


def masked_max_int(ns, x_ref, o_ref):
    """An integer reduction batches (integer sums and maxima are exact in any order)."""
    o_ref[...] = x_ref[...].max(axis=1, keepdims=True)


def _int_inputs(*shape):
    return lambda rng: (rng.integers(-1000, 1000, shape, dtype=np.int32),)


SCRATCH = ((16, 128), "float32")
CASES = [
    (
        Case(
            "blocked_sum", blocked_sum, ((32, 128), "float32"), inputs(normal(32, 512)),
            grid=(2, 4), in_specs=[((16, 128), lambda i, k: (i, k))],
            out_specs=((16, 128), lambda i, k: (i, 0)), scratch=(SCRATCH,),
        ),
        (0,),  # k revisits the output; scratch is rewritten at k == 0
    ),
    (
        Case(
            "running_sum", running_sum, ((32, 512), "float32"), inputs(normal(32, 512)),
            grid=(2, 4), in_specs=[((16, 128), lambda i, k: (i, k))],
            out_specs=((16, 128), lambda i, k: (i, k)), scratch=(SCRATCH,),
        ),
        None,  # scratch flows from one i to the next
    ),
    (
        Case(
            "scratch_inner_axis", blocked_sum_k_first, ((32, 128), "float32"),
            inputs(normal(32, 512)), grid=(4, 2), in_specs=[((16, 128), lambda k, i: (i, k))],
            out_specs=((16, 128), lambda k, i: (i, 0)), scratch=(SCRATCH,),
        ),
        None,  # i could batch, but with scratch only leading axes do, and i is inside k
    ),
    (
        Case(
            "scaled_by_position", scaled_by_position, ((64, 256), "float32"),
            inputs(normal(64, 256)), grid=(8, 2), in_specs=[((8, 128), lambda i, j: (i, j))],
            out_specs=((8, 128), lambda i, j: (i, j)),
        ),
        (0, 1),
    ),
    (
        Case(
            "fewer_points_than_blocks", scaled_by_position, ((64, 256), "float32"),
            inputs(normal(64, 256)), grid=(3, 1), in_specs=[((8, 128), lambda i, j: (i, j))],
            out_specs=((8, 128), lambda i, j: (i, j)),
        ),
        (0, 1),  # blocks the grid never reaches keep the fill value
    ),
    (
        Case(
            "int_row_max", masked_max_int, ((64, 1), "int32"), _int_inputs(64, 128),
            grid=(4,), in_specs=[((16, 128), lambda i: (i, 0))],
            out_specs=((16, 1), lambda i: (i, 0)),
        ),
        (0,),
    ),
]  # fmt: skip


def _three_ways(case):
    args = case.inputs()
    kernel = case.minipallas().trace(*args)
    vectorized = as_tuple(case.minipallas()(*args))
    loops = compile(grid_program(kernel))(*args)
    upstream = as_tuple(case.upstream()(*args))
    for v, lo, up in zip(vectorized, loops, upstream, strict=True):
        assert_same_bits(v, np.asarray(up))
        assert_same_bits(lo, np.asarray(up))
    return kernel


@pytest.mark.parametrize(("case", "batched"), CASES, ids=lambda c: getattr(c, "name", ""))
def test_batched_axes_and_results_match_the_loops_and_upstream(case, batched):
    kernel = _three_ways(case)
    assert vectorized_grid_plan(kernel) == batched


EXPECTED_SUITE_PLANS = {
    "add": (0, 1),
    "batched_squeezed": (0, 1, 2),
    "transpose_blocks": (0, 1),
    "grid_ids": (0, 1),
    "staged_run_scoped": (0,),
    "chunked_loop": (0,),
    "masked_col_max": (1,),  # a float max of 4096 elements a point: YNNPACK's either way
    "row_sum": (0,),  # a float sum of 2048 elements a point: XLA's order written out
    "matmul": (0, 1),  # a float dot: YNNPACK's either way (passes/xla_cpu/exactness.py)
    "reversed_blocks": None,  # the map computes 3 - i: blocks are not one static slice
    "input_written": None,  # a later grid point reads what an earlier one wrote
    "clamped_block_index": None,  # more grid points than blocks: the last is revisited
    "whole_array": None,  # no grid
}


@pytest.mark.parametrize("name", sorted(EXPECTED_SUITE_PLANS))
def test_suite_kernels_batch_where_they_can(name):
    case = BY_NAME[name]
    kernel = case.minipallas().trace(*case.inputs())
    assert vectorized_grid_plan(kernel) == EXPECTED_SUITE_PLANS[name]
    program = vectorized_grid_program(kernel)
    assert (program is None) == (EXPECTED_SUITE_PLANS[name] is None)


def test_most_of_the_suite_runs_batched():
    batched = [c.name for c in KERNELS if vectorized_grid_plan(c.minipallas().trace(*c.inputs()))]
    assert len(batched) >= len(KERNELS) // 2, batched


def test_an_elementwise_kernel_becomes_one_loop_free_program():
    case = BY_NAME["add"]
    program = vectorized_grid_program(case.minipallas().trace(*case.inputs()))
    text = str(program)
    assert " for " not in text and "transpose" not in text
    assert "f32[8,8,2,128]" in text  # (blocks, block) pairs of the 64x256 arrays


FAST = ["softmax", "sum_and_max"]  # float maxima under 4096 elements a point
SPELLED = ["row_sum", "layer_norm_partial"]  # float row sums under 4096 elements a point


@pytest.mark.parametrize("name", SPELLED)
def test_small_float_row_sums_batch_with_upstreams_bits(name):
    """A row sum XLA keeps per point is batched with its order written out
    (passes/xla_cpu/exactness.py's ``spelled_tree``): bit for bit with the loop program and
    upstream."""
    case = BY_NAME[name]
    args = case.inputs()
    kernel = case.minipallas().trace(*args)
    assert vectorized_grid_plan(kernel) is not None
    got = as_tuple(case.minipallas()(*args))
    loop = compile(grid_program(kernel))(*args)
    for g, lo, up in zip(got, loop, as_tuple(case.upstream()(*args)), strict=True):
        assert_same_bits(g, lo)
        assert_same_bits(g, np.asarray(up))


@pytest.mark.parametrize("name", FAST)
def test_match_upstream_false_batches_float_reductions_and_dots_to_rounding(name):
    """The opt-out: the same grid batched with its float sums and dots, results within
    rounding of upstream's (float32 relative 1e-5; the bf16 matmul's f32 sums as well)."""
    case = BY_NAME[name]
    args = case.inputs()
    kernel = case.minipallas().trace(*args)
    assert vectorized_grid_plan(kernel) is None
    assert vectorized_grid_plan(kernel, exact=False) is not None
    got = as_tuple(case.minipallas(match_upstream=False)(*args))
    expected = as_tuple(case.upstream()(*args))
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, np.asarray(e), rtol=1e-5, atol=1e-5)


def accumulated_sum(ns, x_ref, o_ref):
    """A 1-D sum into one resident output block: the grid's only axis stays sequential."""

    @ns.when(ns.program_id(0) == 0)
    def _():
        o_ref[...] = ns.np.zeros(o_ref.shape, ns.np.float32)

    o_ref[...] += x_ref[...].sum(keepdims=True)


def accumulated_max(ns, x_ref, o_ref):
    """Row maxima of 8x1024 blocks (YNNPACK's either way, so batched in exact mode too),
    accumulated along j: the maxima are hoisted out of the j loop."""

    @ns.when(ns.program_id(1) == 0)
    def _():
        o_ref[...] = ns.np.full(o_ref.shape, -np.inf, ns.np.float32)

    o_ref[...] = ns.np.maximum(o_ref[...], x_ref[...].max(axis=1, keepdims=True))


HOISTING = [
    # (case, exact mode hoists, batched axes in exact mode, in fast mode)
    (
        Case(
            "accumulated_sum",
            accumulated_sum,
            ((1,), "float32"),
            inputs(normal(64 * 256)),
            grid=(64,),
            in_specs=[((256,), lambda i: (i,))],
            out_specs=((1,), lambda i: (0,)),
        ),
        True,  # a float sum of 256 elements a point: XLA's order written out, hoisted
        (),
        (),
    ),
    (
        Case(
            "accumulated_max",
            accumulated_max,
            ((16, 1), "float32"),
            inputs(normal(16, 4 * 1024)),
            grid=(2, 4),
            in_specs=[((8, 1024), lambda i, j: (i, j))],
            out_specs=((8, 1), lambda i, j: (i, 0)),
        ),
        True,
        (0,),
        (0,),
    ),
]


@pytest.mark.parametrize(
    ("case", "exact", "plan", "fast_plan"), HOISTING, ids=[h[0].name for h in HOISTING]
)
def test_stateless_reductions_are_hoisted_out_of_the_sequential_loop(case, exact, plan, fast_plan):
    """The body's part that reads only input blocks runs once for every grid point before the
    loop (passes/kernel/hoisting.py): bit for bit with the loops and upstream in exact mode,
    within rounding with match_upstream=False, where a grid with no batched axis gets a program."""
    from minipallas.kernels.programs.vectorized_grid import vectorized_grid_hoists

    args = case.inputs()
    kernel = _three_ways(case)
    assert vectorized_grid_hoists(kernel) == exact and vectorized_grid_plan(kernel) == plan
    assert vectorized_grid_hoists(kernel, exact=False)
    assert vectorized_grid_plan(kernel, exact=False) == fast_plan
    text = str(vectorized_grid_program(kernel, exact=False))
    assert "_pre_batched" in text and "_post_batched" in text
    got = as_tuple(case.minipallas(match_upstream=False)(*args))
    for g, e in zip(got, as_tuple(case.upstream()(*args)), strict=True):
        np.testing.assert_allclose(g, np.asarray(e), rtol=1e-5, atol=1e-4)


def test_hoisting_leaves_big_stateless_results_in_the_loop():
    """A blocked matmul's per-step dots would be 32 MiB for all points at 1024³: kept in the
    loop (hoisting.MAX_HOISTED_BYTES); at the suite's size (256 KiB) they are hoisted."""
    from minipallas.kernels.programs.vectorized_grid import vectorized_grid_hoists
    from minipallas.passes.kernel import hoisting

    case = BY_NAME["matmul"]
    kernel = case.minipallas().trace(*case.inputs())
    assert vectorized_grid_hoists(kernel)
    small = hoisting.MAX_HOISTED_BYTES
    try:
        hoisting.MAX_HOISTED_BYTES = 1024
        assert not vectorized_grid_hoists(kernel)
        assert vectorized_grid_plan(kernel) == (0, 1)  # still batched, the k loop as it was
    finally:
        hoisting.MAX_HOISTED_BYTES = small
