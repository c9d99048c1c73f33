"""Cleanup's constant folding and algebraic identities (``passes/fold.py``,
``passes/cleanup_identities.py``): random programs over constants and parameters of every dtype
mean the same bits before and after; each identity fires where it is exact and stays where it
is not (with an input showing why); every convert round trip that folds is checked on every bit
pattern of its dtype; folding respects its size limits, effects and run-time errors."""

import random

import numpy as np
import pytest
from cleanup_harness import assert_same_meaning, cleaned, const, make, names, op
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from minipallas.ir import ArrayType, Builder, Dyn, Literal, Slice, dtypes, params
from minipallas.ir.errors import MiniPallasError
from minipallas.ir.interpret import interpret
from minipallas.ir.opset.arrays import ARITHMETIC, BITWISE, COMPARISONS, SHIFTS, UNARY
from minipallas.passes.cleanup import cleanup, count_ops
from minipallas.passes.cleanup_identities import holds
from minipallas.passes.fold import MAX_ELEMENTS, MAX_SPLAT
from minipallas.passes.pipeline import run

INTS = ("int32", "int16", "int8", "uint32", "uint16", "uint8")
FLOATS = ("float32", "bfloat16", "float16")


def specials(dtype, n, rng):
    """``n`` values of ``dtype``: the edges (0, 1, -1, extremes, -0.0, inf, NaN, subnormals)
    and random ones."""
    if dtype == "bool":
        return rng.integers(0, 2, n).astype(bool)
    if dtype in INTS:
        info = np.iinfo(dtypes.to_numpy(dtype))
        edges = np.array([0, 1, -1, 2, info.min, info.max, 7], np.int64)
        pool = np.concatenate([edges, rng.integers(info.min, info.max, 8, endpoint=True)])
        return rng.choice(pool, n).astype(dtypes.to_numpy(dtype))
    edges = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, np.inf, -np.inf, np.nan, 1e-40, -3e-39, 65504.0]
    pool = np.concatenate([edges, rng.standard_normal(8) * 4])
    return Literal.of(rng.choice(pool, n), dtype).array()


# --- random programs -------------------------------------------------------------------------

SHAPES = ((), (4,), (2, 4))
BINARY = (*ARITHMETIC, *BITWISE, *SHIFTS, *COMPARISONS)
PICKS = ("binary",) * 6 + ("unary", "unary", "select", "convert", "convert", "shape")


def _constant(r, t):
    """A constant of type ``t``: often a splat of 0, 1 or all ones (what identities look for)."""
    kind = r.choice(("zero", "one", "ones", "splat", "random"))
    rng = np.random.default_rng(r.getrandbits(32))
    if kind == "zero":
        array = np.zeros(t.shape, dtypes.to_numpy(t.dtype))
    elif kind == "one":
        array = np.ones(t.shape, dtypes.to_numpy(t.dtype))
    elif kind == "ones" and (t.dtype == "bool" or t.dtype in INTS):
        array = np.full(t.shape, 0xFF, np.uint8).view(bool if t.dtype == "bool" else np.uint8)
        array = (
            np.full(t.shape, -1).astype(dtypes.to_numpy(t.dtype)) if t.dtype != "bool" else array
        )
    elif kind == "splat":
        array = np.full(t.shape, specials(t.dtype, 1, rng)[0])
    else:
        array = specials(t.dtype, max(t.size, 1), rng)[: t.size].reshape(t.shape)
    return Literal.of(array, t.dtype)


