"""State ops: windows of every indexer kind, writes and aliasing, masks, clamping and checks.

numpy's own advanced indexing is the reference for which elements a window holds and in what
layout (``ir.indexing`` follows numpy's rules); expected writes are replayed element by element
in row-major order over a table of positions that numpy indexing produces.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from interp_build import FILE, arr, assert_same, build, ref

from minipallas import InterpretError, interpret, ir
from minipallas.ir import Array, Dyn, Int, Slice
from minipallas.ir.indexing import result_shape


@st.composite
def windows(draw):
    """A shape, an indexer over it, its dynamic operand values and the numpy index it means."""
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=4)))
    group = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    entries, np_index, dyn = [], [], []
    for d in shape:
        kind = draw(st.sampled_from(["int", "dyn_int", "slice", "dyn_slice", "array"]))
        if kind in ("int", "dyn_int"):
            i = draw(st.integers(0, d - 1))
            entries.append(Int(i if kind == "int" else Dyn(len(dyn))))
            if kind == "dyn_int":
                dyn.append(np.int32(i))
            np_index.append(i)
        elif kind in ("slice", "dyn_slice"):
            stride = draw(st.integers(1, 3))
            size = draw(st.integers(0, (d - 1) // stride + 1))
            span = (size - 1) * stride + 1 if size else 0
            start = draw(st.integers(0, d - span))
            entries.append(Slice(start if kind == "slice" else Dyn(len(dyn)), size, stride))
            if kind == "dyn_slice":
                dyn.append(np.int32(start))
            np_index.append(slice(start, start + span, stride) if size else slice(start, start))
        else:
            ishape = tuple(g if draw(st.booleans()) else 1 for g in group)
            values = np.array(
                draw(
                    st.lists(
                        st.integers(0, d - 1),
                        min_size=int(np.prod(ishape)),
                        max_size=int(np.prod(ishape)),
                    )
                ),
                np.int32,
            )
            entries.append(Array(Dyn(len(dyn))))
            dyn.append(values.reshape(ishape))
            np_index.append(values.reshape(ishape))
    return shape, tuple(entries), dyn, tuple(np_index)


def _dyn_types(dyn):
    return [arr(np.shape(v), "int32") for v in dyn]


def _replay(x, np_index, values, accumulate):
    """Expected buffer after writing ``values`` into ``x[np_index]``, element by element."""
    positions = np.arange(x.size).reshape(x.shape)[np_index]
    out = x.copy().reshape(-1)
    for pos, v in zip(
        positions.reshape(-1), np.broadcast_to(values, positions.shape).reshape(-1), strict=True
    ):
        out[pos] = out[pos] + v if accumulate else v
    return out.reshape(x.shape)


@settings(max_examples=150, deadline=None)
@given(windows(), st.sampled_from(["get", "swap", "addupdate"]))
def test_windows_match_numpy_indexing(case, kind):
    shape, indexer, dyn, np_index = case
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    expected_window = x[np_index]
    assert result_shape(indexer, _dyn_types(dyn)) == expected_window.shape
    values = (np.arange(expected_window.size, dtype=np.float32) + 100).reshape(
        expected_window.shape
    )

    def body(b, r, *ps):
        *idx, v = ps
        if kind == "get":
            return b.v("get", r, *idx, indexer=indexer)
        if kind == "swap":
            return b.v("swap", r, *idx, v, indexer=indexer)
        b.op("addupdate", r, *idx, v, indexer=indexer)
        return None

    f = build([ref(shape), *_dyn_types(dyn), arr(values.shape)], body)
    buf = x.copy()
    out = interpret(f, buf, *dyn, values)
    if kind == "get":
        assert_same(out[0], expected_window)
        assert_same(buf, x)
    elif kind == "swap":
        assert_same(out[0], expected_window)
        assert_same(buf, _replay(x, np_index, values, accumulate=False))
    else:
        assert out == ()
        assert_same(buf, _replay(x, np_index, values, accumulate=True))


@settings(max_examples=60, deadline=None)
@given(windows())
def test_pure_indexed_ops_agree_with_state_ops(case):
    """gather/scatter/... (what discharge produces) act exactly like get/swap/addupdate."""
    shape, indexer, dyn, np_index = case
    x = np.arange(np.prod(shape), dtype=np.int32).reshape(shape) * 3
    window = x[np_index]
    values = np.arange(window.size, dtype=np.int32).reshape(window.shape) - 7
    arrays = any(isinstance(e, Array) for e in indexer)
    read = "gather" if arrays else ("dynamic_slice" if dyn else "slice")
    write = "scatter" if arrays else "dynamic_update_slice"

    def body(b, a, *ps):
        *idx, v = ps
        outs = [b.v(read, a, *idx, indexer=indexer), b.v(write, a, *idx, v, indexer=indexer)]
        if arrays:
            outs.append(b.v("scatter_add", a, *idx, v, indexer=indexer))
        return outs

    f = build([arr(shape, "int32"), *_dyn_types(dyn), arr(values.shape, "int32")], body)
    outs = interpret(f, x, *dyn, values)
    assert_same(outs[0], window)
    assert_same(outs[1], _replay(x, np_index, values, accumulate=False))
    if arrays:
        assert_same(outs[2], _replay(x, np_index, values, accumulate=True))


def test_separated_array_indices_go_first():
    """numpy's placement rule: array indices split by a slice put their dims in front."""
    x = np.arange(4 * 5 * 6, dtype=np.float32).reshape(4, 5, 6)
    i, j = np.array([0, 3, 1], np.int32), np.array([5, 0, 2], np.int32)
    indexer = (Array(Dyn(0)), Slice(1, 3, 1), Array(Dyn(1)))
    f = build(
        [ref((4, 5, 6)), arr((3,), "int32"), arr((3,), "int32")],
        lambda b, r, p, q: b.v("get", r, p, q, indexer=indexer),
    )
    (out,) = interpret(f, x, i, j)
    assert out.shape == (3, 3)
    assert_same(out, np.stack([x[i[k], 1:4, j[k]] for k in range(3)]))


