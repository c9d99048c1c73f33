"""Unrolling short sequential grid loops (minipallas/kernels/programs/unrolling.py): which
loops unroll, and the unrolled programs give upstream interpret mode's bits."""

import numpy as np
import pytest
from kernel_helpers import assert_same_bits

import minipallas as mp
from bench.realistic_kernels import realistic_cases
from minipallas.frontend.tracing import trace
from minipallas.kernels.programs import unrolling
from minipallas.kernels.programs.vectorized_grid import vectorized_grid_program
from minipallas.tools.corpora.suite import Case, inputs, normal


def _dot_and_add(x, y):
    return mp.numpy.dot(x, y) + 1.0


DOT = trace(_dot_and_add, mp.ArrayType((64, 32), "float32"), mp.ArrayType((32, 16), "float32"))


def test_a_dot_counts_its_multiply_adds_and_other_ops_their_elements():
    dot_work = 64 * 16 * 32
    others = unrolling.step_work(DOT) - dot_work
    assert 64 * 16 <= others <= 3 * 64 * 16  # the add, its broadcast constant


@pytest.mark.parametrize("work, unroll", [(1 << 24, unrolling.UNROLL), (1 << 12, 1)])
def test_a_step_with_a_dot_unrolls_when_it_does_much_work(monkeypatch, work, unroll):
    monkeypatch.setattr(unrolling, "step_work", lambda fn: work)
    assert unrolling.unroll(DOT) == unroll


def test_a_step_of_elementwise_ops_alone_unrolls_whatever_its_size():
    adds = trace(lambda x: x + 1.0, mp.ArrayType((8, 128), "float32"))
    assert unrolling.unroll(adds) == unrolling.UNROLL
    assert unrolling.unroll(DOT) == 1  # a small dot: its loop stays rolled


def _loops(fn):
    return [op.name for f in (fn, *fn.callees()) for op in f.walk() if op.name in ("for", "while")]


CASES = {c.name: c for c in realistic_cases()}


@pytest.mark.parametrize(
    "name, unrolled",
    [
        ("matmul_1024", True),
        ("flash_attention", True),
        ("matmul_small", True),
        ("reduce_8k", True),
    ],
)
def test_the_realistic_kernels_unroll_as_their_steps_warrant_with_upstreams_bits(name, unrolled):
    """The 1024³ matmul's 8 k-steps unroll whole, flash attention's 16 key steps 8 a trip,
    the small matmul's 3 k-steps whole once their dots are hoisted (adds alone), and the
    8-step sum's too once its block sums are (XLA's order written out); all give upstream's
    bits."""
    case = CASES[name]
    args = case.inputs()
    program = vectorized_grid_program(case.minipallas().trace(*args))
    if unrolled:
        steps = case.grid[-1]  # the sequential axis
        assert program is not None and len(_loops(program)) == (steps > unrolling.UNROLL)
    else:  # its loop program, or a vectorized one with its loop
        assert program is None or _loops(program)
    assert_same_bits(case.minipallas()(*args), np.asarray(case.upstream()(*args)))


def shifted_and_back(ns, x_ref, o_ref):
    """Adds its step's index along axis 1 and takes 1 away: at step 1, ``(x + 1.0) - 1.0``,
    which rounds twice."""
    j = ns.program_id(1)

    @ns.when(j == 0)
    def _():
        o_ref[...] = ns.np.zeros(o_ref.shape, ns.np.float32)

    o_ref[...] += (x_ref[...] + j.astype(ns.np.float32)) - 1.0


def test_an_unrolled_steps_index_is_not_folded_into_float_arithmetic():
    """Axis 0 batched, axis 1's three steps unrolled: step 1's index is then the constant 1,
    and XLA would fold ``(x + 1.0) - 1.0`` to ``x``, where upstream's loop index is a loop
    variable and upstream rounds twice. The index reaches the body through an optimization
    barrier: upstream's bits (found by ``make fuzz-kernels``, seed 7, kernel 1092)."""
    case = Case(
        "shifted_and_back",
        shifted_and_back,
        ((16, 128), "float32"),
        inputs(normal(16, 384)),
        grid=(2, 3),
        in_specs=[((8, 128), lambda i, j: (i, j))],
        out_specs=((8, 128), lambda i, j: (i, 0)),
    )
    args = case.inputs()
    program = vectorized_grid_program(case.minipallas().trace(*args))
    assert program is not None and not _loops(program)  # axis 1's 3 steps unrolled
    assert_same_bits(case.minipallas()(*args), np.asarray(case.upstream()(*args)))
