"""Traced indices mean what upstream's mean: a negative one counts once from the end.

Each program is written once against a namespace (``MP``: minipallas, ``JAX``: jax.numpy and
Pallas), traced by ``minipallas.trace`` and by ``jax.make_jaxpr``; minipallas's interpreter,
``compile`` and ``to_jax`` must give upstream's bits (``discharge_state`` under ``jax.jit``),
results first, then the refs' final contents. Index values run over negative and non-negative
ones, in range and out of range where upstream's meaning is one wrap then a clamp (integers,
stride-1 ``ds``, values); strided windows and integer arrays are checked where the window is in
range after the wrap (out of range, upstream clamps or drops each position: documented).
"""

import functools
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from filecheck_util import filecheck
from frontend_helpers import WRAP, arr, find, names, ref, same, traced
from jax.experimental import pallas as pl

import minipallas as mp
import minipallas.numpy as mnp
from minipallas.interop import to_jax
from minipallas.ir import Int
from minipallas.lowering.compat.jax_private import core as jax_core
from minipallas.lowering.compat.jax_private import state_discharge, state_types

MP = types.SimpleNamespace(ds=mp.ds, np=mnp)
JAX = types.SimpleNamespace(ds=pl.ds, np=jnp)

X = np.arange(24, dtype=np.int32).reshape(4, 6)
XR = ("ref", (4, 6), "int32")
XV = ("value", (4, 6), "int32")
I32 = ("value", (), "int32")
ALL = list(range(-9, 8))  # every index of the dims (4 and 6) and beyond, both ways


def _types(specs):
    mine = [(mp.RefType if k == "ref" else mp.ArrayType)(s, d) for k, s, d in specs]
    avals = [jax_core.ShapedArray(s, np.dtype(d)) for _, s, d in specs]
    theirs = [
        state_types.AbstractRef(a) if k == "ref" else a
        for (k, _, _), a in zip(specs, avals, strict=True)
    ]
    return mine, theirs


def upstream(body, avals, args):
    closed = jax.make_jaxpr(functools.partial(body, JAX))(*avals)
    discharged = state_discharge.discharge_state(closed)
    return [np.asarray(o) for o in jax.jit(jax_core.jaxpr_as_fun(discharged))(*args)]


def check(body, specs, *args):
    """``body`` traced by minipallas, run by every minipallas path, equals upstream bit for bit."""
    mine, avals = _types(specs)
    fn = traced(functools.partial(body, MP), *mine)
    want = upstream(body, avals, args)
    bound = [np.array(a) for a in args]
    results = mp.interpret(fn, *bound)
    refs = [b for p, b in zip(fn.params, bound, strict=True) if isinstance(p.type, mp.RefType)]
    paths = {
        "interpret": [*results, *refs],
        "compile": list(mp.compile(fn)(*args)),
        "to_jax": [np.asarray(o) for o in jax.jit(to_jax(fn))(*args)],
    }
    for path, got in paths.items():
        assert len(got) == len(want), path
        for g, w in zip(got, want, strict=True):
            same(g, w)
    return fn


# ----- refs -----


def scalar_int(ns, x, i):
    a = x[i]
    x[i, 1] = 100
    x[i, :] += 1
    return a


def ds_stride_one(ns, x, i):
    a = x[ns.ds(i, 2)]
    x[ns.ds(i, 3), 0] = ns.np.full((3,), 7, ns.np.int32)
    return a


def int_and_ds(ns, x, i):
    a = x[i, ns.ds(i, 2)]
    x[ns.ds(i, 2), i] = ns.np.full((2,), -5, ns.np.int32)
    return a


def views(ns, x, i):
    a = x.at[i][ns.ds(i, 2)]
    x.at[ns.ds(i, 2)][1, i] = 42
    return a


@pytest.mark.parametrize("body", [scalar_int, ds_stride_one, int_and_ds], ids=lambda f: f.__name__)
@pytest.mark.parametrize("i", ALL)
def test_ref_integer_and_ds_indices(body, i):
    check(body, [XR, I32], X, np.int32(i))


# a view start that is still out of range after the wrap (i < -4) is left out: XLA:CPU folds
# dynamic_update_slice(x, dynamic_update_slice(dynamic_slice(x, s), v, j), s) as if s were
# in range, so `compile` and the interpreter disagree there (upstream's program does not fold)
@pytest.mark.parametrize("i", range(-4, 8))
def test_ref_views(i):
    check(views, [XR, I32], X, np.int32(i))


def ds_strided_read(ns, x, i):
    return x[ns.ds(i, 2, stride=2)]  # upstream: positions i, i + 2 (a gather)


def ds_strided_write(ns, x, i):
    x[:, ns.ds(i, 2, stride=2)] = ns.np.full((4, 2), 7, ns.np.int32)


@pytest.mark.parametrize(
    "body, i",
    [(ds_strided_read, i) for i in (-4, -3, 0, 1)]
    + [(ds_strided_write, i) for i in (-6, -4, -3, 0, 3)],
)
def test_ref_strided_ds_with_a_start_in_range_after_the_wrap(body, i):
    check(body, [XR, I32], X, np.int32(i))


IDX = ("value", (3,), "int32")
INDEX_ARRAYS = [[-1, 0, 2], [-4, -3, -2], [3, -1, 1], [-6, 5, -5], [7, -9, 0]]


def ref_arrays(ns, x, idx, i):
    a, b, c = x[idx], x[idx, i], x[i, idx]
    x[idx, 0] = ns.np.full((3,), -7, ns.np.int32)
    x[idx, 2] += 1
    x[i, idx] = ns.np.full((3,), 99, ns.np.int32)
    return a, b, c