def _step(r, b, pool):
    """Adds one random op over values of ``pool`` (or fresh constants) to ``b``; None if the
    drawn op does not type-check."""
    x = r.choice(pool)
    t = x.type

    def operand():
        if r.random() < 0.4:  # a constant of x's type
            return b.create("constant", [], {"value": _constant(r, t)}).result
        return r.choice([v for v in pool if v.type == t])  # x itself among them: x op x

    pick = r.choice(PICKS)
    attrs = {}
    if pick == "binary":
        name, args = r.choice(BINARY), [x, operand()]
        if r.random() < 0.5:
            args.reverse()
    elif pick == "unary":
        name, args = r.choice(UNARY), [x]
    elif pick == "select":
        mask = ArrayType(t.shape, "bool")
        masks = [v for v in pool if v.type == mask]
        if masks and r.random() < 0.5:
            m = r.choice(masks)
        else:
            m = b.create("constant", [], {"value": _constant(r, mask)}).result
        name, args = "select", [m, x, operand()]
    elif pick == "convert":
        name, args, attrs = "convert", [x], {"dtype": r.choice(dtypes.NAMES)}
    elif t.shape == ():
        name, args, attrs = "broadcast_in_dim", [x], {"shape": (4,), "dims": ()}
    elif t.shape == (4,):
        name, args, attrs = "broadcast_in_dim", [x], {"shape": (2, 4), "dims": (1,)}
    else:
        name, args, attrs = "reshape", [x], {"shape": (8,)}
    try:
        return b.create(name, args, attrs).result
    except MiniPallasError:  # e.g. a float op on ints
        return None


def folding_program(r):
    """A straight-line program of elementwise ops, converts, selects and shape changes over a
    few parameters and many constants of every dtype, drawn with ``random.Random`` ``r``."""
    types = [ArrayType(r.choice(SHAPES), r.choice(dtypes.NAMES)) for _ in range(r.randint(1, 3))]
    ps = params(types)
    b = Builder()
    pool = list(ps)
    for _ in range(r.randint(1, 3)):  # constants to start from
        pool.append(b.create("constant", [], {"value": _constant(r, r.choice(types))}).result)
    for _ in range(r.randint(4, 24)):
        value = _step(r, b, pool)
        if value is not None:
            pool.append(value)
    results = [r.choice(pool[len(ps) :]) for _ in range(r.randint(1, 4))]
    return b.function("f", ps, results)


def edge_inputs(fn, seed):
    rng = np.random.default_rng(seed)
    return [
        specials(t.dtype, max(t.size, 1), rng)[: t.size].reshape(t.shape) for t in fn.param_types
    ]


@settings(
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.randoms(use_true_random=False), st.integers(0, 2**16))
def test_folding_and_identities_keep_the_bits(r, seed):
    """The interpreter gives the same bytes before and after cleanup, on edge-value inputs."""
    fn = folding_program(r)
    note(str(fn))
    note(str(cleaned(fn, args=edge_inputs(fn, seed))))


def test_a_bool_literal_of_odd_bytes_folds_to_the_bits_the_program_computes():
    """The program that made ``make test`` fail at random: its ``true`` constants were built
    from the byte 0xFF (``_constant``'s "ones"), cleanup's ``or x, true -> true`` returned that
    literal, and the cleaned program gave 0xFF where the original computes ``or`` (0x01). Bool
    literals now hold 0 or 1 whatever they are built from (``ir/literal.py``)."""
    fn = folding_program(random.Random(3035))
    odd = [o for o in fn.walk() if o.name == "constant" and o.results[0].type.dtype == "bool"]
    assert odd and all(o.attrs["value"].data == b"\x01" for o in odd)
    out = cleaned(fn, args=edge_inputs(fn, 3035))
    assert [o.name for o in out.walk()] == ["constant"]


def test_random_programs_do_fold():
    """The property above is not vacuous: cleanup removes most of its programs' ops."""
    before = after = 0
    for seed in range(60):
        fn = folding_program(random.Random(seed))
        out = cleaned(fn, args=edge_inputs(fn, seed))
        before, after = before + count_ops(fn), after + count_ops(out)
    assert after < before / 2, (before, after)


# --- identities -------------------------------------------------------------------------------

V8 = 8  # elements per test vector


def _typed_const(b, dtype, kind):
    value = {"zero": 0, "one": 1, "ones": -1}[kind]
    array = np.full((V8,), value).astype(dtypes.to_numpy(dtype))  # -1 wraps to all ones
    return b.create("constant", [], {"value": Literal.of(array, dtype)}).result


