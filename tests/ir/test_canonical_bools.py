"""Every bool minipallas computes has the byte 0 or 1: the interpreter's, the folder's and the
compiled program's, for every op, even when its bool inputs hold other bytes.

numpy lets a bool array hold any byte (``np.uint8(0xFF)`` viewed as bool), which compares equal
to True but is other bits. A literal that kept such a byte made cleanup's ``or x, true -> true``
give 0xFF where the program computes 0x01 (``make test`` failed at random on it). So literals
canonicalize their bytes, the interpreter reads bool arguments by value, and this file checks
each op: every region-free op of the round-trip corpus (which uses every op) is rebuilt with each
subset of its operands made bool, and each variant that verifies runs on inputs whose bool bytes
are 0, 1, 2, 0x80 and 0xFF.
"""

import itertools

import numpy as np
import pytest
import textir_programs

from minipallas import compile as compile_fn
from minipallas import interpret
from minipallas.ir import OPS, ArrayType, Builder, Literal, RefType, params
from minipallas.ir.errors import MiniPallasError
from minipallas.ir.types import is_semaphore
from minipallas.passes.cleanup import cleanup
from minipallas.passes.discharge import discharge

GRID = {"program_ids": (1, 1, 1), "grid": (2, 2, 2)}  # program_id / num_programs have values
ODD_BYTES = np.array([0, 1, 2, 0x80, 0xFF], np.uint8)

# ops with no variant that computes or stores a bool (the verifier refuses bool for them, or
# they have no array result); region ops pass values through and are checked on their own below
NO_BOOL = {
    *("abs", "add", "sub", "mul", "div", "rem", "pow", "neg", "atan2", "nextafter"),
    *("asin", "asinh", "atan", "cbrt", "ceil", "cos", "cosh", "erf", "erf_inv", "exp", "exp2"),
    *("expm1", "floor", "log", "log1p", "logistic", "round", "round_even", "rsqrt", "sin"),
    *("sinh", "sqrt", "tan", "tanh", "cummax", "cummin", "clz", "population_count", "shift_left"),
    *("shift_right_arithmetic", "shift_right_logical", "bitcast", "ref.bitcast"),
    *("reduce_sum", "reduce_prod", "cumsum", "cumprod", "cumlogsumexp", "scatter_add"),
    *("iota", "program_id", "num_programs", "axis_index"),
    *("barrier", "semaphore_read", "semaphore_signal", "semaphore_wait"),
    *("addupdate", "uninitialized", "platform_index", "packed_bitcast", "reciprocal"),
    "multiple_of",
    *("atomic_min", "atomic_cas"),  # atomics refuse bool refs
}
# ops that cannot run alone: a wait for a copy never started deadlocks (dma_start's variants
# copy bools, and a wait only counts); a device's exchange and gather_rows mean something only
# where every device of a shard_map runs them together (XLA's collectives move bytes as they are)
NOT_ALONE = {"dma_wait", "exchange", "gather_rows"}
REGION_OPS = {"for", "while", "cond", "call", "mesh_call", "run_scoped"}


def _boolify(t):
    if isinstance(t, RefType):
        return RefType(t.shape, "bool", t.memory_space)
    return ArrayType(t.shape, "bool")


def _variants(op):
    """Single-op functions: ``op`` with each subset of its operands made bool (and its result
    dtype attribute, if any, made bool), for each that verifies."""
    attr_choices = [op.attrs]
    if "dtype" in op.attrs:
        attr_choices.append({**op.attrs, "dtype": "bool"})
    for attrs, n in itertools.product(attr_choices, range(len(op.operands) + 1)):
        for chosen in itertools.combinations(range(len(op.operands)), n):
            if any(is_semaphore(op.operands[i].type) for i in chosen):
                continue
            types = [_boolify(v.type) if i in chosen else v.type for i, v in enumerate(op.operands)]
            ps = params(types)
            b = Builder()
            try:
                made = b.create(op.name, list(ps), attrs)
            except MiniPallasError:
                continue
            results = [r for r in made.results if isinstance(r.type, ArrayType)]
            bools = [t for t in (*types, *(r.type for r in results)) if t.dtype == "bool"]
            if bools:
                yield b.function(f"{op.name}_{len(chosen)}", ps, results)


def _corpus_variants():
    seen = {}
    for build in textir_programs.ALL:
        for op in build().walk():
            if op.regions or op.name in NOT_ALONE or op.name in seen.get(op.name, ()):
                continue
            seen.setdefault(op.name, []).extend(_variants(op))
    return seen


VARIANTS = _corpus_variants()


def _inputs(fn, rng):
    args = []
    for t in fn.param_types:
        if t.dtype == "bool":
            args.append(rng.choice(ODD_BYTES, t.shape).astype(np.uint8).view(bool))
        elif t.dtype.startswith(("int", "uint")):
            args.append(
                np.zeros(t.shape, t.dtype) + np.asarray(rng.integers(0, 2, t.shape), t.dtype)
            )
        else:
            args.append(rng.standard_normal(t.shape).astype(np.float32).astype(t.dtype))
    return args


