"""A corpus of upstream-traced programs over refs, each run three ways by the difftest harness
(minipallas's interpreter, minipallas.compile, upstream's discharge_state + evaluation).

Every program is written the way a JAX/Pallas user writes it (``ref[...]``, ``ref.at``, views,
``pl.run_scoped``, ``pl.load``/``pl.store``, ``lax`` loops and branches). ``expect`` names the
finding a case is known to produce (``minipallas.tools.difftest.KNOWN``): the upstream defects are
xfail in ``test_corpus.py``; the semantic differences are checked to be classified as such.

This file is also a module of programs for the command line:
``minipallas-difftest minipallas/tools/corpora/difftest_cases.py``.
"""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import minipallas as mp
from minipallas.lowering.compat.jax_private import (
    pallas_primitives,
    state_discharge,
    state_primitives,
)
from minipallas.tools.difftest import Case, ref

# pl.load / pl.store: jax 0.10.2 no longer exports them
pl_load, pl_store = pallas_primitives.load, pallas_primitives.store

F32, BF16, I32 = np.float32, ml_dtypes.bfloat16, np.int32
_rng = np.random.default_rng(0)


def floats(*shape, dtype=F32):
    return np.round(_rng.standard_normal(shape) * 4, 2).astype(dtype)


def ints(*shape, lo=-6, hi=10):
    return _rng.integers(lo, hi, shape).astype(I32)


def bools(*shape):
    return _rng.random(shape) < 0.5


CASES: list[Case] = []


def case(*args, expect=None, ulps=0, reference=None):
    """Registers the decorated function as a corpus case with these inputs."""

    def register(fn):
        CASES.append(Case(fn.__name__, fn, args, ulps, expect, reference))
        return fn

    return register


# -- state ops, one indexer kind at a time --------------------------------------------------


@case(ref(floats(4, 6)))
def static_int_and_slice(r):
    v = r[1, 2:5]
    r[3, 0:3] = v * 2.0
    return v


@case(ref(floats(4, 6)), np.int32(-1))
def dynamic_int_negative(r, i):
    row = r[i]  # upstream wraps -1 to the last row; the import does the same
    r[i, 0] = 7.0
    return row


@case(ref(floats(8)), np.int32(6))
def dynamic_slice_clamped(r, i):
    w = r[pl.ds(i, 4)]  # start 6 is clamped to 4 so the window fits
    r[pl.ds(i - 9, 3)] = w[:3] + 1.0
    return w


@case(ref(floats(9)))
def strided_slice(r):
    v = r[1::3]
    r[0:6:2] = v * -1.0
    return v


@case(ref(floats(3, 4)), expect="strided-slice-with-int-index")
def strided_slice_with_int(r):
    return r[0, ::2]


@case(ref(floats(5)), ints(4, lo=-7, hi=8))
def array_index_gather(r, idx):
    return r[idx]  # out of range positions clamp; negative ones wrap once first


@case(ref(floats(5)), np.array([4, -1, 7, 0], I32))
def array_index_scatter(r, idx):
    r[idx] = jnp.arange(4, dtype=F32)  # 7 is dropped; -1 wraps to 4 (last write wins)


@case(ref(ints(4, 5)), np.array([1, 3, 1], I32))
def array_index_addupdate_duplicates(r, idx):
    state_primitives.ref_addupdate(r, (idx, slice(1, 4)), jnp.full((3, 3), 5, I32))


@case(ref(floats(4, 5, 6)), np.array([0, 3], I32), np.array([5, 1], I32))
def array_indices_split_by_slice(r, a, b):
    return r[a, 1:4, b]  # numpy places the broadcast dimension first


REF4 = mp.RefType((4,), "float32")
INDEX = mp.ArrayType((), "int32")


@case(
    ref(floats(4)),
    np.int32(-1),
    reference=mp.trace(lambda r, i: r[i], REF4, INDEX, name="negative_index_vs_minipallas"),
)
def negative_index_vs_minipallas(r, i):
    return r[i]  # upstream: r[3]; the same program in minipallas too (the front end wraps)


