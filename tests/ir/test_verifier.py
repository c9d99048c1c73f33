"""Invalid programs the verifier must reject, op by op: names, results, indexers, state ops,
views and attributes. Each test asserts the error class, the op's name and the user's line
(see ``verifier_build``); ``test_verifier_regions`` covers regions, scopes and calls.
"""

import pytest
from ir_types import F8, F32, I32, REF8
from verifier_build import FULL8, I8, REF2D, at, fn, mk, rejects

from minipallas.ir import (
    Array,
    ArrayType,
    Block,
    Builder,
    Dyn,
    Int,
    Literal,
    RefType,
    Slice,
    Value,
)
from minipallas.ir.errors import VerificationError

# -- op names, result lists, region counts -----------------------------------------------------


def test_unknown_op_suggests_a_name():
    r = Value(REF8)
    msg = rejects(
        fn([r], [mk("gett", [r], [F8], {"indexer": FULL8}, line=3)]), "gett", 3, "unknown op"
    )
    assert "did you mean 'get'" in msg


def test_too_many_results():
    x = Value(F8)
    rejects(fn([x], [mk("add", [x, x], [F8, F8], line=4)]), "add", 4, "expected 1 results, got 2")


def test_result_type_differs_from_type_rule():
    x = Value(F8)
    rejects(
        fn([x], [mk("neg", [x], [ArrayType((4,), "float32")], line=5)]),
        "neg",
        5,
        "result 0 has type f32[4], expected f32[8]",
    )


def test_for_without_region():
    lo, hi = Value(I32), Value(I32)
    rejects(
        fn([lo, hi], [mk("for", [lo, hi], [], {"num_consts": 0}, line=6)]),
        "for",
        6,
        "expected 1 regions, got 0",
    )


def test_cond_without_branches():
    i = Value(I32)
    rejects(fn([i], [mk("cond", [i], [], line=7)]), "cond", 7, "at least one region")


def test_binary_operands_disagree():
    x, y = Value(F8), Value(I8)
    rejects(fn([x, y], [mk("add", [x, y], [F8], line=8)]), "add", 8, "operands must have one type")


def test_dot_contracting_dims_differ():
    a, b = Value(ArrayType((8, 16), "float32")), Value(ArrayType((8, 16), "float32"))
    rejects(
        fn([a, b], [mk("dot", [a, b], [ArrayType((8, 16), "float32")], line=9)]),
        "dot",
        9,
        "contracting dims differ",
    )


def test_dot_batch_dims_differ():
    a, b = Value(ArrayType((2, 8, 16), "float32")), Value(ArrayType((3, 16, 4), "float32"))
    rejects(
        fn([a, b], [mk("dot", [a, b], [ArrayType((2, 8, 4), "float32")], line=9)]),
        "dot",
        9,
        "equal leading batch dims",
    )


# -- indexers ----------------------------------------------------------------------------------


def test_indexer_rank_differs_from_ref_rank():
    r = Value(REF2D)
    rejects(
        fn([r], [mk("get", [r], [ArrayType((128,), "float32")], {"indexer": (Int(0),)}, line=10)]),
        "get",
        10,
        "1 entries for an array of rank 2",
    )


def test_static_int_index_out_of_bounds():
    r = Value(REF8)
    rejects(
        fn([r], [mk("get", [r], [F32], {"indexer": (Int(8),)}, line=11)]),
        "get",
        11,
        "index 8 is out of bounds for size 8",
    )


def test_static_slice_out_of_bounds():
    r = Value(REF8)
    rejects(
        fn(
            [r],
            [mk("get", [r], [ArrayType((8,), "float32")], {"indexer": (Slice(4, 8, 1),)}, line=12)],
        ),
        "get",
        12,
        "out of bounds for size 8",
    )


def test_strided_slice_out_of_bounds():
    r = Value(REF8)
    rejects(
        fn(
            [r],
            [mk("get", [r], [ArrayType((4,), "float32")], {"indexer": (Slice(2, 4, 2),)}, line=13)],
        ),
        "get",
        13,
        "out of bounds",
    )


def test_dynamic_index_must_be_an_int_scalar():
    r, i = Value(REF8), Value(F32)
    rejects(
        fn([r, i], [mk("get", [r, i], [F32], {"indexer": (Int(Dyn(0)),)}, line=14)]),
        "get",
        14,
        "must be an integer scalar, got f32[]",
    )


