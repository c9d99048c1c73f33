"""Cleanup's rewrite patterns one at a time (reads, writes, selects, shape changes), dead code
and CSE, each with op counts before and after; ``cleaned`` also checks that the result verifies,
the input is unchanged and the interpreter gives the same bits before and after."""

import numpy as np
from cleanup_harness import F4, F48, FULL8, I3, cleaned, const, dus, make, names, op, read
from ir_types import F8, I32, REF8

from minipallas.ir import (
    Array,
    ArrayType,
    Dyn,
    Int,
    Literal,
    Slice,
)

# --- reads ----------------------------------------------------------------------------------


def test_read_of_whole_array_is_the_array():
    fn = make([F8, I32], lambda b, x, i: [read(b, x, FULL8), read(b, x, (Slice(Dyn(0), 8, 1),), i)])
    out = cleaned(fn, 2, 0)
    assert out.body.results == fn.params[:1] * 2


def test_read_of_a_written_window_forwards_the_update():
    def build(b, x, u, i):
        y = dus(b, x, u, (Slice(Dyn(0), 4, 1),), i)
        return [read(b, y, (Slice(Dyn(0), 4, 1),), i), y]

    out = cleaned(make([F8, F4, I32], build), 2, 1)
    assert out.body.results[0] is out.params[1]


def test_dynamic_reads_need_the_very_same_index_values():
    def build(b, x, u, i, j):
        y = dus(b, x, u, (Slice(Dyn(0), 4, 1),), i)
        return [read(b, y, (Slice(Dyn(0), 4, 1),), j)]

    cleaned(make([F8, F4, I32, I32], build), 2, 2, args=None)


def test_static_read_inside_the_written_window_reads_the_update():
    def build(b, x, u):
        y = dus(b, x, u, (Int(1), Slice(2, 4, 1)))
        return [read(b, y, (Int(1), Slice(3, 2, 1))), read(b, y, (Int(1), Int(5)))]

    out = cleaned(make([F48, F4], build), 3, 2)
    assert names(out) == ["slice", "slice"]
    assert all(o.operands[0] is out.params[1] for o in out.walk())
    assert [o.attrs["indexer"] for o in out.walk()] == [(Slice(1, 2, 1),), (Int(3),)]


def test_strided_read_inside_a_strided_write():
    def build(b, x, u):
        y = dus(b, x, u, (Slice(0, 4, 2),))
        return [read(b, y, (Slice(2, 2, 4),))]

    out = cleaned(make([F8, F4], build), 2, 1)
    assert out.body.ops[0].attrs["indexer"] == (Slice(1, 2, 2),)


def test_static_read_apart_from_the_writes_reads_the_original():
    def build(b, x, u, v):
        y = dus(b, x, u, (Int(0), Slice(0, 4, 1)))
        z = dus(b, y, v, (Int(1), Slice(4, 4, 1)))
        return [read(b, z, (Int(1), Slice(0, 4, 1))), z]

    out = cleaned(make([F48, F4, F4], build), 3, 3)
    (r,) = [o for o in out.walk() if o.name == "slice"]
    assert r.operands[0] is out.params[0]


def test_partly_overlapping_read_stays():
    def build(b, x, u):
        y = dus(b, x, u, (Slice(0, 4, 1),))
        return [read(b, y, (Slice(2, 4, 1),))]

    cleaned(make([F8, F4], build), 2, 2)


def test_read_of_uninitialized_is_uninitialized():
    def build(b, i, idx):
        u = op(b, "uninitialized", type=F48)
        return [
            read(b, u, (Int(0), Slice(Dyn(0), 4, 1)), i),
            op(b, "gather", u, idx, indexer=(Array(Dyn(0)), Slice(0, 8, 1))),
        ]

    out = cleaned(make([I32, I3], build), 3, 2)
    assert names(out) == ["uninitialized", "uninitialized"]
    assert [o.attrs["type"] for o in out.walk()] == [F4, ArrayType((3, 8), "float32")]