@case(
    ref(floats(4)),
    np.int32(-1),
    expect="negative-dynamic-index",
    reference=mp.parse(
        "func @negative_index_in_ir(%0: Ref{f32[4]}, %1: i32[]) -> (f32[]) {\n"
        "  %2 = get %0[%1] : f32[]\n"
        "  return %2\n"
        "}"
    ),
)
def negative_index_in_ir(r, i):
    return r[i]  # upstream: r[3]; the IR op itself (written as text) clamps: r[0]


@case(
    ref(floats(4)),
    np.int32(2),
    expect="gather-window-clamp",
    reference=mp.trace(
        lambda r, i: r[mp.ds(i, 2, 2)], REF4, INDEX, name="strided_window_vs_minipallas"
    ),
)
def strided_window_vs_minipallas(r, i):
    return r[pl.ds(i, 2, 2)]  # upstream: positions 2, 4 -> [r2, r3]; minipallas: [r1, r3]


@case(ref(floats(4, 5)), np.int32(2), np.array([[0, 4], [1, 2]], I32))
def dynamic_int_with_array(r, i, idx):
    return r[i, idx]


@case(ref(np.array(2.5, F32)), ref(np.array(3, I32)))
def zero_d_refs(x, n):
    x[...] = x[...] * 2.0
    n[()] = n[()] + 1
    return x[()] + n[...].astype(F32)


# -- views -----------------------------------------------------------------------------------


@case(ref(floats(6, 8)), np.int32(3))
def at_chain(r, i):
    v = r.at[1:5].at[2][pl.ds(i, 4)]  # rows 1..4, then row 3 of r, then columns i..i+3
    r.at[0:2][1, :] = jnp.zeros((8,), F32)
    return v


@case(ref(floats(4, 4)))
def reshape_view_read(r):
    return r.reshape(16)[3:9], r.reshape(2, 8)[1]


@case(ref(floats(2, 4)), expect="swap-through-reshape-or-bitcast")
def reshape_view_write(r):
    r.reshape(8)[0:2] = jnp.zeros((2,), F32)


@case(ref(floats(4, 4)))
def at_then_reshape_read(r):
    return r.reshape(16).at[3:9].reshape(2, 3)[1]


@case(ref(floats(2, 4)))
def bitcast_view_read(r):
    return r.bitcast(jnp.int32)[1]


@case(ref(floats(4)), expect="bitcast-view-rank-below-2")
def bitcast_view_rank_1(r):
    return r.bitcast(jnp.int32)[0]


@case(ref(floats(4, 4)), expect="transpose-view")
def transpose_view(r):
    return r.transpose((1, 0))[0]


@case(ref(floats(4)), expect="addupdate-through-view")
def addupdate_through_view(r):
    state_primitives.ref_addupdate(r.at[1:3], (0,), np.float32(1.0))


@case(ref(floats(1)), expect="addupdate-through-view")
def addupdate_through_reshape(r):
    state_primitives.ref_addupdate(r.reshape(), (), np.float32(2.0))  # found by the upstream fuzzer


@case(ref(floats(4)), expect="empty-slice-at-end")
def empty_slice_at_end(r):
    return r[4:4]


@case(ref(floats(2, 2)), expect="empty-strided-slice")
def empty_strided_slice(r):
    return r[:, 1:1:2]


# -- scoped scratch ------------------------------------------------------------------------


@case(ref(floats(4)), ref(np.zeros(4, F32)))
def run_scoped_closed_over(x, o):
    def body(s):
        s[...] = x[...] * 3.0  # x and o are closed over
        o[...] = s[...] + 1.0
        return s[0]

    return pl.run_scoped(body, pl.ANY((4,), F32))


