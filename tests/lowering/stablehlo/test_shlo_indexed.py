"""The pure indexed ops (slice, dynamic_slice, gather and their writes) through StableHLO.

Each indexer kind, with in-range and out-of-range dynamic indices (clamped), negative and
too-large array indices (clamped on reads, dropped on writes), unsigned and int8 index types,
strided windows and duplicate scatter positions, agrees bit for bit with the interpreter.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ir_types import I32, U32
from shlo_util import check, random_array

import minipallas
from minipallas.ir import Array, ArrayType, Builder, Dyn, Int, Slice, indexing, params
from minipallas.ir import dtypes as mp_dtypes
from minipallas.ir.opset.indexed import read_op_for, write_op_for

I8 = ArrayType((), "int8")


def read_fn(shape, dtype, indexer, dyn_types):
    b = Builder()
    x, *dyn = params([ArrayType(shape, dtype), *dyn_types])
    out = b.create(read_op_for(indexer), [x, *dyn], {"indexer": indexer}).result
    return b.function("read", [x, *dyn], [out])


def write_fn(shape, dtype, indexer, dyn_types, accumulate=False):
    window = indexing.result_shape(indexer, dyn_types)
    b = Builder()
    x, *dyn, u = params([ArrayType(shape, dtype), *dyn_types, ArrayType(window, dtype)])
    name = write_op_for(indexer, accumulate)
    out = b.create(name, [x, *dyn, u], {"indexer": indexer}).result
    return b.function("write", [x, *dyn, u], [out])


def index_values(rng, t: ArrayType, high: int) -> np.ndarray:
    """Indices in and out of ``[0, high)``, including negatives and huge unsigned ones."""
    np_dtype = mp_dtypes.to_numpy(t.dtype)
    low = 0 if t.dtype == "uint32" else -3
    values = np.asarray(rng.integers(low, high + 3, t.shape))
    if t.dtype == "uint32" and values.size:
        values.flat[0] = 4_000_000_000
    return values.astype(np_dtype)


CASES = {
    "static int and slice": ((8, 6), (Int(3), Slice(1, 4, 1)), []),
    "static strided": ((8, 6), (Slice(0, 3, 2), Slice(1, 2, 3)), []),
    "dynamic int, strided start": ((8, 6), (Int(Dyn(0)), Slice(Dyn(1), 3, 2)), [I32, I32]),
    "unsigned start": ((8, 6), (Slice(Dyn(0), 4, 2), Int(2)), [U32]),
    "int8 starts": ((8, 6), (Slice(Dyn(0), 5, 1), Int(Dyn(1))), [I8, I8]),
    "empty slice": ((8, 6), (Slice(Dyn(0), 0, 1), Slice(0, 6, 1)), [I32]),
    "array rows": ((8, 6), (Array(Dyn(0)), Slice(0, 6, 1)), [ArrayType((5,), "int32")]),
    "array after strided": (
        (8, 6),
        (Slice(1, 3, 2), Array(Dyn(0))),
        [ArrayType((2, 3), "int8")],
    ),
    "arrays apart": (
        (8, 6, 5),
        (Array(Dyn(0)), Slice(0, 3, 2), Array(Dyn(1))),
        [ArrayType((4,), "int32"), ArrayType((1,), "uint32")],
    ),
    "adjacent array and int": (
        (8, 6, 5),
        (Slice(Dyn(0), 2, 3), Array(Dyn(1)), Int(Dyn(2))),
        [I32, ArrayType((3, 2), "int32"), I32],
    ),
    "int then array apart": (
        (8, 6, 5),
        (Int(1), Slice(0, 6, 1), Array(Dyn(0))),
        [ArrayType((3,), "int32")],
    ),
    "0-d array index": ((7,), (Array(Dyn(0)),), [ArrayType((), "int32")]),
    "unsigned array": ((7,), (Array(Dyn(0)),), [ArrayType((12,), "uint32")]),
    "dynamic start on strided write": ((9,), (Slice(Dyn(0), 3, 4),), [I32]),
}


@pytest.mark.parametrize("dtype", ["float32", "int8", "bool", "bfloat16"])
@pytest.mark.parametrize("case", list(CASES))
def test_read_and_write(case, dtype):
    shape, indexer, dyn_types = CASES[case]
    rng = np.random.default_rng(abs(hash(case)) % 2**32)
    window = indexing.result_shape(indexer, dyn_types)
    read, write = (
        read_fn(shape, dtype, indexer, dyn_types),
        write_fn(shape, dtype, indexer, dyn_types),
    )
    add = None
    if indexing.has_arrays(indexer) and dtype not in ("bool",):
        add = write_fn(shape, dtype, indexer, dyn_types, accumulate=True)
    for _ in range(4):
        dyn = [index_values(rng, t, max(shape)) for t in dyn_types]
        x = random_array(rng, shape, dtype)
        update = random_array(rng, window, dtype)
        check(read, x, *dyn)
        check(write, x, *dyn, update)
        if add is not None:
            check(add, x, *dyn, update, ulps=1 if dtype == "bfloat16" else 0)


def test_dynamic_starts_clamp_like_dynamic_slice():
    indexer = (Slice(Dyn(0), 3, 2),)  # span 5 in 8: starts clamp into [0, 3]
    fn = read_fn((8,), "int32", indexer, [I32])
    x = np.arange(8, dtype=np.int32)
    for start, first in [(-5, 0), (0, 0), (2, 2), (3, 3), (4, 3), (1_000_000, 3)]:
        (out,) = check(fn, x, np.int32(start))
        np.testing.assert_array_equal(out, [first, first + 2, first + 4])


def test_gather_clamps_and_scatter_drops_out_of_range():
    indexer = (Array(Dyn(0)),)
    idx = np.array([-1, 0, 7, 8, 100], np.int32)
    x = np.arange(8, dtype=np.float32)
    (got,) = check(read_fn((8,), "float32", indexer, [ArrayType((5,), "int32")]), x, idx)
    np.testing.assert_array_equal(got, [0, 0, 7, 7, 7])
    update = np.full(5, -1, np.float32)
    write = write_fn((8,), "float32", indexer, [ArrayType((5,), "int32")])
    (got,) = check(write, x, idx, update)
    np.testing.assert_array_equal(got, [-1, 1, 2, 3, 4, 5, 6, -1])


def test_scatter_duplicates_last_wins_and_add_counts_each():
    indexer = (Array(Dyn(0)),)
    idx = np.array([2, 2, 5, 2], np.int32)
    x = np.zeros(8, np.int32)
    update = np.array([1, 2, 3, 4], np.int32)
    types = [ArrayType((4,), "int32")]
    (last,) = check(write_fn((8,), "int32", indexer, types), x, idx, update)
    (total,) = check(write_fn((8,), "int32", indexer, types, accumulate=True), x, idx, update)
    assert last[2] == 4 and total[2] == 7 and total[5] == 3


EMPTY = [
    ((0,), (Array(Dyn(0)),), (0,)),  # an empty index array into a size-0 dimension
    ((4,), (Array(Dyn(0)),), (0,)),
    ((0, 3), (Array(Dyn(0)), Slice(0, 3, 1)), (0,)),
    ((3, 0), (Array(Dyn(0)), Slice(0, 0, 1)), (2,)),  # indices, but size-0 windows
    ((0, 3), (Slice(0, 0, 1), Array(Dyn(0))), (0,)),
]


@pytest.mark.parametrize("shape, indexer, index_shape", EMPTY)
def test_empty_gathers_and_scatters(shape, indexer, index_shape):
    """A gather cannot slice size 1 from a size-0 dimension: empty reads become an empty
    constant; empty writes leave the array as it was."""
    types = [ArrayType(index_shape, "int32")]
    x = np.zeros(shape, np.uint32)
    idx = np.zeros(index_shape, np.int32)
    update = np.ones(indexing.result_shape(indexer, types), np.uint32)
    (got,) = check(read_fn(shape, "uint32", indexer, types), x, idx)
    assert got.shape == indexing.result_shape(indexer, types)
    for accumulate in (False, True):
        (got,) = check(write_fn(shape, "uint32", indexer, types, accumulate), x, idx, update)
        assert got.shape == shape


def test_nonempty_gather_from_a_size_0_dimension_is_rejected():
    fn = read_fn((0,), "float32", (Array(Dyn(0)),), [ArrayType((2,), "int32")])
    with pytest.raises(minipallas.MiniPallasError, match="size-0 dimension"):
        minipallas.lower(fn)


def test_which_stablehlo_op_each_indexer_becomes():
    def text(fn):
        return minipallas.lower(fn).as_text(debug_info=False)

    assert "stablehlo.slice" in text(read_fn((8, 6), "float32", (Int(3), Slice(1, 3, 2)), []))
    ds = text(read_fn((8, 6), "float32", (Int(Dyn(0)), Slice(Dyn(1), 3, 2)), [I32, I32]))
    assert "stablehlo.dynamic_slice" in ds and "stablehlo.gather" not in ds
    dus = text(write_fn((8, 6), "float32", (Int(Dyn(0)), Slice(0, 6, 1)), [I32]))
    assert "stablehlo.dynamic_update_slice" in dus
    strided = text(write_fn((8, 6), "float32", (Int(Dyn(0)), Slice(0, 3, 2)), [I32]))
    assert "stablehlo.scatter" in strided and "dynamic_update_slice" not in strided
    arrays = [ArrayType((3,), "int32")]
    assert "stablehlo.gather" in text(read_fn((8,), "float32", (Array(Dyn(0)),), arrays))


@st.composite
def indexed_programs(draw):
    """A random shape, an indexer of random entries, and index values in and out of range."""
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 6)) for _ in range(rank))
    entries, dyn_types = [], []
    for extent in shape:
        kind = draw(st.sampled_from(["int", "dint", "slice", "dslice", "array"]))
        dtype = draw(st.sampled_from(["int32", "int8", "uint32"]))
        if kind == "int":
            entries.append(Int(draw(st.integers(0, extent - 1))))
        elif kind == "dint":
            entries.append(Int(Dyn(len(dyn_types))))
            dyn_types.append(ArrayType((), dtype))
        elif kind in ("slice", "dslice"):
            stride = draw(st.integers(1, 3))
            size = draw(st.integers(0, (extent - 1) // stride + 1))
            span = (size - 1) * stride + 1 if size else 0
            if kind == "slice":
                entries.append(Slice(draw(st.integers(0, extent - span)), size, stride))
            else:
                entries.append(Slice(Dyn(len(dyn_types)), size, stride))
                dyn_types.append(ArrayType((), dtype))
        else:
            entries.append(Array(Dyn(len(dyn_types))))
            dyn_types.append(ArrayType(draw(st.sampled_from([(), (2,), (3,), (2, 1)])), dtype))
    try:
        indexing.result_shape(tuple(entries), dyn_types)
    except indexing.IndexError_:
        pass
    seed = draw(st.integers(0, 2**31))
    return shape, tuple(entries), dyn_types, seed


@settings(max_examples=40, deadline=None)
@given(indexed_programs())
def test_random_indexers_agree_with_interpreter(program):
    shape, indexer, dyn_types, seed = program
    try:
        window = indexing.result_shape(indexer, dyn_types)
    except indexing.IndexError_:
        return  # array indices that do not broadcast: not a program
    rng = np.random.default_rng(seed)
    dyn = [index_values(rng, t, max(shape)) for t in dyn_types]
    x = random_array(rng, shape, "int32")
    update = random_array(rng, window, "int32")
    check(read_fn(shape, "int32", indexer, dyn_types), x, *dyn)
    check(write_fn(shape, "int32", indexer, dyn_types), x, *dyn, update)
    if indexing.has_arrays(indexer):
        check(write_fn(shape, "int32", indexer, dyn_types, accumulate=True), x, *dyn, update)
