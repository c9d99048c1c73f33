"""Refs in traced code: every index form as an IR indexer, reads, writes, masked loads and
stores, views, their meaning under the interpreter, and index/store mistakes at the user's line.
"""

import numpy as np
import pytest
from frontend_helpers import (
    WRAP,
    arr,
    find,
    names,
    only,
    raises_at,
    ref,
    run,
    same,
    traced,
    wrapped_index,
)

import minipallas as mp
import minipallas.numpy as jnp
from minipallas.ir import Array, Dyn, Int, Slice

R = ref((8, 128))


def indexer_of(f, *types):
    """Traces ``f`` and returns the single ``get``'s indexer and result type."""
    op = only(traced(f, *types), "get")
    return op.attrs["indexer"], op.result.type


FULL = Slice(0, 128, 1)


@pytest.mark.parametrize(
    "index, expected, shape",
    [
        (lambda r: r[0], (Int(0), FULL), (128,)),
        (lambda r: r[-1], (Int(7), FULL), (128,)),
        (lambda r: r[3, -2], (Int(3), Int(126)), ()),
        (lambda r: r[1:7:2, ::4], (Slice(1, 3, 2), Slice(0, 32, 4)), (3, 32)),
        (lambda r: r[2:], (Slice(2, 6, 1), FULL), (6, 128)),
        (lambda r: r[:-3, 100:1000], (Slice(0, 5, 1), Slice(100, 28, 1)), (5, 28)),
        (lambda r: r[5:2], (Slice(0, 0, 1), FULL), (0, 128)),
        (lambda r: r[...], (Slice(0, 8, 1), FULL), (8, 128)),
        (lambda r: r[..., 3], (Slice(0, 8, 1), Int(3)), (8,)),
        (lambda r: r[2, ...], (Int(2), FULL), (128,)),
        (lambda r: r[(1,)], (Int(1), FULL), (128,)),
        (lambda r: r[mp.ds(2, 4)], (Slice(2, 4, 1), FULL), (4, 128)),
        (lambda r: r[:, mp.ds(0, 16, 8)], (Slice(0, 8, 1), Slice(0, 16, 8)), (8, 16)),
        (lambda r: r[mp.ds(3)], (Slice(0, 3, 1), FULL), (3, 128)),
        (lambda r: r[np.int32(4)], (Int(4), FULL), (128,)),
        (lambda r: r[np.array(5)], (Int(5), FULL), (128,)),
    ],
)
def test_static_indices(index, expected, shape):
    indexer, result = indexer_of(index, R)
    assert indexer == expected
    assert result == arr(shape)


def test_traced_scalar_indices_are_dynamic_operands_in_order():
    def f(r, i, j):
        return r[mp.ds(i, 4), j]

    fn = traced(f, R, arr((), "int32"), arr((), "int8"))
    op = only(fn, "get")
    assert op.attrs["indexer"] == (Slice(Dyn(0), 4, 1), Int(Dyn(1)))
    assert op.operands[0] is fn.params[0]
    assert [wrapped_index(fn, v) for v in op.operands[1:]] == [
        (fn.params[1], 8),
        (fn.params[2], 128),
    ]
    assert op.result.type == arr((4,))


def test_traced_integer_array_index_is_a_gather():
    fn = traced(lambda r, idx: r[idx, 3], R, arr((2, 5), "int32"))
    op = only(fn, "get")
    assert op.attrs["indexer"] == (Array(Dyn(0)), Int(3))
    assert wrapped_index(fn, op.operands[1]) == (fn.params[1], 8)
    assert op.result.type == arr((2, 5))


@pytest.mark.parametrize("index", [np.array([0, -1, 3]), [0, -1, 3]])
def test_numpy_index_arrays_become_int32_constants(index):
    fn = traced(lambda r: r[index], R)
    assert names(fn) == ["constant", "get"]
    const = fn.body.ops[0]
    same(const.attrs["value"].array(), np.array([0, 7, 3], np.int32))
    assert fn.body.ops[1].attrs["indexer"] == (Array(Dyn(0)), FULL)


def test_set_is_a_swap_with_the_value_converted_and_broadcast():
    fn = traced(lambda r: r.__setitem__(0, 1), R)
    assert names(fn) == ["constant", "broadcast_in_dim", "swap"]
    const, bcast, swap = fn.body.ops
    same(const.attrs["value"].array(), np.float32(1))
    assert bcast.result.type == arr((128,))
    assert swap.operands == (fn.params[0], bcast.result)
    assert swap.attrs["indexer"] == (Int(0), FULL)


def test_set_broadcasts_a_row_to_the_window():
    def f(r, row):
        r[...] = row

    fn = traced(f, R, arr((128,)))
    bcast = only(fn, "broadcast_in_dim")
    assert (bcast.attrs["shape"], bcast.attrs["dims"]) == ((8, 128), (1,))