@case(ref(floats(2, 4)), ref(np.zeros((2, 4), F32)))
def run_scoped_nested(x, o):
    def outer(a):
        a[...] = x[...]

        def inner(b, c):
            b[...] = a[...] * 2.0
            c[...] = jnp.ones((2, 4), I32)
            o[...] = b[...] + c[...].astype(F32)
            return c[1, 2]

        return pl.run_scoped(inner, pltpu.VMEM((2, 4), F32), pltpu.SMEM((2, 4), I32))

    return pl.run_scoped(outer, pl.ANY((2, 4), F32))


@case(ref(np.zeros(4, F32)), ref(np.zeros(4, I32)))
def run_scoped_fill_values(of, oi):
    # Scratch read before written holds upstream's fill values (NaN, integer minimum); the
    # interpreter gives the same, so this agrees (it would not be compared bit for bit if it
    # disagreed: see the uninitialized-read finding).
    def body(a, b):
        of[...] = a[...]
        oi[...] = b[...]

    pl.run_scoped(body, pl.ANY((4,), F32), pl.ANY((4,), I32))


@case(ref(floats(4)), expect="jit-call-with-scratch-ref")
def jit_call_with_scratch(o):
    def body(s):
        s[...] = jnp.ones((4,), F32)
        jax.jit(lambda r, q: q.__setitem__(0, r[1]))(s, o)  # a scratch ref and an outer one

    pl.run_scoped(body, pl.ANY((4,), F32))


# -- Pallas masked load / store --------------------------------------------------------------


@case(ref(floats(8)), bools(8))
def masked_load_with_other(r, m):
    return pl_load(r, (pl.ds(0, 8),), mask=m, other=-1.0)


@case(
    ref(floats(4)),
    bools(4),
    expect="masked-load-fill",
    reference=mp.trace(
        lambda r, m: mp.load(r, (slice(None),), mask=m),
        mp.RefType((4,), "float32"),
        mp.ArrayType((4,), "bool"),
        name="masked_load_without_other",
    ),
)
def masked_load_without_other(r, m):
    return pl_load(r, (slice(None),), mask=m)  # upstream: memory; minipallas: NaN


@case(ref(floats(6)), bools(3), np.int32(2))
def masked_store(r, m, i):
    pl_store(r, (pl.ds(i, 3),), jnp.full((3,), 9.0, F32), mask=m)


@case(ref(floats(6)), np.int32(5))
def pallas_window_past_the_end(r, i):
    # Upstream pads past the end with fill values (it does not shift the window back); the
    # import reproduces that, so minipallas and upstream agree.
    v = pl_load(r, (pl.ds(i, 3),))
    pl_store(r, (pl.ds(i, 3),), jnp.ones((3,), F32))
    return v


@case(ref(floats(2, 4)), expect="pallas-static-int-index")
def pallas_static_int(r):
    return pl_load(r, (0, slice(None)))


@case(ref(floats(4)), expect="pallas-strided-window")
def pallas_strided(r):
    return pl_load(r, (pl.ds(0, 2, 2),))


@case(ref(floats(4, 4)), np.array([0, 2], I32), expect="pallas-slice-and-array-window")
def pallas_slice_and_array(r, i):
    return pl_load(r, (i, slice(None)))


@case(ref(floats(3)), np.array([2, 0], I32), expect="gather-from-constant-value")
def pallas_array_load_of_constant(r, i):
    r[...] = np.array([1.0, 2.0, 3.0], F32)
    return pl_load(r, (i,))


@case(ref(ints(3)), np.array([2, 0], I32), expect="gather-from-constant-value")
def scatter_add_into_constant(r, i):
    r[...] = np.array([1, 2, 3], I32)
    state_primitives.ref_addupdate(r, (i,), jnp.ones((2,), I32))


@case(ref(floats(2, 2)), np.int32(1), expect="pallas-store-through-view")
def pallas_store_through_view(r, i):
    pl_store(r.at[:, 0], (i,), np.float32(-1.0))  # r comes out as the view: f32[2]


# -- loops, scans, branches ----------------------------------------------------------------


@case(ref(floats(5)), ref(np.zeros((), F32)))
def fori_loop_static(x, acc):
    def body(i, carry):
        acc[...] += x[i]
        return carry * 2

    return lax.fori_loop(0, 5, body, np.int32(1))


