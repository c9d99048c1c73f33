"""Float max/min reductions that XLA:CPU hands to YNNPACK keep its bits in the interpreter:
NaNs do not propagate there (``ir/interpret/xla/extremes.py``). Each case compares with ``jax.jit``
of ``lax.reduce_max``/``reduce_min`` bit for bit, on inputs whose outcome does not depend on
the CPU's vector width or on how many threads XLA splits the work among."""

import jax
import numpy as np
import pytest

import minipallas as mp
from minipallas.ir import ArrayType, Builder, dtypes, params
from minipallas.ir.interpret.xla.extremes import offloaded


def reduction(name, x, axes):
    (v,) = params([ArrayType(x.shape, dtypes.canonicalize(x.dtype))])
    b = Builder()
    return b.function("f", [v], [b.create(name, [v], {"axes": axes}).result])


def assert_xlas_bits(name, x, axes):
    (got,) = mp.interpret(reduction(name, x, axes), x)
    want = np.asarray(jax.jit(lambda a: getattr(jax.lax, name)(a, axes))(x))
    kind = f"u{x.dtype.itemsize}"
    assert np.array_equal(got.view(kind), want.view(kind)), (got, want)


def with_nans(shape, density, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    x[rng.random(shape) < density] = np.nan
    return x


NAME = ["reduce_max", "reduce_min"]


@pytest.mark.parametrize("name", NAME)
@pytest.mark.parametrize(
    ("shape", "axes"),
    [((128, 128), (0,)), ((64, 256), (0,)), ((3, 40, 128), (1,)), ((7, 1024), (0,))],
)
@pytest.mark.parametrize("density", [0.01, 0.3])
def test_down_columns_groups_of_four_rows_drop_out_when_they_end_in_nan(name, shape, axes, density):
    assert_xlas_bits(name, with_nans(shape, density, 1), axes)


@pytest.mark.parametrize("name", NAME)
def test_past_four_rows_of_32768_elements_each_row_folds_alone(name):
    assert_xlas_bits(name, with_nans((3, 20000), 0.3, 2), (0,))


@pytest.mark.parametrize("name", NAME)
def test_along_a_row_a_nan_the_next_chunk_passes_is_dropped_and_a_last_one_drops_all(name):
    x = with_nans((2, 4096), 0.0, 3)
    x[0, 0] = x[1, -1] = np.nan
    (got,) = mp.interpret(reduction(name, x, (1,)), x)
    assert got[0] == (x[0, 1:].max() if name == "reduce_max" else x[0, 1:].min())
    assert got[1] == (-np.inf if name == "reduce_max" else np.inf)
    assert_xlas_bits(name, x, (1,))


@pytest.mark.parametrize("name", NAME)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("axes", [(0,), (1,), (0, 1)])
def test_half_floats_compare_sign_magnitude_bits(name, dtype, axes):
    """Random bit patterns: NaNs of both signs, infinities, zeros, subnormals."""
    bits = np.random.default_rng(4).integers(0, 1 << 16, (128, 128), dtype=np.uint16)
    assert_xlas_bits(name, bits.view(dtypes.to_numpy(dtype)), axes)


@pytest.mark.parametrize("name", NAME)
def test_a_reduction_xla_keeps_still_propagates_nan(name):
    x = with_nans((16, 128), 0.01, 5)
    assert not offloaded(x.shape, (0,))
    (got,) = mp.interpret(reduction(name, x, (0,)), x)
    want = np.asarray(jax.jit(lambda a: getattr(jax.lax, name)(a, (0,)))(x))
    assert np.isnan(got).any() and np.array_equal(got, want, equal_nan=True)
