"""``passes.batching``: a pure function over batch axes, checked point by point.

Property: for a random program (discharged and cleaned, so pure), random batch sizes and a
random layout per parameter (batched or not; batch axes anywhere among its dimensions), the
batched program's result at every batch point equals the original program run on that point's
slices of the arguments, bit for bit (reference interpreter); every batched program passes
the verifier. Programs with a construct ``batch`` refuses are skipped, after checking that the
refusal names an op.
"""

import functools
import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import minipallas as mp
import minipallas.numpy as mnp
from minipallas.ir.interpret import interpret
from minipallas.ir.verifier import verify
from minipallas.passes import batching
from minipallas.passes.batching import NotBatchable, axes, leading
from minipallas.passes.cleanup import cleanup
from minipallas.passes.discharge import discharge
from minipallas.passes.xla_cpu import XLA_CPU
from minipallas.tools.generate import programs, random_inputs
from minipallas.tools.generate.check import same_bits

# the batchings of the CPU path, with XLA:CPU's policy (its measured exactness classes)
batch = functools.partial(batching.batch, policy=XLA_CPU)

F32 = mp.ArrayType((8, 128), "float32")

# ----- the property -----


def _layout(draw, rank, n_axes):
    """The original dims in order, with a random subset of the batch axes placed among them."""
    chosen = draw(st.lists(st.integers(0, n_axes - 1), unique=True, max_size=n_axes))
    layout = [None] * rank
    for a in chosen:
        layout.insert(draw(st.integers(0, len(layout))), a)
    return tuple(layout)


def _args(fn, layouts, sizes, seed):
    """Per parameter, values that differ along its batch axes (and only those)."""
    args = []
    for k, (param, layout) in enumerate(zip(fn.params, layouts, strict=True)):
        present = [d for d in layout if d is not None]
        points = list(itertools.product(*(range(sizes[a]) for a in present)))
        values = [random_inputs(fn, seed=seed + 7919 * n)[k] for n in range(len(points))]
        stacked = np.stack(values).reshape((*(sizes[a] for a in present), *param.type.shape))
        where = [i for i, d in enumerate(layout) if d is not None]
        args.append(
            np.moveaxis(stacked, list(range(len(present))), where) if present else values[0]
        )
    return args


def _at(value, layout, point):
    """The slice of a value in ``layout`` at the batch point ``point``."""
    return value[tuple(slice(None) if d is None else point[d] for d in layout)]


def _batched_program_matches_pointwise(fn, layouts, sizes, seed, gathers=False):
    try:
        batched, out_layouts = batch(fn, layouts, sizes, gathers=gathers)
    except NotBatchable as e:
        assert e.op, "a refusal names the op"
        return False
    verify(batched)
    args = _args(fn, layouts, sizes, seed)
    with np.errstate(all="ignore"):
        got = interpret(batched, *[np.array(a) for a in args])
        for point in itertools.product(*map(range, sizes)):
            expected = interpret(
                fn, *[_at(a, lay, point) for a, lay in zip(args, layouts, strict=True)]
            )
            for g, e, lay in zip(got, expected, out_layouts, strict=True):
                assert same_bits(_at(np.asarray(g), lay, point), e), f"point {point}"
    return True


@settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data())
def test_the_batched_program_is_the_program_at_every_point(data):
    fn = cleanup(discharge(data.draw(programs(max_stmts=14, scoped=False))))
    sizes = tuple(data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=2)))
    layouts = [
        _layout(data.draw, p.type.ndim, len(sizes)) if data.draw(st.booleans()) else
        (None,) * p.type.ndim
        for p in fn.params
    ]  # fmt: skip
    note(str(fn))
    gathers = data.draw(st.booleans())
    note(f"sizes={sizes} layouts={layouts} gathers={gathers}")
    seed = data.draw(st.integers(0, 2**16))
    _batched_program_matches_pointwise(fn, layouts, sizes, seed, gathers)


# ----- what each rule does -----


def _pure(f, *types):
    return cleanup(discharge(mp.trace(f, *types)))


