"""Fast mode sums a sequential grid axis that only accumulates (kernels/programs/accumulation.py).

Integer kernels must give the loop program's and upstream's bits (integer sums do not depend
on their order); float kernels agree to rounding: a sum of n terms within n·eps·Σ|terms|.
"""

import numpy as np
import pytest
from kernel_helpers import as_tuple, assert_same_bits

from minipallas.kernels.programs.accumulation import accumulated_program
from minipallas.kernels.programs.grid import grid_program
from minipallas.lowering.runtime.compiled import compile
from minipallas.tools.corpora.suite import BY_NAME, Case


def ints(*shape):
    return lambda rng: rng.integers(-1000, 1000, shape, dtype=np.int32)


def reset_at(step):
    """Row sums along axis 1 that start over at ``step``: only the later blocks count."""

    def kernel(ns, x_ref, o_ref):
        @ns.when(ns.program_id(1) == step)
        def _():
            o_ref[...] = ns.np.zeros(o_ref.shape, ns.np.int32)

        o_ref[...] += x_ref[...].sum(axis=1, keepdims=True)

    return kernel


def scratch_then_copy(ns, x_ref, y_ref, o_ref, acc_ref):
    """An integer blocked matmul: scratch reset at the first k, summed, copied at the last."""
    k = ns.program_id(2)

    @ns.when(k == 0)
    def _():
        acc_ref[...] = ns.np.zeros(acc_ref.shape, ns.np.int32)

    acc_ref[...] += ns.np.dot(x_ref[...], y_ref[...], preferred_element_type=ns.np.int32)

    @ns.when(k == ns.num_programs(2) - 1)
    def _():
        o_ref[...] = acc_ref[...]


def onto_the_input(ns, x_ref, start_ref, o_ref):
    """No reset: the output is aliased to ``start`` and gathers the row blocks onto it."""
    o_ref[...] += x_ref[...]


def doubling(ns, x_ref, o_ref):
    """Not a sum: each step doubles what the earlier ones left."""

    @ns.when(ns.program_id(0) == 0)
    def _():
        o_ref[...] = ns.np.zeros(o_ref.shape, ns.np.int32)

    o_ref[...] = o_ref[...] * 2 + x_ref[...]


def row_blocks(kernel, name):
    return Case(
        name, kernel, ((16, 1), "int32"), lambda rng: (ints(16, 512)(rng),), grid=(2, 4),
        in_specs=[((8, 128), lambda i, j: (i, j))], out_specs=((8, 1), lambda i, j: (i, 0)),
    )  # fmt: skip


INT_MATMUL = Case(
    "int_matmul", scratch_then_copy, ((64, 64), "int32"),
    lambda rng: (ints(64, 128)(rng), ints(128, 64)(rng)), grid=(2, 2, 4),
    in_specs=[((32, 32), lambda i, j, k: (i, k)), ((32, 32), lambda i, j, k: (k, j))],
    out_specs=((32, 32), lambda i, j, k: (i, j)), scratch=(((32, 32), "int32"),),
)  # fmt: skip
ALIASED = Case(
    "onto_the_input", onto_the_input, ((8, 128), "int32"),
    lambda rng: (ints(32, 128)(rng), ints(8, 128)(rng)), grid=(4,),
    in_specs=[((8, 128), lambda i: (i, 0)), ((8, 128), lambda i: (0, 0))],
    out_specs=((8, 128), lambda i: (0, 0)),
)  # fmt: skip
INTEGER = [
    (row_blocks(reset_at(0), "reset_at_0"), {}),
    (row_blocks(reset_at(2), "reset_at_2"), {}),
    (INT_MATMUL, {}),
    (ALIASED, {"input_output_aliases": {1: 0}}),
]


@pytest.mark.parametrize(("case", "options"), INTEGER, ids=[c.name for c, _ in INTEGER])
def test_integer_accumulations_summed_at_once_keep_every_bit(case, options):
    """Resets anywhere on the axis, scratch copied out at the last step, an output aliased to
    an input: the summed program's bits are the loops' and upstream's."""
    args = case.inputs()
    call = case.minipallas(match_upstream=False, **options)
    kernel = call.trace(*args)
    summed = accumulated_program(kernel)
    assert summed is not None
    assert " for " not in str(summed)  # no loop over the axis is left
    upstream = as_tuple(case.upstream(**options)(*args))
    loops = compile(grid_program(kernel))(*args)
    for got, lo, up in zip(as_tuple(call(*args)), loops, upstream, strict=True):
        assert_same_bits(got, np.asarray(up))
        assert_same_bits(lo, np.asarray(up))