def test_gather_after_scatter_is_not_forwarded():
    def build(b, x, idx, u):
        y = op(b, "scatter", x, idx, u, indexer=(Array(Dyn(0)),))
        return [op(b, "gather", y, idx, indexer=(Array(Dyn(0)),))]

    # duplicate and out-of-range indices: the gather does not give back the update
    args = [
        np.arange(8, dtype=np.float32),
        np.array([1, 1, 20], np.int32),
        np.array([5, 6, 7], np.float32),
    ]
    cleaned(make([F8, I3, ArrayType((3,), "float32")], build), 2, 2, args)


# --- writes ---------------------------------------------------------------------------------


def test_whole_window_write_is_the_update_and_folds_uninitialized():
    def build(b, x, i):
        u = op(b, "uninitialized", type=F8)
        y = dus(b, u, x, FULL8)
        z = dus(b, y, op(b, "exp", x), (Slice(Dyn(0), 8, 1),), i)
        return [y, z]

    out = cleaned(make([F8, I32], build), 4, 1)
    assert names(out) == ["exp"]
    assert out.body.results == (out.params[0], out.body.ops[0].result)


def test_writing_back_what_was_read_is_dropped():
    def build(b, x, i, idx):
        w = (Int(Dyn(0)), Slice(0, 8, 1))
        y = dus(b, x, read(b, x, w, i), w, i)
        g = (Array(Dyn(0)), Slice(2, 4, 1))
        z = op(b, "scatter", y, idx, op(b, "gather", y, idx, indexer=g), indexer=g)
        return [z]

    args = [
        np.arange(32, dtype=np.float32).reshape(4, 8),
        np.int32(9),
        np.array([0, 0, 7], np.int32),
    ]
    out = cleaned(make([F48, I32, I3], build), 4, 0, args)
    assert out.body.results == (out.params[0],)


def test_writing_back_past_writes_elsewhere_is_dropped():
    def build(b, x, u):
        y = dus(b, x, u, (Slice(4, 4, 1),))
        y = dus(b, y, read(b, y, (Slice(1, 2, 1),)), (Slice(1, 2, 1),))  # reads y itself
        apart = dus(b, y, read(b, x, (Slice(0, 4, 1),)), (Slice(0, 4, 1),))  # x: apart from 4:8
        overlap = dus(b, x, u, (Slice(2, 4, 1),))
        kept = dus(b, overlap, read(b, x, (Slice(0, 4, 1),)), (Slice(0, 4, 1),))
        return [apart, kept]

    out = cleaned(make([F8, F4], build), 8, 4)
    assert out.body.results[0] is out.body.ops[0].result


def test_write_back_of_another_array_or_accumulation_stays():
    def build(b, x, x2, idx):
        y = dus(b, x, read(b, x2, (Slice(0, 4, 1),)), (Slice(0, 4, 1),))
        g = (Array(Dyn(0)),)
        z = op(b, "scatter_add", y, idx, op(b, "gather", y, idx, indexer=g), indexer=g)
        return [z]

    cleaned(make([F8, F8, I3], build), 4, 4)


def test_overwritten_window_drops_the_earlier_write():
    def build(b, x, u, v, w, i, idx, s):
        ds = (Slice(Dyn(0), 4, 1),)
        y = dus(b, dus(b, x, u, ds, i), v, ds, i)  # same dynamic window
        part = read(b, w, (Slice(0, 2, 1),))
        y = dus(b, dus(b, y, part, (Slice(3, 2, 1),)), w, (Slice(2, 4, 1),))  # inside
        g = (Array(Dyn(0)),)
        y = op(b, "scatter", op(b, "scatter", y, idx, s, indexer=g), idx, s, indexer=g)
        return [y]

    fn = make([F8, F4, F4, F4, I32, I3, ArrayType((3,), "float32")], build)
    out = cleaned(fn, 7, 3)
    assert names(out) == ["dynamic_update_slice", "dynamic_update_slice", "scatter"]


def test_whole_write_then_a_partial_one():
    def build(b, x, u, w):
        y = dus(b, dus(b, x, u, (Slice(0, 8, 1),)), w, (Slice(2, 4, 1),))
        return [y]

    out = cleaned(make([F8, F8, F4], build), 2, 1)
    assert names(out) == ["dynamic_update_slice"]
    assert out.body.ops[0].operands[0] is out.params[1]