def _canonical(a):
    a = np.asarray(a)
    return a.dtype != np.bool_ or not np.any(a.view(np.uint8) > 1)


def test_every_op_either_computes_canonical_bools_or_cannot_compute_bools():
    covered = {name for name, fns in VARIANTS.items() if fns}
    assert covered | NO_BOOL | NOT_ALONE | REGION_OPS | {"constant"} == set(OPS)
    assert not covered & NO_BOOL, covered & NO_BOOL


@pytest.mark.parametrize("name", sorted(n for n, fns in VARIANTS.items() if fns))
def test_interpreter_folder_and_xla_give_canonical_bools(name):
    rng = np.random.default_rng(0)
    for fn in VARIANTS[name]:
        args = _inputs(fn, rng)
        copies = [np.array(a, copy=True) for a in args]
        outs = interpret(fn, *copies, **GRID)
        refs = [c for c, t in zip(copies, fn.param_types, strict=True) if isinstance(t, RefType)]
        assert all(_canonical(x) for x in (*outs, *refs)), (str(fn), outs, refs)
        if any(isinstance(t, RefType) for t in fn.param_types) or name in ("program_id",):
            pure = discharge(fn)
            want = interpret(pure, *args, **GRID)
        else:
            pure, want = fn, outs
        got = compile_fn(pure)(*args) if not _needs_grid(pure) else want
        for w, g in zip(want, got, strict=True):
            assert (w.dtype, w.tobytes()) == (np.asarray(g).dtype, np.asarray(g).tobytes()), fn


def _needs_grid(fn):
    return any(op.name in ("program_id", "num_programs") for op in fn.walk())


@pytest.mark.parametrize("name", sorted(n for n, fns in VARIANTS.items() if fns))
def test_folding_bool_constants_gives_canonical_literals(name):
    """Each variant over array operands, its operands constants built from odd bytes: cleanup
    folds it to literals whose bytes are 0 or 1 and equal the interpreter's result."""
    rng = np.random.default_rng(1)
    for fn in VARIANTS[name]:
        if any(isinstance(t, RefType) for t in fn.param_types):
            continue
        args = _inputs(fn, rng)
        b = Builder()
        consts = [
            b.create("constant", [], {"value": Literal(ArrayType(a.shape, t.dtype), a.tobytes())})
            for a, t in zip(args, fn.param_types, strict=True)
        ]
        op = fn.body.ops[0]
        made = b.create(op.name, [c.result for c in consts], op.attrs)
        folded = cleanup(b.function("folded", [], list(made.results)))
        for o in folded.walk():
            if o.name == "constant":
                assert _canonical(o.attrs["value"].array()), o
        want = interpret(fn, *args, **GRID)
        got = interpret(folded, **GRID)
        for w, g in zip(want, got, strict=True):
            assert w.tobytes() == g.tobytes(), str(folded)


def test_region_ops_pass_canonical_bools_through():
    """``for``, ``while``, ``cond``, ``call`` and ``run_scoped`` carry, yield and allocate bools."""
    t = ArrayType((5,), "bool")
    (x,) = params([t])
    b = Builder()
    inner = Builder()
    i, acc = params([ArrayType((), "int32"), t])
    flipped = inner.create("not", [acc]).result
    zero = b.create("constant", [], {"value": Literal.of(0, "int32")}).result
    two = b.create("constant", [], {"value": Literal.of(2, "int32")}).result
    loop = b.create("for", [zero, two, x], {"num_consts": 0}, [inner.block([i, acc], [flipped])])
    fn = b.function("loop", [x], [loop.result, x])
    arg = ODD_BYTES.view(bool)
    outs = interpret(fn, arg.copy())
    assert all(_canonical(o) for o in outs)
    assert outs[0].tobytes() == (ODD_BYTES != 0).astype(np.uint8).tobytes()


def test_a_literal_canonicalizes_bool_bytes_however_it_is_built():
    raw = Literal(ArrayType((5,), "bool"), ODD_BYTES.tobytes())
    assert raw.data == b"\x00\x01\x01\x01\x01"
    assert Literal.of(ODD_BYTES.view(bool), "bool") == raw
    assert Literal.of(np.array([np.nan, -0.0, 0.0, 2.0]), "bool").data == b"\x01\x00\x00\x01"


def test_a_bool_ref_argument_is_canonicalized_in_place():
    (r,) = params([RefType((5,), "bool")])
    fn = Builder().function("noop", [r], [])
    buffer = ODD_BYTES.copy()
    interpret(fn, buffer.view(bool))
    assert buffer.tolist() == [0, 1, 1, 1, 1]