def test_dynamic_slice_larger_than_the_dimension():
    r, i = Value(REF8), Value(I32)
    rejects(
        fn(
            [r, i],
            [
                mk(
                    "get",
                    [r, i],
                    [ArrayType((16,), "float32")],
                    {"indexer": (Slice(Dyn(0), 16, 1),)},
                    line=15,
                )
            ],
        ),
        "get",
        15,
        "does not fit in size 8",
    )


def test_indexer_names_a_missing_dynamic_operand():
    r = Value(REF8)
    rejects(
        fn([r], [mk("get", [r], [F32], {"indexer": (Int(Dyn(0)),)}, line=16)]),
        "get",
        16,
        "expected 1 dynamic index operands, got 0",
    )


def test_array_index_must_hold_ints():
    r, idx = Value(REF8), Value(ArrayType((4,), "float32"))
    rejects(
        fn(
            [r, idx],
            [
                mk(
                    "get",
                    [r, idx],
                    [ArrayType((4,), "float32")],
                    {"indexer": (Array(Dyn(0)),)},
                    line=17,
                )
            ],
        ),
        "get",
        17,
        "must be an integer array",
    )


def test_malformed_indexer_entry():
    r = Value(REF8)
    rejects(
        fn([r], [mk("get", [r], [F32], {"indexer": (3,)}, line=18)]),
        "get",
        18,
        "indexer entry 0 is 3",
    )


def test_missing_indexer():
    r = Value(REF8)
    rejects(fn([r], [mk("get", [r], [F8], line=19)]), "get", 19, "missing 'indexer'")


def test_pure_gather_needs_an_array_index():
    x = Value(F8)
    rejects(
        fn([x], [mk("gather", [x], [F8], {"indexer": FULL8}, line=20)]),
        "gather",
        20,
        "needs an integer-array index",
    )


# -- state ops ---------------------------------------------------------------------------------


def test_swap_value_dtype_differs():
    r, v = Value(REF8), Value(I8)
    rejects(
        fn([r, v], [mk("swap", [r, v], [F8], {"indexer": FULL8}, line=21)]),
        "swap",
        21,
        "stored value has type i32[8], expected f32[8]",
    )


def test_addupdate_value_dtype_differs():
    r, v = Value(REF8), Value(ArrayType((8,), "bfloat16"))
    rejects(
        fn([r, v], [mk("addupdate", [r, v], [], {"indexer": FULL8}, line=22)]),
        "addupdate",
        22,
        "added value has type bf16[8], expected f32[8]",
    )


def test_store_value_shape_differs():
    r, v = Value(REF8), Value(ArrayType((4,), "float32"))
    rejects(
        fn([r, v], [mk("store", [r, v], [], {"indexer": FULL8}, line=23)]),
        "store",
        23,
        "stored value has type f32[4], expected f32[8]",
    )


def test_load_mask_shape_differs():
    r, m = Value(REF8), Value(ArrayType((4,), "bool"))
    rejects(
        fn([r, m], [mk("load", [r, m], [F8], {"indexer": FULL8, "masked": True}, line=24)]),
        "load",
        24,
        "mask has type bool[4], expected bool[8]",
    )


def test_store_mask_must_be_bool():
    r, v, m = Value(REF8), Value(F8), Value(I8)
    rejects(
        fn([r, v, m], [mk("store", [r, v, m], [], {"indexer": FULL8, "masked": True}, line=25)]),
        "store",
        25,
        "mask has type i32[8], expected bool[8]",
    )


def test_load_other_without_mask():
    r, o = Value(REF8), Value(F32)
    rejects(
        fn([r, o], [mk("load", [r, o], [F8], {"indexer": FULL8, "has_other": True}, line=26)]),
        "load",
        26,
        "'other' needs a mask",
    )


def test_a_ref_cannot_be_stored_as_data():
    r, inner = Value(REF8), Value(REF8)
    rejects(
        fn([r, inner], [mk("swap", [r, inner], [F8], {"indexer": FULL8}, line=27)]),
        "swap",
        27,
        "stored value has type Ref{f32[8]}, expected f32[8]",
    )


def test_get_from_an_array_not_a_ref():
    x = Value(F8)
    rejects(
        fn([x], [mk("get", [x], [F8], {"indexer": FULL8}, line=28)]),
        "get",
        28,
        "operand 'ref' must be a Ref",
    )