def test_addupdate_load_store_ops():
    def f(r, m, v):
        mp.addupdate(r, (0,), v)
        a = mp.load(r, (mp.ds(0, 8), 0))
        b = mp.load(r, (slice(None), 1), mask=m, other=0.0)
        c = mp.load(r, (slice(None), 2), mask=m, other=a)
        mp.store(r, (slice(None), 3), c, mask=m)
        mp.store(r, 4, v)
        return b

    fn = traced(f, R, arr((8,), "bool"), arr((128,)))
    add = only(fn, "addupdate")
    assert add.attrs["indexer"] == (Int(0), FULL) and add.results == ()
    loads = find(fn, "load")
    assert [(op.attrs["masked"], op.attrs["has_other"]) for op in loads] == [
        (False, False),
        (True, True),
        (True, True),
    ]
    assert loads[1].operands[2].type == arr(()) and loads[2].operands[2] is loads[0].result
    stores = find(fn, "store")
    assert [op.attrs["masked"] for op in stores] == [True, False]
    assert stores[0].operands == (fn.params[0], loads[2].result, fn.params[1])


def test_masked_load_store_and_addupdate_semantics():
    def f(r, o):
        mask = jnp.arange(8) % 2 == 0
        o[0] = mp.load(r, (slice(None), 0), mask=mask, other=-1.0)
        mp.store(o, (1,), r[:, 1] * 10.0, mask=mask)
        mp.addupdate(o, 2, r[:, 2])
        mp.addupdate(o, 2, r[:, 2])

    fn = traced(f, ref((8, 3)), ref((3, 8)))
    x = np.arange(24, dtype=np.float32).reshape(8, 3)
    out = np.full((3, 8), 5, np.float32)
    run(fn, x, out)
    even = np.arange(8) % 2 == 0
    same(out[0], np.where(even, x[:, 0], -1).astype(np.float32))
    same(out[1], np.where(even, x[:, 1] * 10, 5).astype(np.float32))
    same(out[2], (5 + 2 * x[:, 2]).astype(np.float32))


def test_gather_and_scatter_semantics():
    def f(r, idx, o):
        o[idx] = r[idx, 1] + 1

    fn = traced(f, ref((6, 2), "int32"), arr((3,), "int32"), ref((6,), "int32"))
    x = np.arange(12, dtype=np.int32).reshape(6, 2)
    out = np.zeros(6, np.int32)
    idx = np.array([4, 0, 2], np.int32)
    run(fn, x, idx, out)
    expected = np.zeros(6, np.int32)
    expected[idx] = x[idx, 1] + 1
    same(out, expected)


def test_strided_and_dynamic_windows_semantics():
    def f(r, i, o):
        o[...] = r[1:8:3, mp.ds(i, 2, 2)]

    fn = traced(f, ref((8, 8), "int32"), arr((), "int32"), ref((3, 2), "int32"))
    x = np.arange(64, dtype=np.int32).reshape(8, 8)
    out = np.zeros((3, 2), np.int32)
    run(fn, x, np.int32(3), out)
    same(out, x[1:8:3, 3:7:2])


# ----- views -----


def test_views_are_ops_and_chain():
    def f(r, i):
        w = r.at[mp.ds(i, 4)].at[1:3, ::2]
        v = r.reshape(-1, 256).bitcast(jnp.int32).T
        t = r.transpose(1, 0)
        return w[...], v[0], t.at[0][...]

    fn = traced(f, R, arr((), "int32"))
    assert names(fn) == [
        *WRAP, "ref.at", "ref.at", "ref.reshape", "ref.bitcast", "ref.transpose", "ref.transpose",
        "get", "get", "ref.at", "get",
    ]  # fmt: skip
    at1, at2, reshape, bitcast, transpose, transpose2, get_w, get_v, at3, _ = fn.body.ops[5:]
    assert at1.attrs["indexer"] == (Slice(Dyn(0), 4, 1), FULL)
    assert at1.operands[0] is fn.params[0] and wrapped_index(fn, at1.operands[1]) == (
        fn.params[1],
        8,
    )
    assert at2.operands[0] is at1.result and at2.result.type == ref((2, 64))
    assert at2.attrs["indexer"] == (Slice(1, 2, 1), Slice(0, 64, 2))
    assert reshape.attrs["shape"] == (4, 256)
    assert bitcast.attrs["dtype"] == "int32" and bitcast.result.type == ref((4, 256), "int32")
    assert transpose.attrs["permutation"] == transpose2.attrs["permutation"] == (1, 0)
    assert get_w.operands == (at2.result,)
    assert get_v.operands[0] is transpose.result
    assert at3.operands[0] is transpose2.result
    assert fn.result_types == (arr((2, 64)), arr((4,), "int32"), arr((8,)))


