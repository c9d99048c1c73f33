"""The front-end checks (``frontend_corpus.py``): each passes on minipallas as it is, and
each comparison has power: a program or kernel that differs the way a planted bug would
make it differ is reported."""

from dataclasses import replace

import numpy as np
import pytest

import minipallas.numpy as mnp
from minipallas.tools.corpora import frontend_checks as fc


@pytest.mark.parametrize("check", fc.CHECKS, ids=[c.name for c in fc.CHECKS])
def test_every_check_agrees(check):
    assert check.run() is None


def test_the_checks_are_named_once():
    names = [c.name for c in fc.CHECKS]
    assert len(set(names)) == len(names) >= 8


def test_pow_with_exponent_zero_computed_as_negative_is_reported():
    problem = fc.pow_check(lambda x, y: mnp.where(y <= 0, mnp.where(x == 1, 1, 0), x**y))
    assert problem is not None and problem.startswith("@int_pow output 0: compile at [0]: ")


def test_an_unclamped_negative_switch_index_is_reported():
    def last_branch_for_negative(i, x):
        return fc.three_way_switch(mnp.where(i < 0, 2, i), x)

    problem = fc.switch_check(last_branch_for_negative)
    assert problem is not None and problem.startswith("index -1: @three_way_switch output 0")


def test_a_window_start_clamped_one_past_the_last_is_reported():
    def shifted(i, idx, x_ref, o_ref):  # start 4 reads rows 5, 7, 9 instead of 4, 6, 8
        o_ref[...] = x_ref[fc.mp.ds(mnp.where(i == 4, 5, i), 3, 2), idx]

    problem = fc.window_check(shifted)
    assert problem is not None and problem.startswith("start 4: @gather_dynamic_window output 1")


def test_a_bf16_product_kept_in_f32_is_reported():
    def unrounded(a, b):
        return a.astype(mnp.float32) * b.astype(mnp.float32)

    problem = fc.bf16_rounding_check(unrounded)
    assert problem is not None and problem.startswith("@bf16_product_in_f32 output 0: compile at")


def test_a_kernel_reducing_another_axis_upstream_is_reported():
    def max_middle(ns, x, o):
        o[...] = ns.np.max(x[...], axis=1)

    kernel = fc.reduce_kernel(fc.sum_middle, 1)
    problem = fc.kernel_problem(kernel, batched=True, upstream=replace(kernel, body=max_middle))
    assert problem is not None and problem.startswith("cpu program differs from upstream at [")


def test_a_kernel_that_does_not_take_the_batched_grid_is_reported():
    def row_max(ns, x, o):  # a float max under 4096 elements a block stays on loops
        o[...] = ns.np.max(x[...], axis=1)

    (kernel, *_) = fc.float_sum_kernels(row_max)
    problem = fc.kernel_problem(kernel, batched=True)
    assert problem == "the grid was not batched, so the check does not reach the batching pass"


def test_a_float_row_sum_in_another_order_is_reported():
    """Upstream summing the rows of each block in reverse differs in the last bit (XLA:CPU's
    order follows the operand), which is the size of difference batched float sums show."""
    (kernel, *_) = fc.float_sum_kernels(fc.row_sum)

    def reversed_sum(ns, x, o):
        o[...] = ns.np.sum(x[...][:, ::-1], axis=1)

    problem = fc.kernel_problem(kernel, batched=False, upstream=replace(kernel, body=reversed_sum))
    assert problem is not None, "the reversed order happens to give the same bits"
    got, want = (float(s) for s in problem.split(": ")[1].split(" vs "))
    assert got != want and np.isclose(got, want, rtol=1e-5)


def test_sequential_grid_axes_visited_in_another_order_are_reported():
    def horner_column_major(ns, x, o):  # the same kernel with axes 1 and 2 swapped
        @ns.when((ns.program_id(1) == 0) & (ns.program_id(2) == 0))
        def _():
            o[...] = ns.np.zeros((1, 8), ns.np.int32)

        o[...] = o[...] * 3 + x[0, 0]

    kernel = fc.sequential_axes_kernel(fc.horner_over_two_axes)
    swapped = replace(kernel, grid=(2, 3, 2), body=horner_column_major,
                      x_block=((1, 1, 1, 8), lambda b, j, i: (b, i, j, 0)),
                      o_block=((1, 8), lambda b, j, i: (b, 0)))  # fmt: skip
    problem = fc.kernel_problem(kernel, batched=True, upstream=swapped)
    assert problem is not None and problem.startswith("cpu program differs from upstream at [")
