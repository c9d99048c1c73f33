"""Ref views alias their parent: writes through ``ref.at`` / reshape / bitcast / transpose land
in the parent buffer, and the parent's writes show through the view."""

import numpy as np
import pytest
from interp_build import arr, assert_same, build, ref

from minipallas import InterpretError, interpret
from minipallas.ir import Array, Dyn, Int, Slice


def test_at_chain_writes_into_the_parent():
    def body(b, r, i, v):
        row = b.v("ref.at", r, indexer=(Int(2), Slice(0, 6, 1)))
        part = b.v("ref.at", row, i, indexer=(Slice(Dyn(0), 3, 2),))
        old = b.v("swap", part, v, indexer=(Slice(0, 3, 1),))
        b.op("addupdate", r, b.const([1.0] * 6, "float32"), indexer=(Int(2), Slice(0, 6, 1)))
        return old, b.v("get", part, indexer=(Slice(0, 3, 1),))

    f = build([ref((4, 6)), arr((), "int32"), arr((3,))], body)
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    expected = x.copy()
    expected[2, 1:6:2] = [10, 20, 30]
    expected[2] += 1
    old, now = interpret(f, x, np.int32(1), np.float32([10, 20, 30]))
    assert_same(old, np.float32([13, 15, 17]))
    assert_same(now, np.float32([11, 21, 31]))
    assert_same(x, expected)


def test_at_with_a_dynamic_start_clamps():
    def body(b, r, i):
        w = b.v("ref.at", r, i, indexer=(Slice(Dyn(0), 2, 1),))
        b.op("swap", w, b.const([-1.0, -1.0], "float32"), indexer=(Slice(0, 2, 1),))

    f = build([ref((5,)), arr((), "int32")], body)
    x = np.zeros(5, np.float32)
    interpret(f, x, np.int32(9))
    assert_same(x, np.float32([0, 0, 0, -1, -1]))
    with pytest.raises(InterpretError, match="'ref.at': dimension 0: slice start 9"):
        interpret(f, np.zeros(5, np.float32), np.int32(9), checks=True)


def test_reshape_transpose_and_bitcast_views_alias():
    def body(b, r):
        flat = b.v("ref.reshape", r, shape=(6,))
        b.op("swap", flat, b.const(7.0, "float32"), indexer=(Int(4),))
        t = b.v("ref.transpose", r, permutation=(1, 0))
        b.op("swap", t, b.const([8.0, 9.0], "float32"), indexer=(Int(2), Slice(0, 2, 1)))
        bits = b.v("ref.bitcast", r, dtype="int32")
        b.op("swap", bits, b.const(0x3F800000, "int32"), indexer=(Int(0), Int(0)))
        return b.v("get", t, indexer=(Slice(0, 3, 1), Slice(0, 2, 1)))

    f = build([ref((2, 3))], body)
    x = np.zeros((2, 3), np.float32)
    (seen,) = interpret(f, x)
    expected = np.float32([[1, 0, 8], [0, 7, 9]])
    assert_same(x, expected)
    assert_same(seen, expected.T)


def test_reshape_of_a_strided_window_aliases_without_a_numpy_view():
    """A reshape numpy cannot express as a view still writes through to the parent."""

    def body(b, r, idx):
        cols = b.v("ref.at", r, indexer=(Slice(0, 4, 1), Slice(1, 2, 2)))  # x[:, 1:4:2]
        flat = b.v("ref.reshape", cols, shape=(8,))
        b.op("swap", flat, b.const(np.arange(8) + 100.0, "float32"), indexer=(Slice(0, 8, 1),))
        grid = b.v("ref.reshape", flat, shape=(2, 4))
        t = b.v("ref.transpose", grid, permutation=(1, 0))
        row = b.v("ref.at", t, indexer=(Int(3), Slice(0, 2, 1)))
        b.op("addupdate", row, b.const([0.5, 0.5], "float32"), indexer=(Slice(0, 2, 1),))
        ints = b.v("ref.bitcast", flat, dtype="int32")
        return (
            b.v("get", flat, idx, indexer=(Array(Dyn(0)),)),
            b.v("get", ints, indexer=(Int(0),)),
        )

    f = build([ref((4, 5)), arr((3,), "int32")], body)
    x = np.zeros((4, 5), np.float32)
    gathered, first_bits = interpret(f, x, np.int32([7, 0, 3]))
    expected = np.zeros((4, 5), np.float32)
    view = expected[:, 1:4:2]
    values = (np.arange(8) + 100.0).reshape(4, 2)
    values.reshape(2, 4)[:, 3] += 0.5  # grid.T[3] is grid[:, 3]
    view[...] = values
    assert_same(x, expected)
    assert_same(gathered, values.reshape(8)[[7, 0, 3]].astype(np.float32))
    assert_same(first_bits, np.float32(100.0).view(np.int32))


def test_two_views_of_one_buffer_see_each_other():
    def body(b, r):
        top = b.v("ref.at", r, indexer=(Slice(0, 2, 1),))
        bottom_t = b.v(
            "ref.transpose", b.v("ref.at", r, indexer=(Slice(1, 2, 1),)), permutation=(0,)
        )
        b.op("swap", top, b.const([5.0, 6.0], "float32"), indexer=(Slice(0, 2, 1),))
        return b.v("get", bottom_t, indexer=(Int(0),))

    f = build([ref((3,))], body)
    x = np.zeros(3, np.float32)
    (seen,) = interpret(f, x)
    assert_same(seen, np.float32(6.0))