def test_writes_through_views_reach_the_buffer():
    def f(r):
        r.at[2:6].at[:, 1][...] = jnp.full((4,), 7, jnp.int32)
        r.T[0, 1] = 9
        r.reshape(16)[15] = -1

    fn = traced(f, ref((8, 2), "int32"))
    x = np.zeros((8, 2), np.int32)
    run(fn, x)
    expected = np.zeros((8, 2), np.int32)
    expected[2:6, 1] = 7
    expected[1, 0] = 9
    expected.reshape(16)[15] = -1
    same(x, expected)


# ----- mistakes, each at the user's line -----


I = arr((), "int32")


@pytest.mark.parametrize(
    "bad, match",
    [
        (lambda r, i, v: r[0, 0, 0], "too many indices: 3 for a value of rank 2"),
        (lambda r, i, v: r[8], "index 8 is out of bounds"),
        (lambda r, i, v: r[-9], "index -9 is out of bounds"),
        (lambda r, i, v: r[..., ...], "single ellipsis"),
        (lambda r, i, v: r[None], "None"),
        (lambda r, i, v: r[i:], "slice bounds must be static"),
        (lambda r, i, v: r[::-1], "step must be positive"),
        (lambda r, i, v: r[1.5], "cannot index with float"),
        (lambda r, i, v: r[True], "a bool is not an index"),
        (lambda r, i, v: r[v], "an index must be an integer"),
        (lambda r, i, v: r[v > 0], "boolean masks are not indices"),
        (lambda r, i, v: r[r], "a ref cannot be an index"),
        (lambda r, i, v: r[np.array([1.0])], "index array must hold integers"),
        (lambda r, i, v: r[np.array([9])], "out-of-bounds"),
        (lambda r, i, v: r[mp.ds(0, 9)], "does not fit"),
        (lambda r, i, v: r[mp.ds(6, 4)], "out of bounds"),
        (lambda r, i, v: r[mp.ds(0, i)], "ds size must be a static"),
        (lambda r, i, v: r[mp.ds(0, -1)], "ds size must be a static, non-negative"),
        (lambda r, i, v: r[mp.ds(0, 2, 0)], "ds stride"),
        (lambda r, i, v: r[mp.ds(v, 2)], "ds start must be an integer scalar"),
        (lambda r, i, v: r[mp.ds(1.0, 2)], "ds start must be an int"),
        (lambda r, i, v: r.at[jnp.arange(2)], "a view cannot use an integer-array index"),
        (lambda r, i, v: r.at[np.array([0, 1])], "a view cannot use an integer-array index"),
        (lambda r, i, v: r.__setitem__(0, v), "dtype mismatch: stored value is f32"),
        (lambda r, i, v: r.__setitem__(0, 1.5), "cannot convert the Python float 1.5"),
        (lambda r, i, v: r.__setitem__(0, 2**40), "does not fit in int32"),
        (lambda r, i, v: r.__setitem__(0, jnp.zeros((3,), jnp.int32)), "shape mismatch"),
        (lambda r, i, v: r.__setitem__(0, r), "stored value is a ref"),
        (lambda r, i, v: mp.load(r, 0, other=1), "'other' is only used with a mask"),
        (lambda r, i, v: mp.load(r, 0, mask=jnp.ones((4,))), "a mask must be bool"),
        (lambda r, i, v: mp.store(v, 0, v), "store needs a ref"),
        (lambda r, i, v: r.reshape(5, 5), "sizes differ"),
        (lambda r, i, v: r.bitcast(jnp.bool_), "cannot bitcast int32 to bool"),
        (lambda r, i, v: r.at[:3].bitcast(jnp.int16).at[:3].bitcast(jnp.int32), "packs 2 rows"),
        (lambda r, i, v: r.at[0].bitcast(jnp.int8), "has none"),
        (lambda r, i, v: r.bitcast("complex64"), "unsupported dtype 'complex64'"),
        (lambda r, i, v: list(r), "not iterable"),
        (lambda r, i, v: r + 1, "'\\+': a ref is a mutable buffer"),
    ],
)
def test_index_and_store_mistakes(bad, match):
    types = (ref((8, 4), "int32"), I, arr((4,)))
    with raises_at(bad.__code__.co_firstlineno, match=match):
        mp.trace(bad, *types)


def test_error_in_a_nested_body_is_at_the_body_line():
    def f(r):
        def body(i, c):
            r[i] = c  # a float carry stored into an int ref
            return c

        mp.fori_loop(0, 4, body, 0.0)

    lines = [f.__code__.co_firstlineno + 2]
    with raises_at(lines[0], match="dtype mismatch"):
        mp.trace(f, ref((4,), "int32"))


def test_fix_suggests_an_explicit_conversion():
    def f(r, v):
        r[...] = v

    with pytest.raises(mp.TraceError) as info:
        mp.trace(f, ref((4,), "bfloat16"), arr((4,)))
    assert "fix: convert it explicitly: value.astype('bfloat16')" in str(info.value)