@case(ref(floats(6)), np.int32(4))
def fori_loop_dynamic_bound(x, n):
    def body(i, s):
        x[i] = x[i] + s
        return s + 1.0

    return lax.fori_loop(1, n, body, np.float32(0.5))


@case(ref(ints(4)))
def while_loop_counting(r):
    def cond(c):
        return c < 4

    def body(c):
        r[c] = r[c] * 2 + c
        return c + 1

    return lax.while_loop(cond, body, np.int32(0))


@case(ref(np.zeros(1, I32)), expect="while-cond-reads-written-ref")
def while_cond_reads_written_ref(r):
    def cond(c):
        return (r[0] < 3) & (c < 5)

    def body(c):
        r[0] = r[0] + 1
        return c + 1

    return lax.while_loop(cond, body, np.int32(0))


@jax.jit
def _frozen_plus_one(x):
    r = jax.new_ref(x)
    r[0] = 3.0
    return jax.freeze(r) + 1.0


@case(ref(np.zeros(4, F32)), floats(4))
def new_ref_empty_ref_and_freeze(o, x):
    s = jax.new_ref(x)

    def body(i, c):
        s[i] += c
        return c * 2.0

    lax.fori_loop(0, 4, body, np.float32(1.0))
    o[...] = _frozen_plus_one(jax.freeze(s))
    e = jax.empty_ref(jax.ShapeDtypeStruct((4,), F32))
    e[...] = o[...] * 2.0
    return e[1:3]


def while_with_state_in_cond(x, y, z):
    """upstream's own test_while_with_state_in_cond (jax tests/state_test.py): its
    expected 10 and 7 keep no writes of the evaluation that ends the loop."""

    @state_discharge.run_state
    def body(x_ref):
        def cond(i):
            x_ref[...] += z
            return i < y

        lax.while_loop(cond, lambda i: i + 1, 0)

    return body(x)


case(I32(0), I32(5), I32(2), expect="while-cond-writes-ref")(while_with_state_in_cond)


@case(ref(np.zeros((), I32)), expect="while-ref-written-by-cond-and-body")
def while_ref_written_by_cond_and_body(r):
    def cond(i):
        r[...] += 1
        return i < 3

    def body(i):
        r[...] += 1
        return i + 1

    return lax.while_loop(cond, body, np.int32(0))


@case(ref(floats(3, 4)), ref(np.zeros(3, F32)))
def scan_over_ref(x, o):
    def body(c, row):
        row[...] = row[...] * 2.0 + c
        return c + 1.0, row[0]

    c, ys = lax.scan(body, np.float32(0.0), x)
    o[...] = ys
    return c


@case(ref(floats(4)), floats(4))
def scan_closing_over_ref(r, xs):
    def body(i, x):
        r[i] = r[i] + x
        return i + 1, r[i] * 2.0

    return lax.scan(body, np.int32(0), xs)


@case(ref(floats(4)), np.bool_(True))
def cond_over_refs(r, p):
    def yes():
        r[0] = 10.0
        return r[1]

    def no():
        r[1] = -10.0
        return r[0]

    return lax.cond(p, yes, no)


@case(ref(ints(3)), np.int32(-4))
def switch_clamped_index(r, k):
    branches = [lambda j=j: r.__setitem__(j, np.int32(100 + j)) or r[2] for j in range(3)]
    return lax.switch(k, branches)


@case(ref(floats(4)), np.float32(3.0))
def jit_call_with_refs(r, x):
    @jax.jit
    def callee(q, y):
        q[0] = q[0] + y
        return q[1]

    return callee(r, x) + callee(r, x)


# -- dtypes ------------------------------------------------------------------------------------


@case(ref(floats(4, 4, dtype=BF16)), floats(4, dtype=BF16))
def bf16_update(r, x):
    r[1] = r[1] * x
    r[3] = -r[2]
    return r[0].astype(F32)