def test_elementwise_ops_keep_the_layout_they_are_given():
    """Blocks in memory order stay there: no transpose, the result in the input's layout."""
    fn = _pure(lambda x, y: mnp.tanh(x) * 2.0 + y, F32, F32)
    layout = (0, None, 1, None)
    batched, (out,) = batch(fn, [layout, layout], (4, 2))
    assert out == layout
    assert "transpose" not in str(batched)
    assert batched.result_types[0] == mp.ArrayType((4, 8, 2, 128), "float32")


def test_operands_are_moved_to_the_richest_layout_and_broadcast():
    row = mp.ArrayType((1, 128), "float32")
    fn = _pure(lambda x, b: x + mnp.broadcast_to(b, (8, 128)), F32, row)
    batched, (out,) = batch(fn, [(0, None, 1, None), (None, 1, None)], (4, 2))
    assert out == (0, None, 1, None)
    text = str(batched)
    assert "broadcast_in_dim" in text


def test_transpose_keeps_the_batch_axes_in_place():
    fn = _pure(lambda x: x.T, F32)
    batched, (out,) = batch(fn, [(0, None, 1, None)], (4, 2))
    assert out == (0, None, 1, None)
    assert batched.result_types[0].shape == (4, 128, 2, 8)
    assert "permutation (0, 3, 2, 1)" in str(batched)


def test_other_shape_ops_take_the_batch_axes_in_front():
    fn = _pure(lambda x: x.reshape(16, 64), F32)
    batched, (out,) = batch(fn, [(None, 0, None)], (3,))
    assert out == leading((3,), 2) == (0, None, None)
    assert batched.result_types[0].shape == (3, 16, 64)


def test_float_reductions_and_dots_are_refused_integer_ones_batch():
    """XLA rounds a float sum of a small block differently at a batched shape (see
    test_batched_exact.py for the ones it keeps); integer sums are exact."""
    with pytest.raises(NotBatchable, match="fewer than 4096 elements a point") as e:
        batch(_pure(lambda x: x.sum(axis=0), F32), [(0, None, None)], (2,))
    assert e.value.op == "reduce_sum" and "test_batching.py" in str(e.value.loc)
    i32 = mp.ArrayType((8, 128), "int32")
    batched, (out,) = batch(_pure(lambda x: x.sum(axis=1), i32), [(None, 0, None)], (2,))
    assert out == (None, 0) and batched.result_types[0].shape == (8, 2)  # axes stay put


@pytest.mark.parametrize(
    ("shape", "sizes"),
    [
        ((8, 128), (3,)),
        ((8, 64), (3,)),
        ((4, 96), (5,)),
        ((2, 8, 128), (4,)),
        ((1024,), (8,)),
        ((2, 1024), (4, 2)),
    ],  # fmt: skip
)
def test_a_small_float_row_sum_is_batched_in_xlas_order_written_out(shape, sizes):
    """A sum over the last axis that XLA keeps per point (windows of 32) becomes slices and
    adds in that order, no reduce for XLA to reorder: every point's bits, compiled, as the
    point's own program gives them, -0 sums included (0 + -0 is +0)."""
    fn = _pure(lambda x: x.sum(axis=len(shape) - 1), mp.ArrayType(shape, "float32"))
    layout = (*range(len(sizes)), *(None,) * len(shape))
    batched, (out,) = batch(fn, [layout], sizes)
    assert out == (*range(len(sizes)), *(None,) * (len(shape) - 1))
    names = {op.name for op in batched.walk()}
    assert "reduce_sum" not in names and {"slice", "add", "select"} <= names
    rng = np.random.default_rng(0)
    x = rng.standard_normal((*sizes, *shape)).astype(np.float32)
    x.reshape(-1, shape[-1])[0] = -0.0  # a row of -0: its sum is +0, as XLA's 0 + -0 + ...
    x.reshape(-1, shape[-1])[-1] *= np.float32(1e4)
    (got,) = mp.compile(batched)(x)
    one = mp.compile(fn)
    for point in np.ndindex(*sizes):
        (expected,) = one(x[point])
        np.testing.assert_array_equal(got[point].view(np.uint32), expected.view(np.uint32))