# (op, constant kind, constant on the left, what remains: "x" or "c")
FIRES = [
    *[(name, "zero", left, "x") for name in ("add", "or", "xor") for left in (False, True)],
    ("sub", "zero", False, "x"),
    *[(name, "zero", False, "x") for name in SHIFTS],
    *[("mul", "one", left, "x") for left in (False, True)],
    ("div", "one", False, "x"),
    *[("and", "ones", left, "x") for left in (False, True)],
    *[(name, "zero", left, "c") for name in ("mul", "and") for left in (False, True)],
    *[("or", "ones", left, "c") for left in (False, True)],
]


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize(("name", "kind", "left", "remains"), FIRES)
def test_integer_identities_fire_and_are_exact(dtype, name, kind, left, remains):
    def build(b, x):
        c = _typed_const(b, dtype, kind)
        return [op(b, name, *((c, x) if left else (x, c))), c]

    fn = make([ArrayType((V8,), dtype)], build)
    out = cleaned(fn, 2, 1, args=[specials(dtype, V8, np.random.default_rng(1))])
    want = out.params[0] if remains == "x" else out.body.results[1]
    assert out.body.results[0] is want


def test_idempotent_involutive_and_bool_identities():
    def build(b, n, p):
        t, f = const(b, True, "bool", (V8,)), const(b, False, "bool", (V8,))
        return [
            *(op(b, name, n, n) for name in ("and", "or", "max", "min")),
            op(b, "neg", op(b, "neg", n)),
            op(b, "not", op(b, "not", n)),
            op(b, "not", op(b, "not", p)),
            op(b, "and", t, p),
            op(b, "or", p, f),
            op(b, "xor", f, p),
        ]

    types = [ArrayType((V8,), "int8"), ArrayType((V8,), "bool")]
    rng = np.random.default_rng(2)
    out = cleaned(make(types, build), args=[specials(t.dtype, V8, rng) for t in types])
    assert count_ops(out) == 0
    assert out.body.results == (out.params[0],) * 6 + (out.params[1],) * 4


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(
    ("name", "value", "why"),
    [
        ("add", 0.0, -0.0),  # -0.0 + 0.0 is +0.0
        ("add", -0.0, 1e-40),  # a subnormal flushes
        ("sub", 0.0, 1e-40),
        ("mul", 1.0, 1e-40),
        ("div", 1.0, 1e-40),
        ("max", None, 1e-40),  # max(x, x) flushes too
    ],
)
def test_float_identities_do_not_fire(dtype, name, value, why):
    """Each stays, and an input shows the identity would change the bits."""

    def build(b, x):
        c = x if value is None else const(b, value, dtype, (V8,))
        return [op(b, name, x, c)]

    fn = make([ArrayType((V8,), dtype)], build)
    rng = np.random.default_rng(3)
    x = specials(dtype, V8, rng)
    x[0] = Literal.of(why, dtype).array()
    out = cleaned(fn, args=[x])
    assert name in names(out)
    (got,) = interpret(fn, x)
    if dtype != "float16" or why != 1e-40:  # float16 has no flushing: only -0.0 shows it
        assert got.tobytes() != x.tobytes()


# --- convert round trips ----------------------------------------------------------------------


def _every(dtype):
    """Every bit pattern of a dtype of at most 16 bits."""
    if dtype == "bool":
        return np.array([False, True])
    width = dtypes.to_numpy(dtype).itemsize
    unsigned = {1: np.uint8, 2: np.uint16}[width]
    return np.arange(2 ** (8 * width)).astype(unsigned).view(dtypes.to_numpy(dtype))


def round_trip(b, v, mid, src):
    return op(b, "convert", op(b, "convert", v, dtype=mid), dtype=src)


SMALL = [d for d in dtypes.NAMES if dtypes.to_numpy(d).itemsize <= 2]