def test_duplicate_indices_last_write_wins_and_accumulate():
    idx = np.array([2, 0, 2, 2], np.int32)
    vals = np.float32([1, 2, 3, 4])

    def body(b, r, acc, i, v):
        b.op("swap", r, i, v, indexer=(Array(Dyn(0)),))
        b.op("addupdate", acc, i, v, indexer=(Array(Dyn(0)),))

    f = build([ref((3,)), ref((3,)), arr((4,), "int32"), arr((4,))], body)
    r, acc = np.zeros(3, np.float32), np.full(3, 10, np.float32)
    interpret(f, r, acc, idx, vals)
    assert_same(r, np.float32([2, 0, 4]))
    assert_same(acc, np.float32([12, 10, 18]))


def test_two_indexers_into_one_ref_see_each_others_writes():
    def body(b, r, v):
        b.op("swap", r, v, indexer=(Int(1), Slice(0, 4, 1)))
        col = b.v("get", r, indexer=(Slice(0, 3, 1), Int(2)))
        b.op("addupdate", r, col, indexer=(Int(0), Slice(0, 3, 1)))
        return col, b.v("get", r, indexer=(Int(0), Slice(0, 4, 1)))

    f = build([ref((3, 4)), arr((4,))], body)
    x = np.zeros((3, 4), np.float32)
    col, row0 = interpret(f, x, np.float32([5, 6, 7, 8]))
    assert_same(col, np.float32([0, 7, 0]))
    assert_same(row0, np.float32([0, 7, 0, 0]))
    assert_same(x, np.float32([[0, 7, 0, 0], [5, 6, 7, 8], [0, 0, 0, 0]]))


def test_zero_d_refs_and_bool_and_int_dtypes():
    def body(b, s, flags, counts):
        old = b.v("swap", s, b.const(2.5, "bfloat16"), indexer=())
        b.op("swap", flags, b.const([True, False], "bool"), indexer=(Slice(1, 2, 1),))
        b.op("addupdate", counts, b.const(-3, "int8"), indexer=(Int(1),))
        return old

    f = build([ref((), "bfloat16"), ref((3,), "bool"), ref((2,), "int8")], body)
    s = np.array(1.0, np.dtype("bfloat16"))
    flags, counts = np.zeros(3, bool), np.array([1, -127], np.int8)
    (old,) = interpret(f, s, flags, counts)
    assert_same(old, np.array(1.0, np.dtype("bfloat16")))
    assert float(s) == 2.5
    assert_same(flags, np.array([False, True, False]))
    assert_same(counts, np.array([1, 126], np.int8))  # -127 - 3 wraps


