"""``batch(..., shared=...)``: one array for every batch point, each writing its own positions.

The reference is the points run one after another on the one array, in order: for programs
whose points never touch what another writes (race-free), that is what the batched program
must give, bit for bit. Each test also checks the batched program holds no per-point copy of
the shared array (its type stays the unbatched one) and passes the verifier.
"""

import functools

import numpy as np
import pytest

import minipallas as mp
import minipallas.numpy as mnp
from minipallas.ir.interpret import interpret
from minipallas.ir.verifier import verify
from minipallas.passes import batching
from minipallas.passes.batching import NotBatchable
from minipallas.passes.cleanup import cleanup
from minipallas.passes.discharge import discharge
from minipallas.passes.xla_cpu import XLA_CPU
from minipallas.tools.generate.check import same_bits

# the batchings of the CPU path, with XLA:CPU's policy (its measured exactness classes)
batch = functools.partial(batching.batch, policy=XLA_CPU)

IDX = mp.ArrayType((), "int32")
ROW = mp.ArrayType((1, 128), "float32")
BUF = mp.RefType((6, 128), "float32")
N = 4


def _pure(f, *types):
    return cleanup(discharge(mp.trace(f, *types)))


def _shared_batch(fn, sizes=(N,)):
    """``fn(buf, i, row)`` batched: ``buf`` shared, ``i`` the batch index, ``row`` batched."""
    layouts = [(None, None), (0,), (0, None, None)]
    results = [(None, None)]
    batched, (out,) = batch(fn, layouts, sizes, results, gathers=True, shared=[(0, 0)])
    verify(batched)
    assert out == (None, None) and batched.result_types[0] == fn.result_types[0]
    return batched


def _in_turn(fn, buf, rows):
    """The points run one after another on one array: the race-free meaning."""
    for i, row in enumerate(rows):
        (buf,) = interpret(fn, buf, np.int32(i), row)
    return buf


def _data(seed=0):
    rng = np.random.default_rng(seed)
    buf = rng.standard_normal((6, 128)).astype(np.float32)
    rows = rng.standard_normal((N, 1, 128)).astype(np.float32)
    return buf, rows


def test_each_point_writes_its_own_row_into_the_one_array():
    def f(buf, i, row):
        buf[mp.ds(i + 1, 1), :] = row * 2.0

    fn = _pure(f, BUF, IDX, ROW)
    batched = _shared_batch(fn)
    assert "scatter_add" in str(batched)
    buf, rows = _data()
    (got,) = interpret(batched, buf, np.arange(N, dtype=np.int32), rows)
    assert same_bits(got, _in_turn(fn, buf, rows))
    assert same_bits(got[0], buf[0]) and same_bits(got[5], buf[5])  # rows nobody wrote


def test_a_write_under_a_branch_one_point_takes_is_that_point_alone():
    """``when(i == 2)``: the other points run the branch too (it is batched), but write
    nothing; the window is the same row for every point."""

    def f(buf, i, row):
        @mp.when(i == 2)
        def _():
            buf[mp.ds(0, 1), :] = row + 1.0

    fn = _pure(f, BUF, IDX, ROW)
    batched = _shared_batch(fn)
    buf, rows = _data(1)
    (got,) = interpret(batched, buf, np.arange(N, dtype=np.int32), rows)
    assert same_bits(got, _in_turn(fn, buf, rows))
    assert same_bits(got[0], rows[2, 0] + np.float32(1.0))
    (compiled,) = mp.compile(batched)(buf, np.arange(N, dtype=np.int32), rows)
    assert same_bits(compiled, got)


NEG_ZERO, NEG_NAN = np.float32(-0.0), np.float32(np.nan) * np.float32(-1.0)


@pytest.mark.parametrize("value", [NEG_ZERO, NEG_NAN, np.float32(3.0)])
def test_windows_that_overlap_keep_the_one_write_by_its_bits(value):
    """Every point's window is the same two rows; point 1 changes one element, the others
    write back what they read (discharge takes the window through the branch and back). The
    element gets point 1's bits, even -0.0 over 0.0 or a NaN of other bits."""

    def f(buf, i, v):
        window = buf.at[mp.ds(2, 2), :]

        @mp.when(i == 1)
        def _():
            window[0, 5] = v

    fn = _pure(f, BUF, IDX, mp.ArrayType((), "float32"))
    layouts = [(None, None), (0,), (0,)]
    batched, _ = batch(fn, layouts, (N,), [(None, None)], gathers=True, shared=[(0, 0)])
    verify(batched)
    buf = np.zeros((6, 128), np.float32)
    buf[3] = np.float32(np.nan)
    values = np.full(N, value, np.float32)
    (got,) = mp.compile(batched)(buf, np.arange(N, dtype=np.int32), values)
    expected = buf.copy()
    expected[2, 5] = value
    assert same_bits(got, expected)


def test_a_loop_carries_the_shared_array_and_keeps_it_shared():
    def f(buf, i, row):
        def step(k, _):
            buf[mp.ds(i, 1), :] = buf[mp.ds(i, 1), :] + row * k.astype(mnp.float32)

        mp.fori_loop(0, 3, step, None)

    fn = _pure(f, BUF, IDX, ROW)
    batched = _shared_batch(fn)
    buf, rows = _data(2)
    (got,) = interpret(batched, buf, np.arange(N, dtype=np.int32), rows)
    assert same_bits(got, _in_turn(fn, buf, rows))


def test_a_whole_array_each_point_computes_for_itself_has_no_shared_form():
    def f(buf, i, row):
        buf[...] = buf[...] + row

    fn = _pure(f, BUF, IDX, ROW)
    with pytest.raises(NotBatchable, match="own copy of a shared array"):
        _shared_batch(fn)


def test_a_loop_writing_under_a_branch_that_differs_is_refused():
    def f(buf, i, row):
        @mp.when(i == 0)
        def _():
            def step(k, _):
                buf[mp.ds(k, 1), :] = row

            mp.fori_loop(0, 2, step, None)

    fn = _pure(f, BUF, IDX, ROW)
    with pytest.raises(NotBatchable, match="under a condition that differs"):
        _shared_batch(fn)


def test_batching_with_a_shared_array_leaves_its_input_alone():
    def f(buf, i, row):
        buf[mp.ds(i, 1), :] = row

    fn = _pure(f, BUF, IDX, ROW)
    before = str(fn)
    _shared_batch(fn)
    assert str(fn) == before
