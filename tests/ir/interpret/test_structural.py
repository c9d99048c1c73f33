"""The structural ops (reverse, pad, cumulative ops, reduce_prod, sort, top_k, argmax/argmin):
the reference interpreter against the compiled StableHLO module and ``to_jax``, bit for bit,
on random inputs with NaNs, signed zeros, subnormals and ties; float ``reduce_prod`` within
its stated bound (XLA multiplies in its own order).

Each test builds one program holding many independent ops (each on its own parameters), so
XLA compiles once per test rather than once per op (it lowers each op as it would alone: the
cumulative ops' rows-of-16 tree is built per op), and ``to_jax``'s function is jitted once.
Edges are covered where they can differ, not in every dtype x length x axis combination:
order-free cases (integer scans, moving ops) once per dtype, float scans at every length
that changes XLA's tree, in both directions and along both axes."""

import jax
import ml_dtypes
import numpy as np

import minipallas
from minipallas.interop import to_jax
from minipallas.ir import ArrayType, Builder, params
from minipallas.ir import dtypes as mp_dtypes

DTYPES = ("float32", "bfloat16", "int32", "uint32")


def sample(rng, shape, dtype):
    """Random values with ties; floats also get NaN, -0.0, +0.0, inf and a subnormal."""
    np_dtype = mp_dtypes.to_numpy(dtype)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if not mp_dtypes.is_float(dtype):
        return rng.integers(-3 if dtype == "int32" else 0, 4, shape).astype(np_dtype)
    x = np.asarray(np.round(rng.standard_normal(shape) * 4) / 2)
    specials = [np.nan, -np.nan, -0.0, 0.0, np.inf, -np.inf, 1e-40 if dtype == "float32" else 0]
    where = rng.random(shape) < 0.2
    x[where] = rng.choice(specials, int(where.sum()))
    return x.astype(np.float32).astype(np_dtype)


def one_op(name, types, **attrs):
    return many_ops(name, [(name, types, attrs)])


def many_ops(name, ops):
    """One program computing every ``(op name, operand types, attrs)`` of ``ops``, each on its
    own parameters; its results are the ops' results in order."""
    b = Builder()
    xs, results = [], []
    for op_name, types, attrs in ops:
        operands = params(types)
        xs += operands
        results += b.create(op_name, list(operands), attrs).results
    return b.function(name, xs, results)


def labels(ops):
    """One label per result of ``many_ops(ops)``: the op, its operand types and attributes."""
    out = []
    for op_name, types, attrs in ops:
        n = 2 if op_name == "top_k" else len(types) if op_name == "sort" else 1
        out += [f"{op_name}{[str(t) for t in types]}{attrs}#{k}" for k in range(n)]
    return out


def bits(x, nan_bits=True):
    """The bits of ``x``; without ``nan_bits`` every NaN is one NaN."""
    x = np.asarray(x)
    if x.dtype == np.bool_:
        return x
    out = x.view(f"uint{8 * x.dtype.itemsize}").copy()
    if not nan_bits and x.dtype.kind in "fV":
        out[np.isnan(np.asarray(x, np.float32))] = 0
    return out


def assert_all_agree(fn, *args, nan_bits=True, names=None):
    """interpret == compile == to_jax, bit for bit (NaN payloads and signs too if
    ``nan_bits``: arithmetic leaves a NaN's sign to the backend, moving ops keep it)."""
    want = minipallas.interpret(fn, *args)
    ways = (("compile", minipallas.compile(fn)(*args)), ("to_jax", jax.jit(to_jax(fn))(*args)))
    for way, got in ways:
        for k, (w, g) in enumerate(zip(want, got, strict=True)):
            what = names[k] if names else f"result {k}"
            w, g = np.asarray(w), np.asarray(g)
            assert w.dtype == g.dtype and w.shape == g.shape, (way, what)
            same = np.array_equal(bits(w, nan_bits), bits(g, nan_bits))
            assert same, f"{fn.name} {way} {what}:\n{w}\n{g}"


def check_ops(name, ops, rng, nan_bits=True):
    """``many_ops(ops)`` on ``sample`` inputs: every result agrees."""
    fn = many_ops(name, ops)
    args = [sample(rng, p.type.shape, p.type.dtype) for p in fn.params]
    assert_all_agree(fn, *args, nan_bits=nan_bits, names=labels(ops))