def _close_at_every_point(fn, layouts, sizes, batched, out_layouts):
    args = [np.random.default_rng(k).standard_normal(batched.param_types[k].shape)
            .astype(np.float32) for k in range(len(layouts))]  # fmt: skip
    got = interpret(batched, *args)
    for point in itertools.product(*map(range, sizes)):
        expected = interpret(
            fn, *[_at(a, lay, point) for a, lay in zip(args, layouts, strict=True)]
        )
        for g, e, lay in zip(got, expected, out_layouts, strict=True):
            np.testing.assert_allclose(_at(np.asarray(g), lay, point), e, rtol=1e-5, atol=1e-5)


def test_inexact_batching_takes_float_reductions_and_dots_as_they_lie():
    """``exact=False``: a row sum reduces where the rows lie; a dot's batch axes fold into its
    rows (left side only) and columns (right side only), leaving one 2-D dot."""
    fn = _pure(lambda x: x.sum(axis=1), F32)
    batched, outs = batch(fn, [(0, None, None)], (3,), exact=False)
    assert outs == ((0, None),)
    _close_at_every_point(fn, [(0, None, None)], (3,), batched, outs)
    w = mp.ArrayType((128, 16), "float32")
    fn = _pure(lambda x, y: mnp.dot(x, y), F32, w)
    layouts = [(0, None, None), (None, None, 1)]
    batched, outs = batch(fn, layouts, (2, 3), exact=False)
    assert outs == ((0, None, 1, None),)
    assert (
        "dot %" in str(batched) and "f32[16,128]" in str(batched) and "f32[128,48]" in str(batched)
    )
    _close_at_every_point(fn, layouts, (2, 3), batched, outs)


def test_integer_dots_batch_exactly_with_shared_axes_as_batch_dims():
    i32 = mp.ArrayType((4, 8), "int32")
    fn = _pure(lambda x, y: mnp.dot(x, y.T), i32, i32)
    layouts = [(0, None, 1, None), (None, 1, None)]
    batched, outs = batch(fn, layouts, (2, 3))
    assert outs == ((1, 0, None, None),)  # axis 1 on both sides batches; axis 0 stacks rows
    assert _batched_program_matches_pointwise(fn, layouts, (2, 3), seed=5)


def test_a_dynamic_index_that_differs_between_points_is_refused():
    idx = mp.ArrayType((), "int32")
    fn = _pure(lambda x, i: x[mp.ds(i, 2), :], F32, idx)
    with pytest.raises(NotBatchable, match="dynamic index differs") as e:
        batch(fn, [(None, None), (0,)], (3,))
    assert e.value.op == "dynamic_slice"
    batched, (out,) = batch(fn, [(0, None, None), ()], (3,))  # the same index everywhere
    assert out == (0, None, None)


IDX = mp.ArrayType((), "int32")
ROWS = mp.ArrayType((6, 128), "float32")


def _two_windows(x, i):
    """An ``Int`` dimension (dropped) and a strided slice, both at a traced start."""
    return x[mp.ds(i, 2), 5], x[i, mp.ds(3, 4, stride=3)]


@pytest.mark.parametrize(
    "layouts, sizes",
    [([(None, None), (0,)], (5,)), ([(None, 0, None), (0,)], (5,)),
     ([(1, None, None), (0,)], (4, 3)), ([(None, None), (1,)], (2, 5))],
)  # fmt: skip
def test_with_gathers_a_read_at_each_points_own_index_is_one_gather(layouts, sizes):
    fn = _pure(_two_windows, ROWS, IDX)
    with pytest.raises(NotBatchable, match="gathers=True"):
        batch(fn, layouts, sizes)
    batched, _ = batch(fn, layouts, sizes, gathers=True)
    assert "dynamic_slice" not in str(batched) and str(batched).count("gather") == 2
    assert _batched_program_matches_pointwise(fn, layouts, sizes, seed=1, gathers=True)


