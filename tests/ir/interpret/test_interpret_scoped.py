"""Scoped allocation: fresh buffers per entry, upstream's fill values, and uninitialized reads."""

import ml_dtypes
import numpy as np
import pytest
from interp_build import FILE, arr, assert_same, build, ref

from minipallas import InterpretError, interpret, ir
from minipallas.ir import Array, Dyn, Int, Slice

FILLS = {
    "float32": np.float32(np.nan),
    "bfloat16": np.array(np.nan, ml_dtypes.bfloat16),
    "float16": np.float16(np.nan),
    "int32": np.int32(-(2**31)),
    "int8": np.int8(-128),
    "uint32": np.uint32(0),
    "bool": np.False_,
}


@pytest.mark.parametrize("dtype", list(FILLS))
def test_fresh_scratch_and_uninitialized_values_hold_upstreams_fill(dtype):
    def scoped(b, scratch):
        return b.v("get", scratch, indexer=(Slice(0, 3, 1),))

    def body(b):
        body_block = b.region([ref((3,), dtype)], scoped)
        return (
            b.v("run_scoped", regions=(body_block,)),
            b.v("uninitialized", type=arr((2, 2), dtype)),
        )

    read, value = interpret(build([], body))
    fill = np.asarray(FILLS[dtype])
    assert_same(read, np.full(3, fill, fill.dtype))
    assert_same(value, np.full((2, 2), fill, fill.dtype))


def _loop_reading_scratch_before_writing(line=41):
    """for i in 0..2: run_scoped(scratch): out[i] = scratch[0]; scratch[0] = i + 10."""

    def scoped(b, scratch, out, i):
        seen = b.v("get", scratch, indexer=(Int(0),), line=line)
        b.op("swap", out, i, seen, indexer=(Int(Dyn(0)),))
        ten = b.v("convert", b.v("add", i, b.const(10, "int32")), dtype="float32")
        b.op("swap", scratch, ten, indexer=(Int(0),))

    def loop_body(b, i, out):
        block = b.region([ref((1,)), ref((3,)), arr((), "int32")], scoped)
        b.op("run_scoped", out, i, regions=(block,))

    def body(b, out):
        lo, hi = b.const(0, "int32"), b.const(3, "int32")
        block = b.region([arr((), "int32"), ref((3,))], loop_body)
        b.op("for", lo, hi, out, num_consts=1, regions=(block,))

    return build([ref((3,))], body)


def test_each_entry_into_run_scoped_allocates_fresh_buffers():
    out = np.zeros(3, np.float32)
    interpret(_loop_reading_scratch_before_writing(), out)
    assert_same(out, np.full(3, np.nan, np.float32))  # never the previous iteration's 10, 11


@pytest.mark.parametrize("options", [{"uninitialized": "error"}, {"checks": True}])
def test_uninitialized_read_is_reported_at_the_reading_op(options):
    f = _loop_reading_scratch_before_writing(line=41)
    with pytest.raises(InterpretError) as info:
        interpret(f, np.zeros(3, np.float32), **options)
    assert info.value.op == "get" and info.value.loc == ir.Location(FILE, 41)
    assert f"{FILE}:41: 'get': reads element [] of its window, which was never written" in str(
        info.value
    )


def test_error_mode_tracks_elements_through_views_masks_and_scatters():
    def scoped(b, s, idx, mask):
        row = b.v("ref.at", s, indexer=(Int(1), Slice(0, 4, 1)))
        b.op("swap", row, b.const([1.0] * 4, "float32"), indexer=(Slice(0, 4, 1),))
        b.op("swap", s, idx, b.const([2.0, 3.0], "float32"), indexer=(Int(0), Array(Dyn(0))))
        b.op(
            "store",
            s,
            b.const([4.0] * 4, "float32"),
            mask,
            indexer=(Int(2), Slice(0, 4, 1)),
            masked=True,
        )
        both = b.v("get", s, indexer=(Slice(1, 1, 1), Slice(0, 4, 1)))
        scattered = b.v("get", s, indexer=(Int(0), Slice(3, 1, 1)))
        masked = b.v("load", s, mask, indexer=(Int(2), Slice(0, 4, 1)), masked=True)
        return both, scattered, masked

    def body(b, idx, mask):
        block = b.region([ref((3, 4)), arr((2,), "int32"), arr((4,), "bool")], scoped)
        return tuple(b.op("run_scoped", idx, mask, regions=(block,)).results)

    f = build([arr((2,), "int32"), arr((4,), "bool")], body)
    mask = np.array([True, False, True, False])
    both, scattered, masked = interpret(f, np.int32([3, 3]), mask, uninitialized="error")
    assert_same(both, np.ones((1, 4), np.float32))
    assert_same(scattered, np.float32([3.0]))
    assert_same(masked, np.float32([4, np.nan, 4, np.nan]))
    # index 9 is dropped, so element [0, 3] stays unwritten and the read fails
    with pytest.raises(InterpretError, match="'get': reads element \\[0\\]"):
        interpret(f, np.int32([9, 9]), mask, uninitialized="error")


def test_addupdate_reads_but_swap_does_not():
    def scoped(b, s):
        old = b.v("swap", s, b.const(1.0, "float32"), indexer=())  # first write: not a read
        b.op("addupdate", s, b.const(2.0, "float32"), indexer=())
        return old, b.v("get", s, indexer=())

    f = build(
        [], lambda b: tuple(b.op("run_scoped", regions=(b.region([ref(())], scoped),)).results)
    )
    old, now = interpret(f, uninitialized="error")
    assert_same(old, np.float32(np.nan))
    assert_same(now, np.float32(3.0))

    g = build(
        [],
        lambda b: (
            b.op(
                "run_scoped",
                regions=(
                    b.region(
                        [ref((2,))],
                        lambda c, s: (
                            c.op(
                                "addupdate",
                                s,
                                c.const([1.0, 1.0], "float32"),
                                indexer=(Slice(0, 2, 1),),
                                line=8,
                            )
                            and None
                        ),
                    ),
                ),
            )
            and None
        ),
    )
    with pytest.raises(InterpretError, match=f"{FILE}:8: 'addupdate': reads element \\[0\\]"):
        interpret(g, uninitialized="error")
    interpret(g)  # NaN + 1 without tracking


def test_ref_arguments_count_as_initialized():
    f = build([ref((2,))], lambda b, r: b.v("get", r, indexer=(Slice(0, 2, 1),)))
    (out,) = interpret(f, np.float32([1, 2]), uninitialized="error")
    assert_same(out, np.float32([1, 2]))