def test_reverse_and_pad():
    rng = np.random.default_rng(1)
    pad = {"low": (1, -2), "high": (-1, 3), "interior": (2, 1)}
    ops = []
    for dtype in DTYPES:
        t = ArrayType((3, 5), dtype)
        ops += [("reverse", [t], {"dims": (0, 1)}), ("pad", [t, ArrayType((), dtype)], pad)]
    fn = many_ops("reverse_and_pad", ops)
    assert fn.result_types[1].shape == (1 + 3 + 4 - 1, -2 + 5 + 4 + 3)
    check_ops("reverse_and_pad", ops, rng)


def _cumulative_cases():
    """(op, dtype, shape, axis, reverse), covering what changes XLA's result: each op in each
    float dtype (its rounding, flushing, NaN and signed-zero rules); in float32 and bfloat16
    each op past 16 * 16 elements (two levels of XLA's rows-of-16 tree), cumsum both ways
    there and one past 16 (one level), one element (XLA drops that window in float32 and
    float16, not in bfloat16) and the first axis; float16 at lengths 1 and 40; integers,
    exact in any order, each op once (signed max, unsigned min) along 40 elements."""
    cases = []
    for dtype in ("float32", "bfloat16"):
        cases += [
            ("cumsum", dtype, (2, 300), 1, False),
            ("cumsum", dtype, (2, 300), 1, True),
            ("cumprod", dtype, (2, 300), 1, True),
            ("cummax", dtype, (2, 300), 1, False),
            ("cummin", dtype, (2, 300), 1, True),
            ("cumsum", dtype, (2, 17), 1, True),
            ("cumsum", dtype, (2, 1), 1, False),
            ("cummax", dtype, (2, 1), 1, True),
            ("cumprod", dtype, (40, 3), 0, False),
            ("cummin", dtype, (40, 3), 0, True),
        ]
    cases += [
        ("cumsum", "float16", (2, 1), 1, False),
        ("cumsum", "float16", (2, 40), 1, True),
        ("cumprod", "float16", (2, 40), 1, False),
        ("cummax", "float16", (2, 40), 1, True),
        ("cummin", "float16", (2, 40), 1, False),
        ("cumsum", "int32", (2, 40), 1, False),
        ("cummax", "int32", (40, 3), 0, True),
        ("cumprod", "uint32", (2, 40), 1, True),
        ("cummin", "uint32", (2, 40), 1, False),
    ]
    return cases


def test_cumulative():
    rng = np.random.default_rng(2)
    cases = _cumulative_cases()
    ops = [(name, [ArrayType(shape, dtype)], {"axis": axis, "reverse": reverse})
           for name, dtype, shape, axis, reverse in cases]  # fmt: skip
    args = []
    for name, dtype, shape, _, _ in cases:
        x = sample(rng, shape, dtype)
        if name == "cumprod" and mp_dtypes.is_float(dtype):
            x = (1 + rng.standard_normal(shape) / 8).astype(np.float32).astype(x.dtype)
        if shape == (2, 1):  # what a dropped window keeps and a kept one changes
            x = np.array([[-0.0], [1e-40]], np.float32).astype(x.dtype)
        args.append(x)
    fn = many_ops("cumulative", ops)
    assert_all_agree(fn, *args, nan_bits=False, names=labels(ops))


def test_cumsum_starts_from_the_identity():
    """XLA adds each window to +0: a cumsum of -0.0 is +0.0 (the interpreter says so too)."""
    fn = one_op("cumsum", [ArrayType((3,), "float32")], axis=0, reverse=False)
    (out,) = minipallas.interpret(fn, np.array([-0.0, -0.0, 1e-40], np.float32))
    assert np.array_equal(bits(out), bits(np.zeros(3, np.float32)))
    assert_all_agree(fn, np.array([-0.0, -0.0, 1e-40], np.float32))