def test_a_blocked_matmul_becomes_one_dot_within_rounding():
    """The k axis's dots contract into one dot over all of k: ``x @ y`` to rounding."""
    case = BY_NAME["matmul"]
    x, y = case.inputs()
    kernel = case.minipallas(match_upstream=False).trace(x, y)
    text = str(accumulated_program(kernel))
    main = text[text.index(f"func @{kernel.name}_grid") :]
    assert main.count(" = dot ") == 1 and " for " not in text
    (got,) = as_tuple(case.minipallas(match_upstream=False)(x, y))
    exact = x.astype(np.float64) @ y.astype(np.float64)
    bound = x.shape[1] * np.finfo(np.float32).eps * (np.abs(x) @ np.abs(y))
    assert np.all(np.abs(got - exact) <= bound)


@pytest.mark.parametrize("name", ["row_sum", "padding_visible"])
def test_float_reductions_summed_at_once_are_within_rounding(name):
    """A resident output summed over its row blocks, partial blocks' NaN padding included."""
    case = BY_NAME[name]
    args = case.inputs()
    kernel = case.minipallas(match_upstream=False).trace(*args)
    assert accumulated_program(kernel) is not None
    (got,) = as_tuple(case.minipallas(match_upstream=False)(*args))
    (expected,) = as_tuple(case.upstream()(*args))
    np.testing.assert_allclose(got, np.asarray(expected), rtol=1e-5, atol=1e-4)


def test_a_step_that_is_not_a_sum_keeps_the_loops():
    case = Case(
        "doubling", doubling, ((8, 128), "int32"), lambda rng: (ints(32, 128)(rng),),
        grid=(4,), in_specs=[((8, 128), lambda i: (i, 0))], out_specs=((8, 128), lambda i: (0, 0)),
    )  # fmt: skip
    args = case.inputs()
    call = case.minipallas(match_upstream=False)
    assert accumulated_program(call.trace(*args)) is None
    (got,) = as_tuple(call(*args))
    assert_same_bits(got, np.asarray(as_tuple(case.upstream()(*args))[0]))


def random_accumulation(rng):
    """An accumulation over row blocks: into scratch (reset at the first step, perhaps again
    at a random one, copied out at a random step) or into the output itself (reset at a
    random step); one of three terms. -1: never."""
    n = 4
    into_scratch = bool(rng.integers(2))
    reset, again, copy = (int(rng.integers(-1, n)) for _ in range(3))
    term = int(rng.integers(3))

    def kernel(ns, x_ref, y_ref, o_ref, *scratch):
        k = ns.program_id(1)
        acc = scratch[0] if into_scratch else o_ref
        for step in (0, again) if into_scratch else (reset,):

            @ns.when(k == step)
            def _():
                acc[...] = ns.np.full(acc.shape, 7, ns.np.int32)

        x = x_ref[...]
        terms = [
            x * 3 + k,
            ns.np.broadcast_to(x.sum(axis=1, keepdims=True), acc.shape),
            ns.np.dot(x, y_ref[...], preferred_element_type=ns.np.int32),
        ]
        acc[...] += terms[term]
        if into_scratch:

            @ns.when(k == copy)
            def _():
                o_ref[...] = acc[...]

    where = f"scratch_again{again}_copy{copy}" if into_scratch else f"output_reset{reset}"
    return Case(
        f"{where}_term{term}", kernel, ((16, 128), "int32"),
        lambda rng: (ints(16, 128 * n)(rng), ints(128, 128)(rng)), grid=(2, n),
        in_specs=[((8, 128), lambda i, j: (i, j)), ((128, 128), lambda i, j: (0, 0))],
        out_specs=((8, 128), lambda i, j: (i, 0)),
        scratch=(((8, 128), "int32"),) if into_scratch else (),
    )  # fmt: skip


@pytest.mark.parametrize("seed", range(10))
def test_random_integer_accumulations_match_the_loops(seed):
    """The summed program gives the loop program's bits."""
    case = random_accumulation(np.random.default_rng(seed))
    args = case.inputs()
    kernel = case.minipallas().trace(*args)
    summed = accumulated_program(kernel)
    assert summed is not None, case.name
    for got, lo in zip(compile(summed)(*args), compile(grid_program(kernel))(*args), strict=True):
        assert_same_bits(got, lo)