# ---- masked load / store ----


def test_masked_load_reads_other_or_the_fill_value():
    mask = np.array([True, False, True, False])

    def body(b, r, m, o):
        w = (Slice(0, 4, 1),)
        return (
            b.v("load", r, m, o, indexer=w, masked=True, has_other=True),
            b.v("load", r, m, b.const(-1.0, "float32"), indexer=w, masked=True, has_other=True),
            b.v("load", r, m, indexer=w, masked=True),
            b.v("load", r, indexer=w),
        )

    f = build([ref((4,)), arr((4,), "bool"), arr((4,))], body)
    x = np.float32([1, 2, 3, 4])
    with_other, with_scalar, with_fill, plain = interpret(f, x, mask, np.float32([9, 8, 7, 6]))
    assert_same(with_other, np.float32([1, 8, 3, 6]))
    assert_same(with_scalar, np.float32([1, -1, 3, -1]))
    assert_same(with_fill, np.float32([1, np.nan, 3, np.nan]))
    assert_same(plain, x)

    g = build(
        [ref((3,), "int32"), arr((3,), "bool")],
        lambda b, r, m: b.v("load", r, m, indexer=(Slice(0, 3, 1),), masked=True),
    )
    (ints,) = interpret(g, np.int32([4, 5, 6]), np.array([False, True, False]))
    assert_same(ints, np.int32([-(2**31), 5, -(2**31)]))


def test_masked_store_keeps_masked_off_lanes_and_last_enabled_duplicate_wins():
    def body(b, r, g, v, m, i):
        b.op("store", r, v, m, indexer=(Slice(1, 4, 1),), masked=True)
        b.op("store", g, i, v, m, indexer=(Array(Dyn(0)),), masked=True)

    f = build([ref((5,)), ref((3,)), arr((4,)), arr((4,), "bool"), arr((4,), "int32")], body)
    r, g = np.zeros(5, np.float32), np.zeros(3, np.float32)
    v = np.float32([1, 2, 3, 4])
    m = np.array([True, True, True, False])
    interpret(f, r, g, v, m, np.int32([1, 1, 0, 1]))
    assert_same(r, np.float32([0, 1, 2, 3, 0]))
    assert_same(g, np.float32([3, 2, 0]))  # position 1: writes 1, 2 enabled, 4 masked off


# ---- out-of-range dynamic indices: clamp / drop, or report under checks ----


def _oob_program(line=77):
    def body(b, r, i, s, idx, v):
        return (
            b.v("get", r, i, indexer=(Int(Dyn(0)),)),
            b.v("get", r, s, indexer=(Slice(Dyn(0), 3, 2),)),
            b.v("get", r, idx, indexer=(Array(Dyn(0)),), line=line),
            b.v("swap", r, idx, v, indexer=(Array(Dyn(0)),)),
        )

    i32 = arr((), "int32")
    return build([ref((8,)), i32, i32, arr((3,), "int32"), arr((3,))], body)


def test_out_of_range_indices_clamp_and_scatters_drop():
    f = _oob_program()
    x = np.arange(8, dtype=np.float32)
    idx = np.int32([-5, 9, 3])
    a, b, c, d = interpret(f, x, np.int32(-4), np.int32(7), idx, np.float32([10, 20, 30]))
    assert_same(a, np.float32(0))  # -4 clamps to 0
    assert_same(b, np.float32([3, 5, 7]))  # start 7 clamps to 8 - span(5) = 3
    assert_same(c, np.float32([0, 7, 3]))  # gather clamps each index
    assert_same(d, np.float32([0, 7, 3]))
    assert_same(x, np.float32([0, 1, 2, 30, 4, 5, 6, 7]))  # scatter dropped -5 and 9
    a, *_ = interpret(
        f, np.arange(8, dtype=np.float32), np.int32(100), np.int32(-1), idx, np.float32([0, 0, 0])
    )
    assert_same(a, np.float32(7))