def test_reduce_prod():
    """Integers bit for bit; floats (near 1, so no overflow) within 24 roundings."""
    rng = np.random.default_rng(3)
    ops = [("reduce_prod", [ArrayType((4, 3, 6), d)], {"axes": (0, 2)}) for d in DTYPES]
    fn = many_ops("reduce_prod", ops)
    args = []
    for dtype in DTYPES:
        x = sample(rng, (4, 3, 6), dtype)
        if mp_dtypes.is_float(dtype):
            x = (1 + rng.standard_normal(x.shape) / 4).astype(np.float32).astype(x.dtype)
        args.append(x)
    want = minipallas.interpret(fn, *args)
    for got in (minipallas.compile(fn)(*args), to_jax(fn)(*args)):
        for dtype, w, g in zip(DTYPES, want, got, strict=True):
            w, g = np.asarray(w), np.asarray(g)
            assert w.dtype == g.dtype and w.shape == g.shape == (3,), dtype
            if not mp_dtypes.is_float(dtype):
                assert np.array_equal(w, g), dtype
                continue
            eps = float(ml_dtypes.finfo(w.dtype).eps)
            w64, g64 = np.asarray(w, np.float64), np.asarray(g, np.float64)
            assert np.all(np.abs(w64 - g64) <= 24 * eps * np.abs(w64)), dtype


def test_sort_one_key_and_argsort():
    """Along the last dim alone, and along the first with an iota carried along."""
    rng = np.random.default_rng(4)
    ops, args = [], []
    for dtype in [*DTYPES, "bool"]:
        t = ArrayType((3, 33), dtype)
        ops += [
            ("sort", [t], {"dimension": 1, "num_keys": 1}),
            ("sort", [t, ArrayType(t.shape, "int32")], {"dimension": 0, "num_keys": 1}),
        ]
        iota = np.broadcast_to(np.arange(3, dtype=np.int32)[:, None], t.shape).copy()
        args += [sample(rng, t.shape, dtype), sample(rng, t.shape, dtype), iota]
    assert_all_agree(many_ops("sorts", ops), *args, names=labels(ops))


def test_sort_two_keys_and_jnp_order():
    """Lexicographic on two keys; -0 ties +0, subnormals tie zeros, NaNs tie and come last."""
    rng = np.random.default_rng(5)
    t, u = ArrayType((64,), "float32"), ArrayType((64,), "int32")
    fn = one_op("sort", [t, u, u], dimension=0, num_keys=2)
    x, y = sample(rng, t.shape, "float32"), rng.integers(0, 3, 64).astype(np.int32)
    assert_all_agree(fn, x, y, np.arange(64, dtype=np.int32))
    x = np.array([1e-40, 0.0, -0.0, np.nan, -np.nan, -1e-40, 1.0], np.float32)
    seven = [ArrayType((7,), "float32"), ArrayType((7,), "int32"), ArrayType((7,), "int32")]
    (_, _, order) = minipallas.interpret(
        one_op("sort", seven, dimension=0, num_keys=1),
        x,
        np.zeros(7, np.int32),
        np.arange(7, dtype=np.int32),
    )
    assert order.tolist() == [0, 1, 2, 5, 6, 3, 4]


def test_top_k():
    rng = np.random.default_rng(6)
    ops = [("top_k", [ArrayType((3, 20), dtype)], {"k": k})
           for dtype in [*DTYPES, "bool"] for k in (0, 1, 7, 20)]  # fmt: skip
    check_ops("top_ks", ops, rng)


def test_top_k_total_order():
    fn = one_op("top_k", [ArrayType((6,), "float32")], k=6)
    x = np.array([-0.0, np.nan, 0.0, -np.nan, np.inf, 1e-40], np.float32)
    (_, index) = minipallas.interpret(fn, x)
    assert index.tolist() == [1, 4, 5, 2, 0, 3]
    assert_all_agree(fn, x)


def test_argmax():
    rng = np.random.default_rng(7)
    ops = [(name, [ArrayType((5, 12), dtype)], {"axis": axis, "dtype": "int32"})
           for dtype in [*DTYPES, "bool"] for name in ("argmax", "argmin")
           for axis in (0, 1)]  # fmt: skip
    check_ops("args", ops, rng)
    x = np.array([1.0, -0.0, np.nan, 0.0, np.nan, 3.0], np.float32)
    for name in ("argmax", "argmin"):
        fn = one_op(name, [ArrayType((6,), "float32")], axis=0, dtype="int32")
        (i,) = minipallas.interpret(fn, x)
        assert int(i) == 2  # the first NaN wins