@case(ref(np.zeros(2, F32)), expect="nan-bit-pattern")
def nan_bits_of_folded_constant(r):
    # XLA folds 0/0 of constants to 0x7FC00000; computed at run time (the interpreter, as
    # x86 does) it is 0xFFC00000. Found by the upstream fuzzer.
    zero = -jnp.float32(0.0)
    r[0] = zero / zero
    return lax.bitcast_convert_type(r[0] + r[0], jnp.int32)


@case(ref(bools(6)), bools(6))
def bool_ref(r, m):
    r[...] = r[...] ^ m
    pl_store(r, (slice(None),), jnp.zeros((6,), jnp.bool_), mask=m)
    return jnp.any(r[...])


@case(ref(ints(5)), ints(5, lo=-3, hi=4))
def int32_division(r, d):
    q = lax.div(r[...], d)  # by zero gives -1, truncation toward zero
    r[...] = lax.rem(r[...], d)
    return q


@case(ref(ints(3, 4)), ref(floats(3, 4)), np.int32(1))
def mixed_dtypes_loop(ri, rf, i):
    def body(j, c):
        rf[j] = rf[j] + ri[j].astype(F32) * c
        return c * 0.5

    return lax.fori_loop(i, 3, body, np.float32(1.0))


# -- edges of the compiler that only a few programs reach (bench/mutation/mutate.py's survivors) --


@case(ref(floats(6)))
def read_overlapping_a_write_by_one(r):
    r[0:3] = jnp.ones((3,), F32)
    return r[2:4]  # position 2 was just written: the read must see it


@case(ref(ints(6)))
def int_read_one_past_a_write(r):
    r[1:3] = jnp.full((2,), 7, I32)
    return r[3], r[2]  # 3 is past the written window, 2 is its last position


@case(ref(ints(8)))
def small_write_inside_a_larger_one(r):
    r[0:6] = jnp.zeros((6,), I32)
    r[2:4] = jnp.full((2,), 5, I32)  # hides only part of the earlier write
    return r[...]


@case(ref(floats(8)))
def sigmoid_of_a_ref(r):
    r[...] = jax.nn.sigmoid(r[...])


@case(ref(floats(512, dtype=BF16)))
def long_bf16_sum(r):
    return jnp.sum(r[...])  # jnp accumulates bf16 in f32 and rounds once


@case(ref(np.array([2147483520.0, -2147483648.0, 2.0e9, -2.1e9, 1.5], F32)))
def float_to_int_near_the_range_edges(r):
    return r[...].astype(I32)  # 2147483520 is the largest f32 inside the i32 range


@case(ref(floats(4, 6)), np.array([0, 3], I32), np.int32(5))
def scatter_with_a_dynamic_start_past_the_end(r, idx, i):
    r[idx, pl.ds(i, 2)] = jnp.full((2, 2), -1.0, F32)  # start 5 clamps to 4


@case(ref(floats(4, 9)), np.array([1, 2], I32), np.int32(4))
def gather_strided_dynamic_window(r, idx, i):
    return r[idx, pl.ds(i, 3, 2)]


@case(ref(floats(5)), np.array([-7, 1, 9], I32))
def scatter_index_still_negative_after_wrapping(r, idx):
    r[idx] = jnp.full((3,), 4.0, F32)  # -7 wraps once to -2: out of range, dropped like 9


@case(ref(floats(2, 3, 4)), np.array([2, 0, 3], I32))
def gather_through_a_3d_layout(r, idx):
    return r[:, :, idx]  # XLA's layout (idx, d0, d1) goes back by a 3-cycle, not an involution


@case(np.concatenate([np.full(64, 256.0), np.ones(960)]).astype(BF16), expect="bf16-sum-in-bf16")
def bf16_reduce_sum_accumulates_in_bf16(x):
    # Upstream's XLA gives 16384 (each 1.0 vanishes into a partial sum of 256s); minipallas
    # sums in float32, 17408, as jnp.sum does: a bf16-accumulating lowering agrees with upstream
    return lax.reduce(x, np.array(0, BF16), lax.add, (0,))
