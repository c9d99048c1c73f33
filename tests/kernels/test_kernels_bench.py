"""bench/benchmarks/kernels_bench.py runs at the suite's sizes and prints one row per kernel; its
jnp equivalents compute what the kernels compute, and its resized kernels trace."""

import jax.numpy as jnp
import numpy as np
import pytest
from kernel_helpers import assert_same_bits

from bench.benchmarks import kernels_bench
from minipallas.tools.corpora.suite import KERNELS

SMALL = [c for c in KERNELS if c.kernel.__name__ in kernels_bench.REFERENCES]


def test_bench_prints_a_row_per_kernel(capsys):
    rows, emit_rows, first_rows, goals = kernels_bench.main(
        ["--small", "--repeat", "1", "--kernels", "add,softmax"]
    )
    out = capsys.readouterr().out
    assert [r[0] for r in rows] == ["add", "softmax"] == [r[0] for r in emit_rows]
    assert [r[0] for r in first_rows] == ["add", "softmax"] and "first-call latency" in out
    assert all(float(cell) > 0 for row in first_rows for cell in row[1:])
    assert goals == []  # the suite's own kernels are not issue 13's six
    assert "CPU run time" in out and "emission latency" in out and "never slower" in out
    assert "batched kernels within 2x of jax.jit" in out and "per-block kernels" in out
    assert [r[2] for r in rows] == ["0,1", "-"]  # add is batched; softmax sums floats: loops
    assert [r[8] for r in rows] == ["0,1", "0"]  # match_upstream=False batches softmax too
    for row in rows:  # times are positive; ratios print rounded, so a slow sample may read 0.0
        assert all(float(cell) > 0 for cell in (*row[3:6], row[9]))
        assert all(float(cell) >= 0 for cell in (*row[6:8], row[10]))


@pytest.mark.parametrize("case", SMALL, ids=lambda c: c.name)
def test_the_jnp_equivalents_compute_what_the_kernels_compute(case):
    args = case.inputs()
    expected = np.asarray(kernels_bench.reference(case)(jnp, *args), np.float32)
    got = np.asarray(case.minipallas()(*args), np.float32)
    np.testing.assert_allclose(got, expected, rtol=2e-2, atol=1e-2)


def test_the_resized_kernels_trace_and_cover_their_arrays():
    cases = kernels_bench.bench_cases()
    assert len(cases) == 10
    for case in cases:
        args = case.inputs()
        assert max(a.size for a in args) >= 2**18
        kernel = case.minipallas().trace(*args)
        for spec in (*kernel.in_specs, *kernel.out_specs):
            blocks = [1 if b is None else b for b in spec.block_shape]
            assert all(b <= n for b, n in zip(blocks, spec.array.shape, strict=True))


@pytest.mark.parametrize(
    "name", ["add_256x512", "bias_relu", "transpose_blocks", "batched_squeezed"]
)
def test_the_batched_kernels_at_bench_size_equal_upstream_bit_for_bit(name):
    """At bench size the batched program's arrays are large (a million elements): it still
    gives upstream interpret mode's bits."""
    (case,) = [c for c in kernels_bench.bench_cases() if c.name == name]
    args = case.inputs()
    assert kernels_bench.batched_axes(case) != "-"
    assert_same_bits(case.minipallas()(*args), np.asarray(case.upstream()(*args)))


@pytest.mark.parametrize("case", kernels_bench.realistic_cases(), ids=lambda c: c.name)
def test_the_realistic_kernels_compute_their_jnp_equivalents(case):
    """The six kernels of issue 13's speed table, at bench size, against their jnp versions
    (both modes; float sums in another order, hence the tolerance)."""
    args = case.inputs()
    expected = np.asarray(kernels_bench.reference(case)(jnp, *args), np.float32)
    for match_upstream in (True, False):
        got = np.asarray(case.minipallas(match_upstream=match_upstream)(*args), np.float32)
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=2e-3)


def test_the_goal_lines_name_the_worst_kernel_and_what_10x_upstream_would_take():
    """Issue 13's goals from made-up times: each line names the kernel furthest from it, and a
    kernel whose upstream interpret is itself within 10x of jit gets the speed 10x would need."""
    times = {
        "a": (512, {"minipallas": 3.0, "fast": 2.0, "upstream": 300.0, "jit": 2.0}),
        "b": (256, {"minipallas": 25.0, "fast": 22.0, "upstream": 40.0, "jit": 10.0}),
        "c": (4, {"minipallas": 1.0, "fast": 1.0, "upstream": 1.0, "jit": 1.0}),
    }
    lines = kernels_bench.goal_lines(times)
    assert lines[0] == "default mode within 2.0x of jax.jit: False (worst b, 2.50x)"
    assert lines[1] == "match_upstream=False within 1.3x of jax.jit: False (worst b, 2.20x)"
    assert lines[2] == (
        "default mode at least 10x faster than upstream interpret on 64+ steps: False "
        "(worst b, 1.6x)"
    )  # c has 4 steps: not counted
    assert lines[3:] == [
        "  b: upstream interpret is only 4.0x slower than jax.jit, so 10x faster than upstream "
        "means 2.5x faster than jit (minipallas is 2.50x jit)"
    ]
    assert kernels_bench.goal_lines({}) == []