def test_gathered_starts_are_clamped_as_dynamic_slice_clamps_them():
    fn = _pure(_two_windows, ROWS, IDX)
    batched, _ = batch(fn, [(None, None), (0,)], (5,), gathers=True)
    x = np.random.default_rng(4).standard_normal((6, 128)).astype(np.float32)
    i = np.array([-2, 0, 3, 5, 9], np.int32)  # -2 clamps to 0; 5 and 9 to 4 (rows) and 5
    got = interpret(batched, x, i)
    for p in range(5):
        for g, e in zip(got, interpret(fn, x, i[p]), strict=True):
            assert same_bits(g[p], e)
    assert not same_bits(got[0][0], got[0][2])


def test_with_gathers_a_write_at_each_points_own_index_is_one_scatter():
    """Each point writes its own row of an unbatched buffer: the buffer becomes one copy per
    point, each holding only its own write (what a collective group's programs see)."""

    def f(buf, i, row):
        buf[mp.ds(i, 1), :] = row

    row = mp.ArrayType((1, 128), "float32")
    fn = _pure(f, mp.RefType((6, 128), "float32"), IDX, row)
    layouts = [(None, None), (0,), (0, None, None)]
    with pytest.raises(NotBatchable, match="gathers=True"):
        batch(fn, layouts, (4,))
    batched, (out,) = batch(fn, layouts, (4,), gathers=True)
    assert out == (0, None, None) and "scatter" in str(batched)
    assert "dynamic_update_slice" not in str(batched)
    assert _batched_program_matches_pointwise(fn, layouts, (4,), seed=2, gathers=True)


def test_a_branch_index_that_differs_between_points_runs_every_branch():
    """Each point takes its own branch (clamped like ``switch``) by selects; bit for bit."""
    idx = mp.ArrayType((), "int32")

    def f(x, i):
        branches = [lambda v: v * 2.0, lambda v: mnp.tanh(v), lambda v: v - 1.0]
        return mp.switch(i, branches, x)

    fn = _pure(f, F32, idx)
    layouts = [(None, 0, None), (0,)]
    batched, (out,) = batch(fn, layouts, (5,))
    assert out == (0, None, None) and str(batched).count("select") == 2
    args = [np.random.default_rng(0).standard_normal((8, 5, 128)).astype(np.float32),
            np.array([-3, 0, 1, 2, 7], np.int32)]  # fmt: skip
    got = interpret(batched, *args)[0]
    for p in range(5):
        assert same_bits(got[p], interpret(fn, args[0][:, p], args[1][p])[0])


def test_a_loop_carry_made_batched_by_the_body_enters_batched():
    def f(x):
        return mp.fori_loop(0, 3, lambda i, acc: acc + x, mnp.zeros((8, 128), mnp.float32))

    fn = _pure(f, F32)
    batched, (out,) = batch(fn, [(0, None, None)], (2,))
    assert out == (0, None, None)
    assert _batched_program_matches_pointwise(fn, [(0, None, None)], (2,), seed=3)


def test_batching_builds_new_ir_and_leaves_its_input_alone():
    fn = _pure(lambda x, y: x * y, F32, F32)
    before = str(fn)
    batched, _ = batch(fn, [(0, None, None), (None, None)], (2,))
    assert str(fn) == before and batched is not fn and batched.name == f"{fn.name}_batched"
    assert axes((0, None, 1)) == {0, 1}


def test_the_pipeline_pass_and_the_public_name():
    from minipallas.ir.errors import PassError
    from minipallas.passes.pipeline import run

    fn = _pure(lambda x: x * 2.0, F32)
    out = run(fn, "batch{sizes=4x2}", verify=True)
    assert out.result_types[0].shape == (4, 2, 8, 128)
    for bad, message in [
        ("sizes=4y", "option 'sizes' takes non-negative integers joined by 'x', got '4y'"),
        ("sizes=2,exact=maybe", "option 'exact' takes true or false, got 'maybe'"),
        ("exact=false", "pass 'batch' needs option 'sizes'"),
    ]:
        with pytest.raises(PassError, match=message):
            run(fn, f"batch{{{bad}}}")
    assert mp.batch is batching.batch
