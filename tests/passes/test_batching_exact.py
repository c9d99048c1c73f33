"""Exact mode's rule for float reductions and dots (passes/xla_cpu/exactness.py): what it
batches, what it refuses and why, and where ``broadcast_in_dim`` puts a batched scalar's axes.
The bits themselves are checked on compiled kernels in tests/kernels/test_batched_exact.py."""

import functools
import math

import numpy as np
import pytest

import minipallas as mp
import minipallas.numpy as mnp
from minipallas.ir.builder import Builder, params
from minipallas.ir.interpret import interpret
from minipallas.passes import batching
from minipallas.passes.batching import NotBatchable
from minipallas.passes.cleanup import cleanup
from minipallas.passes.discharge import discharge
from minipallas.passes.xla_cpu import XLA_CPU

# the batchings of the CPU path, with XLA:CPU's policy (its measured exactness classes)
batch = functools.partial(batching.batch, policy=XLA_CPU)


def _pure(f, *types):
    return cleanup(discharge(mp.trace(f, *types)))


def _t(*shape, dtype="float32"):
    return mp.ArrayType(shape, dtype)


ROWS = (0, None, None)  # row blocks batched along axis 0, in front


@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_a_reduction_of_4096_elements_a_point_batches_in_place(op):
    fn = _pure(lambda x: getattr(x, op)(axis=1), _t(8, 512))
    batched, (out,) = batch(fn, [ROWS], (16,))
    assert out == (0, None) and batched.result_types[0].shape == (16, 8)


@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_a_smaller_reduction_is_refused_naming_the_threshold(op):
    fn = _pure(lambda x: getattr(x, op)(axis=1), _t(8, 511))
    with pytest.raises(NotBatchable, match="fewer than 4096 elements a point") as e:
        batch(fn, [ROWS], (16,))
    assert e.value.op == f"reduce_{op}" and "exact=False" in str(e.value)
    batch(fn, [ROWS], (16,), exact=False)  # the opt-out still batches it


def test_a_sum_down_more_than_8_rows_is_refused_max_and_short_columns_batch():
    """YNNPACK on the AMD EPYC sums 128-row columns in another order batched."""
    down = _pure(lambda x: x.sum(axis=0), _t(128, 128))
    with pytest.raises(NotBatchable, match="down the columns"):
        batch(down, [ROWS], (4,))
    batch(_pure(lambda x: x.max(axis=0), _t(128, 128)), [ROWS], (4,))
    batch(_pure(lambda x: x.sum(axis=0), _t(8, 512)), [ROWS], (4,))


def test_a_reduction_to_one_number_is_refused_even_when_large():
    fn = _pure(lambda x: x.sum(), _t(64, 64))
    with pytest.raises(NotBatchable, match="to one number"):
        batch(fn, [ROWS], (4,))


def test_float_products_and_integer_sums_batch_at_any_size():
    for fn in (
        _pure(lambda x: mnp.prod(x, axis=1), _t(4, 8)),
        _pure(lambda x: x.sum(axis=1), _t(4, 8, dtype="int32")),
    ):
        _, (out,) = batch(fn, [ROWS], (3,))
        assert out == (0, None)


@pytest.mark.parametrize(
    "shapes, dtype",
    [(((128, 64), (64, 128)), "float32"), (((32, 32), (32, 128)), "bfloat16")],
)
def test_dots_of_ynnpacks_forms_batch_over_rows_and_columns(shapes, dtype):
    (a, b) = (_t(*s, dtype=dtype) for s in shapes)
    fn = _pure(lambda x, y: mnp.dot(x, y, preferred_element_type=mnp.float32), a, b)
    _, (out,) = batch(fn, [ROWS, (None, None, 1)], (2, 3))
    assert out == (0, None, 1, None)


def test_a_narrow_dot_batches_over_rows_not_columns():
    """YNNPACK sums a right side under 64 columns in another order once it is widened."""
    fn = _pure(lambda x, y: mnp.dot(x, y), _t(8, 512), _t(512, 8))
    batch(fn, [ROWS, (None, None)], (8,))
    with pytest.raises(NotBatchable, match="fewer than 64 columns"):
        batch(fn, [(None, None), (None, None, 0)], (8,))
    wide = _pure(lambda x, y: mnp.dot(x, y), _t(8, 512), _t(512, 64))
    batch(wide, [(None, None), (None, None, 0)], (8,))


def test_f32_q_at_k_transposed_batches_bf16_does_not():
    def scores(q, k):
        return mnp.dot(q, k.T, preferred_element_type=mnp.float32)

    f32 = _pure(scores, _t(128, 64), _t(128, 64))
    batch(f32, [ROWS, (1, None, None)], (2, 3))
    bf16 = _pure(scores, _t(128, 64, dtype="bfloat16"), _t(128, 64, dtype="bfloat16"))
    with pytest.raises(NotBatchable, match="transposed operand"):
        batch(bf16, [ROWS, (1, None, None)], (2, 3))