@pytest.mark.parametrize("src", SMALL)
def test_convert_round_trips_fold_exactly_when_the_middle_holds_every_value(src):
    """On every bit pattern: where ``holds``, the pair folds and the interpreter on the pair
    gives each value back (a NaN: a NaN of the same sign); elsewhere the pair stays, and some
    non-NaN value does not come back, so ``holds`` is no stricter than it must be."""
    x = _every(src)
    t = ArrayType(x.shape, src)
    isnan = np.isnan(x.astype(np.float32)) if src in FLOATS else np.zeros(x.shape, bool)
    for mid in dtypes.NAMES:
        if mid == src:
            continue
        fn = make([t], lambda b, v, mid=mid: [round_trip(b, v, mid, src)])
        out = cleanup(fn)
        (back,) = interpret(fn, x)
        changed = back.view(np.uint8).reshape(x.size, -1) != x.view(np.uint8).reshape(x.size, -1)
        changed = changed.any(axis=1)
        if holds(mid, src):
            assert count_ops(out) == 0 and out.body.results == out.params, mid
            assert not changed[~isnan].any(), mid
            assert np.isnan(back[isnan].astype(np.float32)).all(), mid
            assert (
                np.signbit(back[isnan].astype(np.float32))
                == np.signbit(x[isnan].astype(np.float32))
            ).all()
        else:
            assert count_ops(out) == 2, mid
            assert changed[~isnan].any(), mid


def test_convert_round_trips_of_32_bit_dtypes():
    """i32 -> u32 -> i32 and back fold (wrapping is a bijection); nothing through f32 does."""
    rng = np.random.default_rng(4)
    for src in ("int32", "uint32", "float32"):
        x = specials(src, 64, rng)
        for mid in dtypes.NAMES:
            if mid == src:
                continue
            fn = make(
                [ArrayType((64,), src)], lambda b, v, mid=mid, src=src: [round_trip(b, v, mid, src)]
            )
            out = cleaned(fn, args=[x])
            assert (count_ops(out) == 0) == ({src, mid} == {"int32", "uint32"}), (src, mid)


# --- what folding leaves alone ------------------------------------------------------------------


def test_folding_limits():
    """Non-splat results up to MAX_ELEMENTS fold; larger ones only as splats, up to MAX_SPLAT."""

    def build(b):
        small = b.create("constant", [], {"value": Literal.of(np.arange(MAX_ELEMENTS), "int32")})
        large = b.create(
            "constant", [], {"value": Literal.of(np.arange(MAX_ELEMENTS + 1), "int32")}
        )
        s = const(b, 3, "int32")
        return [
            op(b, "add", small.result, small.result),
            op(b, "add", large.result, large.result),
            op(b, "broadcast_in_dim", s, shape=(MAX_SPLAT,), dims=()),
            op(b, "broadcast_in_dim", s, shape=(MAX_SPLAT + 1,), dims=()),
        ]

    out = cleaned(make([], build))
    kinds = [
        out.body.ops[[o.results[0] for o in out.body.ops].index(r)].name for r in out.body.results
    ]
    assert kinds == ["constant", "add", "constant", "broadcast_in_dim"]


def test_effects_and_run_time_errors_are_not_folded():
    """A print of a constant stays; a constant out-of-range dynamic index, which
    ``interpret(checks=True)`` reports, stays for run time; an in-range one folds."""

    def build(b):
        x = b.create("constant", [], {"value": Literal.of(np.arange(8.0), "float32")}).result
        b.create("debug_print", [x], {"fmt": "x = {}", "names": ("",), "options": ()})
        window = (Slice(Dyn(0), 4, 1),)
        inside = op(b, "dynamic_slice", x, const(b, 2, "int32"), indexer=window)
        outside = op(b, "dynamic_slice", x, const(b, 6, "int32"), indexer=window)
        return [inside, outside]

    fn = make([], build)
    out = cleanup(fn)
    assert names(out).count("debug_print") == 1
    assert names(out).count("dynamic_slice") == 1
    assert_same_meaning(fn, out)


def test_fold_false_keeps_constants_and_identities():
    """``cleanup{fold=false}`` is the cleanup without folding and identities (for comparison)."""

    def build(b, n):
        two, zero = const(b, 2, "int32"), const(b, 0, "int32")
        return [op(b, "eq", two, zero), op(b, "add", n, zero)]

    fn = make([ArrayType((), "int32")], build)
    kept = run(fn, "cleanup{fold=false}", verify=True)
    assert names(kept) == ["constant", "constant", "eq", "add"]
    assert names(run(fn, "cleanup", verify=True)) == ["constant"]
    assert_same_meaning(fn, kept)