@pytest.mark.parametrize(
    "args, op_name, message",
    [
        (
            (np.int32(8), np.int32(0), np.int32([0, 0, 0])),
            "get",
            "index 8 is out of range for size 8",
        ),
        (
            (np.int32(0), np.int32(4), np.int32([0, 0, 0])),
            "get",
            "slice start 4 with span 5 is out of range for size 8",
        ),
        (
            (np.int32(0), np.int32(0), np.int32([0, -1, 0])),
            "get",
            "array index -1 is out of range for size 8",
        ),
    ],
)
def test_checks_report_out_of_range_indices_at_the_op(args, op_name, message):
    f = _oob_program(line=77)
    x = np.arange(8, dtype=np.float32)
    with pytest.raises(InterpretError) as info:
        interpret(f, x, *args, np.float32([0, 0, 0]), checks=True)
    text = str(info.value)
    assert message in text and f"'{op_name}'" in text and f"{FILE}:" in text
    assert info.value.op == op_name
    if "array" in message:
        assert info.value.loc == ir.Location(FILE, 77)
    interpret(f, x, *args, np.float32([0, 0, 0]))  # without checks the same call is fine


def test_checks_report_a_dropped_scatter():
    f = build(
        [ref((4,)), arr((2,), "int32"), arr((2,))],
        lambda b, r, i, v: b.op("swap", r, i, v, indexer=(Array(Dyn(0)),), line=12) and None,
    )
    with pytest.raises(InterpretError, match=r"prog.py:12: 'swap': dimension 0: array index 4"):
        interpret(f, np.zeros(4, np.float32), np.int32([0, 4]), np.float32([1, 2]), checks=True)


def test_accumulation_rounds_after_every_update_and_flushes_like_xla_add():
    def body(b, r, tiny, i, v, t):
        b.op("addupdate", r, i, v, indexer=(Array(Dyn(0)),))
        b.op("addupdate", tiny, t, indexer=(Slice(0, 2, 1),))

    f = build(
        [ref((2,), "bfloat16"), ref((2,)), arr((3,), "int32"), arr((3,), "bfloat16"), arr((2,))],
        body,
    )
    bf16 = np.dtype("bfloat16")
    r = np.array([256, 0], bf16)
    tiny = np.float32([0.0, 1.0])
    interpret(f, r, tiny, np.int32([0, 0, 1]), np.array([1, 1, 1], bf16), np.float32([1e-40, 0]))
    assert_same(r, np.array([256, 1], bf16))  # 256 + 1 rounds back to 256, twice
    assert_same(tiny, np.float32([0.0, 1.0]))  # the subnormal update is flushed


def test_pure_window_ops_clamp_or_report_under_checks():
    def body(b, x, i, idx, u):
        return (
            b.v("dynamic_slice", x, i, indexer=(Slice(Dyn(0), 2, 1),), line=31),
            b.v("dynamic_update_slice", x, i, u, indexer=(Slice(Dyn(0), 2, 1),)),
            b.v("scatter", x, idx, u, indexer=(Array(Dyn(0)),), line=33),
        )

    f = build([arr((4,), "int32"), arr((), "int32"), arr((2,), "int32"), arr((2,), "int32")], body)
    x, u = np.int32([1, 2, 3, 4]), np.int32([8, 9])
    window, updated, scattered = interpret(f, x, np.int32(3), np.int32([5, 0]), u)
    assert_same(window, np.int32([3, 4]))
    assert_same(updated, np.int32([1, 2, 8, 9]))
    assert_same(scattered, np.int32([9, 2, 3, 4]))
    with pytest.raises(
        InterpretError, match="prog.py:31: 'dynamic_slice': dimension 0: slice start 3 with span 2"
    ):
        interpret(f, x, np.int32(3), np.int32([5, 0]), u, checks=True)
    with pytest.raises(InterpretError, match="prog.py:33: 'scatter': dimension 0: array index 5"):
        interpret(f, x, np.int32(2), np.int32([5, 0]), u, checks=True)
