"""The semantic check without a GPU: the partially discharged body the Triton module is emitted
from, run over the grid by the reference interpreter as the GPU runs it (``simulate``), against
numpy and against the CPU path (``pallas_call(...)(*arrays)``, XLA)."""

import numpy as np
import pytest
from gpu_util import BY_NAME, KERNELS, lowered

from minipallas.lowering.gpu.simulate import simulate
from minipallas.tools.corpora.gpu_kernels import EXTRA, NUMPY, control_mix_call, masked_io_call

# Kernels whose simulation equals the CPU path bit for bit; the others differ by rounding only
# (transcendentals, sums in another order, XLA:CPU's own rewrites of float expressions). The
# order of an f32 dot's sum is XLA:CPU's and depends on the CPU (matmul's equals numpy's on an
# Intel Xeon, not on an AMD EPYC), so matmul is compared to rounding.
BITWISE = {
    "add", "add_partial_blocks", "bias_relu", "masked_col_max", "pick_rows",
    "bf16_gelu", "grid_ids", "transpose_blocks", "chunked_loop", "int_ops", "reversed_blocks",
    "input_written", "clamped_block_index", "compare_int8",
}  # fmt: skip


def _outputs(x):
    return tuple(np.asarray(o) for o in (x if isinstance(x, tuple) else (x,)))


def _check(got, want, bitwise):
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        if bitwise:
            np.testing.assert_array_equal(g, w)
        else:
            g64, w64 = g.astype(np.float64), w.astype(np.float64)
            np.testing.assert_allclose(g64, w64, rtol=2e-5, atol=2e-5, equal_nan=True)


@pytest.mark.parametrize("case", KERNELS, ids=lambda c: c.name)
def test_simulation_matches_the_cpu_path(case):
    args = case.inputs()
    got = simulate(lowered(case.name), *args)
    _check(got, _outputs(case.minipallas()(*args)), case.name in BITWISE)


@pytest.mark.parametrize("case", EXTRA, ids=lambda c: c.name)
def test_scratch_kernels_match_numpy_and_the_cpu_path(case):
    args = case.inputs()
    call = case.minipallas()
    got = simulate(call.lower(*args, target="gpu"), *args)
    _check(got, _outputs(call(*args)), bitwise=False)
    want = NUMPY[case.name](*args).astype(np.float32)
    np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-5)


REFERENCE = {
    "add": lambda x, y: x + y,
    "add_partial_blocks": lambda x, y: x + y,
    "scale_1d": lambda x: np.sin(x) * 2 + 1,
    "row_sum": lambda x: x.sum(1, keepdims=True),
    "matmul": lambda x, y: x @ y,
    "softmax": lambda x: (
        np.exp(x - x.max(1, keepdims=True))
        / np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True)
    ),
    "transpose_blocks": lambda x: x.T,
    "reversed_blocks": lambda x: np.concatenate([b - 1 for b in np.split(x, 4)[::-1]]),
    "sum_and_max": lambda x: (x.sum(1, keepdims=True), x.max(1, keepdims=True)),
    "layer_norm_partial": lambda x, g: (
        (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5) * g
    ),
    "masked_col_max": lambda x: x.max(0, keepdims=True),
    "chunked_loop": lambda x: np.concatenate(
        [np.cumsum(b.reshape(4, 8, 128), 0).reshape(32, 128) for b in np.split(x, 2)]
    ),
}


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_simulation_matches_numpy(name):
    args = BY_NAME[name].inputs()
    got = simulate(lowered(name), *args)
    want = _outputs(REFERENCE[name](*args))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


def test_masked_load_and_store_lanes():
    """Lanes past ``limit`` read ``other``; odd lanes are not written (they keep the output
    buffer's garbage, NaN here as on the CPU path); lanes past the array do not exist."""
    x = np.arange(100, dtype=np.float32)
    call = masked_io_call()
    (got,) = simulate(call.lower(x, target="gpu"), x)
    np.testing.assert_array_equal(got, call(x))
    cols = np.arange(100) % 64
    want = np.where(cols < 40, x, -1.0) * 2
    np.testing.assert_array_equal(got[::2], want[::2])


def test_looped_axes_carry_scratch_and_launched_axes_start_it_fresh():
    """matmul: k is looped, the scratch accumulator starts fresh in each (i, j) program."""
    low = lowered("matmul")
    assert low.schedule.launched == (0, 1) and low.schedule.looped == (2,)
    x, y = BY_NAME["matmul"].inputs()
    (got,) = simulate(low, x, y)
    np.testing.assert_allclose(got, x @ y, rtol=1e-5, atol=1e-4)


def test_while_switch_and_partial_scratch_writes_match_the_cpu_path():
    call = control_mix_call()
    x = np.random.default_rng(0).standard_normal((32, 128), dtype=np.float32)
    low = call.lower(x, target="gpu")
    text = low.as_text()
    assert "scf.while" in text and text.count("scf.if") == 2
    assert "tt.gather" in text and "arith.select" in text  # scratch windows in registers
    np.testing.assert_array_equal(simulate(low, x)[0], call(x))