@pytest.mark.parametrize("idx", INDEX_ARRAYS)
@pytest.mark.parametrize("i", [-4, -1, 0, 3])
def test_ref_integer_array_entries_wrap_each(idx, i):
    check(ref_arrays, [XR, IDX, I32], X, np.array(idx, np.int32), np.int32(i))


@pytest.mark.parametrize("i", ALL)
def test_int8_indices_wrap_in_int32(i):
    check(int_and_ds, [XR, ("value", (), "int8")], X, np.int8(i))


def test_int8_index_into_a_long_dimension():
    # -1 + 200 does not fit int8: the wrap is computed in int32, as upstream's
    check(lambda ns, x, i: x[i], [("ref", (200,), "int32"), ("value", (), "int8")],
          np.arange(200, dtype=np.int32), np.int8(-1))  # fmt: skip


@pytest.mark.parametrize("i", [0, 3, 5])
def test_unsigned_indices_need_no_wrap(i):
    fn = check(ds_stride_one, [XR, ("value", (), "uint32")], X, np.uint32(i))
    assert not find(fn, "select")


@pytest.mark.parametrize("i", [-4, -1, 0, 3])
def test_load_and_store_index_as_ref_indexing_does(i):
    # upstream's masked load_p pads the ref before its dynamic_slice, so a negative start wraps
    # against the padded size there (documented); minipallas's load/store mean ref[idx]
    def mine(x, i):
        a = mp.load(x, (i, mp.ds(i, 2)))
        mp.store(x, (mp.ds(i, 2), i), mnp.full((2,), 9, mnp.int32))
        return a

    def theirs(ns, x, i):
        a = x[i, ns.ds(i, 2)]
        x[ns.ds(i, 2), i] = ns.np.full((2,), 9, ns.np.int32)
        return a

    fn = traced(mine, mp.RefType((4, 6), "int32"), mp.ArrayType((), "int32"))
    x = X.copy()
    (a,) = mp.interpret(fn, x, np.int32(i))
    want = upstream(theirs, _types([XR, I32])[1], [X, np.int32(i)])
    same(a, want[0])
    same(x, want[1])


# ----- values -----


def value_indices(ns, v, i):
    return v[i], v[1, i], v[i, 2:4], v[i][None, :]


def value_arrays(ns, v, idx, i):
    return v[idx], v[idx, i], v[i, idx], v[idx][:, 1:3]


@pytest.mark.parametrize("i", ALL)
def test_value_integer_indices(i):
    check(value_indices, [XV, I32], X, np.int32(i))


@pytest.mark.parametrize("idx", INDEX_ARRAYS)
@pytest.mark.parametrize("i", [-4, -1, 0, 3])
def test_value_integer_array_entries_wrap_each(idx, i):
    check(value_arrays, [XV, IDX, I32], X, np.array(idx, np.int32), np.int32(i))


# ----- the wrap in the IR -----


def test_the_wrap_is_explicit_ops_before_the_indexed_op():
    fn = traced(lambda r, i, idx: (r[i, mp.ds(i, 4)], r[idx]), ref((8, 128)), arr((), "int32"),
                arr((3,), "int32"))  # fmt: skip
    filecheck(
        str(fn),
        """
        CHECK: func @{{.*}}(%[[R:[0-9]+]]: Ref{f32[8,128]}, %[[I:[0-9]+]]: i32[],
        CHECK-SAME: %[[A:[0-9]+]]: i32[3])
        CHECK: %[[Z:[0-9]+]] = constant 0 : i32[]
        CHECK: %[[NEG:[0-9]+]] = lt %[[I]], %[[Z]] : bool[]
        CHECK: %[[ROWS:[0-9]+]] = constant 8 : i32[]
        CHECK: %[[UP:[0-9]+]] = add %[[I]], %[[ROWS]] : i32[]
        CHECK: %[[W:[0-9]+]] = select %[[NEG]], %[[UP]], %[[I]] : i32[]
        CHECK: %[[COLS:[0-9]+]] = constant 128 : i32[]
        CHECK: %[[W2:[0-9]+]] = select {{.*}} : i32[]
        CHECK: get %[[R]][%[[W]], ds(%[[W2]], 4)] : f32[4]
        CHECK: lt %[[A]], {{.*}} : bool[3]
        CHECK: %[[WA:[0-9]+]] = select {{.*}} : i32[3]
        CHECK: get %[[R]][%[[WA]], :] : f32[3,128]
        """,
    )


def test_static_negative_indices_are_folded():
    fn = traced(lambda r: (r[-1], r[-2, -3], r[np.array([-1, 2])]), ref((8, 128)))
    assert "select" not in str(fn)
    assert [op.attrs["indexer"][0] for op in find(fn, "get")][:2] == [Int(7), Int(6)]


def test_grid_and_counting_loop_indices_need_no_wrap():
    def f(r):
        i = mp.program_id(0)

        def body(k, acc):
            return acc + r[k * 2 + 1, mp.ds(i * 8, 8)]  # sums and products of non-negatives

        return mp.fori_loop(0, 3, body, r[i, :8])

    fn = mp.trace(f, ref((8, 128)))
    assert not find(fn, "select")


def test_a_difference_of_grid_indices_is_wrapped():
    fn = traced(lambda r: r[mp.program_id(0) - 1], ref((4, 8)))
    assert names(fn) == ["program_id", "constant", "sub", *WRAP, "get"]