# --- selects --------------------------------------------------------------------------------


def test_select_with_a_known_mask_or_equal_branches():
    def build(b, x, y, m):
        yes = const(b, True, "bool", (8,))
        no = const(b, False, "bool", (8,))
        mixed = b.create("constant", [], {"value": Literal.of([True, False] * 4, "bool")}).result
        return [
            op(b, "select", yes, x, y),
            op(b, "select", no, x, y),
            op(b, "select", m, y, y),
            op(b, "select", mixed, x, y),
            op(b, "select", m, x, y),
        ]

    out = cleaned(make([F8, F8, ArrayType((8,), "bool")], build), 8, 3)
    assert out.body.results[:3] == (out.params[0], out.params[1], out.params[1])


# --- shape changes --------------------------------------------------------------------------


def test_no_op_shape_changes_and_inverse_pairs():
    def build(b, x):
        a = op(b, "reshape", x, shape=(4, 8))
        c = op(b, "transpose", x, permutation=(0, 1))
        d = op(b, "convert", x, dtype="float32")
        e = op(b, "broadcast_in_dim", x, shape=(4, 8), dims=(0, 1))
        f = op(b, "reshape", op(b, "reshape", x, shape=(32,)), shape=(4, 8))
        g = op(b, "transpose", op(b, "transpose", x, permutation=(1, 0)), permutation=(1, 0))
        h = op(b, "bitcast", op(b, "bitcast", x, dtype="int32"), dtype="float32")
        return [a, c, d, e, f, g, h]

    out = cleaned(make([F48], build), 10, 0)
    assert out.body.results == out.params * 7


def test_composed_transposes_and_reshapes():
    t3 = ArrayType((2, 3, 4), "float32")

    def build(b, x):
        y = op(b, "transpose", op(b, "transpose", x, permutation=(1, 2, 0)), permutation=(1, 2, 0))
        z = op(b, "reshape", op(b, "reshape", x, shape=(6, 4)), shape=(4, 6))
        w = op(b, "convert", op(b, "convert", x, dtype="int32"), dtype="float32")  # lossy: stays
        return [y, z, w]

    out = cleaned(make([t3], build), 6, 4)
    (t,) = [o for o in out.walk() if o.name == "transpose"]
    assert t.attrs["permutation"] == (2, 0, 1) and t.operands[0] is out.params[0]


# --- dead code, CSE ---------------------------------------------------------------------------


def test_dead_pure_ops_go_and_common_subexpressions_merge():
    def build(b, x, y):
        s1 = op(b, "add", x, y)
        s2 = op(b, "add", x, y)
        op(b, "exp", op(b, "mul", s1, s2))  # dead chain
        c1, c2 = const(b, 1.0, shape=(8,)), const(b, 1.0, shape=(8,))
        c3 = const(b, 2.0, shape=(8,))
        return [op(b, "mul", s1, s2), op(b, "sub", x, c1), op(b, "sub", x, c2), op(b, "sub", x, c3)]

    out = cleaned(make([F8, F8], build), 11, 6)
    assert names(out) == ["add", "mul", "constant", "constant", "sub", "sub"]
    assert out.body.results[1] is out.body.results[2]


def test_cse_keeps_different_attributes_apart():
    def build(b, x):
        return [
            op(b, "reduce_sum", x, axes=(0,)),
            op(b, "reduce_sum", x, axes=(1,)),
            op(b, "reduce_sum", x, axes=(0,)),
        ]

    out = cleaned(make([F48], build), 3, 2)
    assert out.body.results[0] is out.body.results[2]


def test_reads_of_refs_are_dead_code_but_writes_are_not():
    def build(b, r, x, i):
        op(b, "get", r, indexer=FULL8)
        op(b, "program_id", axis=0)
        b.create("swap", [r, x], {"indexer": FULL8})  # result unused, but it writes
        op(b, "load", r, i, indexer=(Int(Dyn(0)),))
        return []

    out = cleaned(make([REF8, F8, I32], build), 4, 1, program_ids=(0,))
    assert names(out) == ["swap"]