@pytest.mark.parametrize(
    "f, types, why",
    [
        (lambda x, y: mnp.dot(x.T, y), (_t(128, 128), _t(128, 128)), "transposed operand"),
        (lambda x, y: mnp.dot(x, y), (_t(1, 128), _t(128, 128)), "matrix-vector"),
        (lambda x, y: mnp.dot(x, y), (_t(128, 128), _t(128, 1)), "matrix-vector"),
        (
            lambda x, y: mnp.dot(x, y),
            (_t(16, 16, dtype="float16"), _t(16, 16, dtype="float16")),
            "only dots of f32 or bf16",
        ),
    ],
)
def test_other_dots_are_refused(f, types, why):
    fn = _pure(f, *types)
    with pytest.raises(NotBatchable, match=why) as e:
        batch(fn, [ROWS, (None, None)], (4,))
    assert e.value.op == "dot"


def _layer_norm_tail(x):
    """rsqrt of one value a row: 16 a point, which 256 batched points take past 4096."""
    var = (x * x).sum(axis=1, keepdims=True) / x.shape[1]
    return x * mnp.rsqrt(var + 1e-5)


def _rsqrt_sizes(fn):
    return [math.prod(op.result.type.shape) for op in fn.walk() if op.name == "rsqrt"]


def test_an_approximate_op_crossing_ynnpacks_threshold_next_to_a_reduction_runs_in_chunks():
    """Each chunk stays under YNNPACK's 4096 elements, so XLA rounds it as one point's."""
    fn = _pure(_layer_norm_tail, _t(16, 1024))
    assert _rsqrt_sizes(batch(fn, [ROWS], (255,))[0]) == [255 * 16]  # XLA's both ways
    assert _rsqrt_sizes(batch(fn, [ROWS], (256,))[0]) == [128 * 16, 128 * 16]
    assert _rsqrt_sizes(batch(fn, [ROWS], (1020,))[0]) == [255 * 16] * 4
    with pytest.raises(NotBatchable, match="YNNPACK graph.*even in 4 chunks") as e:
        batch(fn, [ROWS], (1021,))
    assert e.value.op == "rsqrt"


def test_chunks_give_every_point_its_own_values():
    fn = _pure(_layer_norm_tail, _t(16, 1024))
    batched, _ = batch(fn, [ROWS], (256,))
    x = np.random.default_rng(0).standard_normal((256, 16, 1024)).astype(np.float32)
    (got,) = interpret(batched, x)
    for point in (0, 127, 128, 255):
        (expected,) = interpret(fn, x[point])
        np.testing.assert_array_equal(got[point], expected)


def test_without_reductions_or_dots_approximate_ops_batch_at_any_size():
    """Nothing goes to YNNPACK, so XLA's tanh runs both ways (the masked tanh kernel)."""
    fn = _pure(lambda x: mnp.tanh(x), _t(1024))
    _, (out,) = batch(fn, [(0, None)], (977,))
    assert out == (0, None)


def test_a_batched_scalar_broadcasts_with_its_axes_leading():
    """``iota + program_id(0) * n`` meets the block (batch axis in front) without a transpose."""

    def body(i, x):
        index = mnp.broadcasted_iota(mnp.int32, (1024,), 0) + i * 1024
        return mnp.where(index < 10**6, mnp.tanh(x), 0.0)

    fn = _pure(body, _t(dtype="int32"), _t(1024))
    batched, (out,) = batch(fn, [(0,), (0, None)], (977,))
    assert out == (0, None) and "transpose" not in str(batched)


def test_trailing_batch_axes_stay_after_the_last_original_dimension():
    """A row reduction's result (rows, batch) broadcast back to (rows, cols) keeps the batch
    axis next to the rows, where the blocks in place have it."""
    b = Builder()
    (s,) = params([_t(8)])
    op = b.create("broadcast_in_dim", [s], {"shape": (8, 128), "dims": (0,)})
    fn = b.function("spread", [s], list(op.results))
    batched, (out,) = batch(fn, [(None, 0)], (4,))
    assert out == (None, 0, None) and batched.result_types[0].shape == (8, 4, 128)


def test_the_generic_policy_keeps_every_float_reduction_and_dot_per_point():
    """Without a backend's policy the pass knows nothing of YNNPACK: in exact mode every float
    reduction and dot is refused (a float sum XLA:CPU's policy admits included), an integer one
    is batched, and ``exact=False`` batches them all; XLA:CPU's facts live apart from the pass
    (``passes/xla_cpu``), which ``passes/batching`` never imports."""
    import pathlib

    fn = _pure(lambda x: x.sum(axis=1), _t(8, 1024))
    batch(fn, [ROWS], (16,))  # XLA:CPU keeps this one's bits (YNNPACK either way)
    with pytest.raises(NotBatchable, match="'generic' batching policy knows no backend"):
        batching.batch(fn, [ROWS], (16,))
    batching.batch(fn, [ROWS], (16,), exact=False)
    ints = _pure(lambda x: x.sum(axis=1), _t(8, 1024, dtype="int32"))
    batching.batch(ints, [ROWS], (16,))
    folder = pathlib.Path(batching.__file__).parent
    for path in folder.glob("*.py"):
        text = path.read_text()
        assert "xla_cpu import" not in text and "YNN_MIN_ELEMENTS" not in text, path.name