# -- ref views ---------------------------------------------------------------------------------


def test_view_reshape_changes_size():
    r = Value(REF2D)
    rejects(
        fn(
            [r],
            [mk("ref.reshape", [r], [RefType((4, 128), "float32")], {"shape": (4, 128)}, line=30)],
        ),
        "ref.reshape",
        30,
        "sizes differ",
    )


def test_view_bitcast_changes_width():
    r = Value(REF8)
    rejects(
        fn(
            [r],
            [mk("ref.bitcast", [r], [RefType((8,), "bfloat16")], {"dtype": "bfloat16"}, line=31)],
        ),
        "ref.bitcast",
        31,
        "needs a second-minor dim to pack along",
    )


def test_view_transpose_bad_permutation():
    r = Value(REF2D)
    rejects(
        fn([r], [mk("ref.transpose", [r], [REF2D], {"permutation": (0, 0)}, line=32)]),
        "ref.transpose",
        32,
        "is not a permutation of 2 dims",
    )


def test_view_with_array_index():
    r, idx = Value(REF8), Value(ArrayType((4,), "int32"))
    rejects(
        fn(
            [r, idx],
            [
                mk(
                    "ref.at",
                    [r, idx],
                    [RefType((4,), "float32")],
                    {"indexer": (Array(Dyn(0)),)},
                    line=33,
                )
            ],
        ),
        "ref.at",
        33,
        "a view cannot use integer-array indices",
    )


# -- attributes --------------------------------------------------------------------------------


def test_program_id_negative_axis():
    rejects(
        fn([], [mk("program_id", [], [I32], {"axis": -1}, line=100)]),
        "program_id",
        100,
        "'axis' must be a non-negative int, got -1",
    )


def test_reduce_axes_out_of_range():
    x = Value(F8)
    rejects(
        fn([x], [mk("reduce_sum", [x], [F32], {"axes": (1,)}, line=101)]),
        "reduce_sum",
        101,
        "axes (1,) must be distinct dims",
    )


def test_convert_to_unknown_dtype():
    x = Value(F8)
    rejects(
        fn([x], [mk("convert", [x], [F8], {"dtype": "float64"}, line=102)]),
        "convert",
        102,
        "unsupported dtype 'float64'",
    )


def test_broadcast_dims_not_increasing():
    x = Value(ArrayType((8, 8), "float32"))
    rejects(
        fn(
            [x],
            [
                mk(
                    "broadcast_in_dim",
                    [x],
                    [ArrayType((8, 8, 8), "float32")],
                    {"shape": (8, 8, 8), "dims": (1, 0)},
                    line=103,
                )
            ],
        ),
        "broadcast_in_dim",
        103,
        "must be increasing",
    )


def test_constant_literal_of_the_wrong_size():
    lit = Literal(ArrayType((8,), "float32"), b"\0" * 4)
    rejects(
        fn([], [mk("constant", [], [F8], {"value": lit}, line=104)]),
        "constant",
        104,
        "the literal holds 4 bytes; f32[8] needs 32",
    )


def test_iota_dimension_out_of_range():
    rejects(
        fn([], [mk("iota", [], [I8], {"type": I8, "dimension": 1}, line=105)]),
        "iota",
        105,
        "dimension 1 is not in i32[8]",
    )


# -- the builder rejects the same mistakes when ops are made -----------------------------------


def test_builder_rejects_out_of_bounds_index():
    b = Builder()
    with pytest.raises(VerificationError, match=r"user.py:110: 'get': .*out of bounds"):
        b.create("get", [Value(REF8)], {"indexer": (Int(8),)}, loc=at(110))


def test_builder_rejects_store_dtype_mismatch():
    b = Builder()
    with pytest.raises(VerificationError, match=r"user.py:111: 'store': stored value has type"):
        b.create("store", [Value(REF8), Value(I8)], {"indexer": FULL8}, loc=at(111))


def test_builder_rejects_run_scoped_yielding_a_ref():
    scratch = Value(REF8)
    with pytest.raises(VerificationError, match=r"user.py:112: 'run_scoped': result 0 is a Ref"):
        Builder().create("run_scoped", [], {}, [Block((scratch,), (), (scratch,))], loc=at(112))


def test_builder_rejects_unknown_op():
    with pytest.raises(VerificationError, match=r"user.py:113: 'sqr': unknown op"):
        Builder().create("sqr", [Value(F8)], loc=at(113))
