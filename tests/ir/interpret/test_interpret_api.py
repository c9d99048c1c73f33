"""``interpret``'s contract: argument checking, results, errors for unknown ops, and speed."""

import ml_dtypes
import numpy as np
import pytest
from interp_build import FILE, arr, assert_same, build, ref

from minipallas import InterpretError, MiniPallasError, interpret, ir
from minipallas.ir import Int, Slice
from minipallas.ir.interpret import RULES


def _add_into_ref():
    def body(b, r, x):
        b.op("addupdate", r, x, indexer=(Slice(0, 2, 1),))

    return build([ref((2,)), arr((2,))], body, name="acc")


def test_results_are_a_tuple_of_fresh_arrays():
    f = build([arr(())], lambda b, x: (b.v("add", x, x), b.v("neg", x)))
    out = interpret(f, np.float32(1.5))
    assert isinstance(out, tuple) and all(type(o) is np.ndarray for o in out)
    assert_same(out[0], np.float32(3.0))
    assert_same(out[1], np.float32(-1.5))
    assert interpret(_add_into_ref(), np.zeros(2, np.float32), np.float32([1, 2])) == ()
    g = build([], lambda b: b.v("broadcast_in_dim", b.const(1.0, "float32"), shape=(3,), dims=()))
    (ones,) = interpret(g)
    ones[0] = 5.0  # a writable array of its own, not a read-only broadcast view
    assert_same(interpret(g)[0], np.float32([1, 1, 1]))


@pytest.mark.parametrize(
    "args, message",
    [
        ((np.zeros(2, np.float32),), "@acc takes 2 arguments, got 1"),
        (
            (np.zeros(2, np.float64), np.zeros(2, np.float32)),
            "argument 0 of @acc must be f32[2], got an array of float64[2]",
        ),
        (
            (np.zeros(3, np.float32), np.zeros(2, np.float32)),
            "argument 0 of @acc must be f32[2], got an array of f32[3]",
        ),
        (
            ([0.0, 0.0], np.zeros(2, np.float32)),
            "argument 0 of @acc is a Ref{f32[2]}: expected a numpy array, got list",
        ),
        (
            (np.zeros(2, np.float32), np.zeros(2, np.int32)),
            "argument 1 of @acc must be f32[2], got an array of i32[2]",
        ),
        ((np.zeros(2, np.float32), 1.0), "argument 1 of @acc is a f32[2]: expected a numpy array"),
    ],
)
def test_argument_mismatches_are_interpret_errors(args, message):
    with pytest.raises(InterpretError) as info:
        interpret(_add_into_ref(), *args)
    assert message in str(info.value)


def test_read_only_ref_arguments_are_rejected():
    x = np.zeros(2, np.float32)
    x.setflags(write=False)
    with pytest.raises(InterpretError, match="read-only"):
        interpret(_add_into_ref(), x, np.zeros(2, np.float32))


@pytest.mark.parametrize(
    "dtype, value, expected",
    [
        ("float32", 0.1, np.float32(0.1)),
        ("float32", 3, np.float32(3)),
        ("bfloat16", 1.0, np.array(1.0, ml_dtypes.bfloat16)),
        ("int32", -7, np.int32(-7)),
        ("int8", 127, np.int8(127)),
        ("uint32", 2**32 - 1, np.uint32(2**32 - 1)),
        ("bool", True, np.True_),
        ("int32", np.int32(5), np.int32(5)),
    ],
)
def test_scalars_convert_when_they_fit(dtype, value, expected):
    f = build([arr((), dtype)], lambda b, x: x)
    (out,) = interpret(f, value)
    assert_same(out, expected)


@pytest.mark.parametrize(
    "dtype, value",
    [
        ("int8", 128),
        ("uint32", -1),
        ("int32", 1.5),
        ("int32", True),
        ("bool", 1),
        ("float32", True),
        ("float32", 10**400),
        ("int32", np.int64(5)),
        ("float32", np.float64(1)),
    ],
)
def test_scalars_that_do_not_fit_are_rejected(dtype, value):
    f = build([arr((), dtype)], lambda b, x: x)
    with pytest.raises(InterpretError, match="argument 0 of @f"):
        interpret(f, value)


def test_bad_options_and_inputs():
    f = build([], lambda b: None)
    with pytest.raises(InterpretError, match="uninitialized='zeros' is not a mode"):
        interpret(f, uninitialized="zeros")
    with pytest.raises(InterpretError, match="expected a Function, got str"):
        interpret("not a function")
    with pytest.raises(InterpretError, match="grid must be a tuple of non-negative ints"):
        interpret(f, grid=(-1,))


def test_an_op_without_a_rule_is_named():
    x = ir.Value(ir.ArrayType((), "float32"))
    y = ir.Value(ir.ArrayType((), "float32"))
    op = ir.Op("mystery.op", (x,), (y,), loc=ir.Location(FILE, 3))
    f = ir.Function("f", ir.Block((x,), [op], (y,)))
    with pytest.raises(
        InterpretError, match="prog.py:3: 'mystery.op': the interpreter has no rule"
    ):
        interpret(f, np.float32(1))


def test_every_declared_op_has_a_rule():
    assert set(ir.OPS) <= set(RULES)


def test_malformed_ir_is_reported_not_crashed():
    ghost = ir.Value(ir.ArrayType((), "float32"))
    x = ir.Value(ir.ArrayType((), "float32"))
    op = ir.Op("add", (x, ghost), (ir.Value(x.type),), loc=ir.Location(FILE, 4))
    f = ir.Function("f", ir.Block((x,), [op], op.results))
    with pytest.raises(InterpretError, match="prog.py:4: 'add': an operand is used before"):
        interpret(f, np.float32(1))
    bad = ir.Op("get", (x,), (ir.Value(x.type),), {"indexer": ()}, loc=ir.Location(FILE, 5))
    g = ir.Function("g", ir.Block((x,), [bad], bad.results))
    with pytest.raises(MiniPallasError, match="prog.py:5: 'get': failed: AttributeError"):
        interpret(g, np.float32(1))


def test_hundred_thousand_scalar_ops_run():
    """Straight-line code: 25k rounds of add, mul, swap, get (ops built directly, unchecked, to
    keep the test fast). Its speed is measured by bench/benchmarks/ir_bench.py, not asserted
    here."""
    scalar, r_type = ir.ArrayType((), "float32"), ir.RefType((1,), "float32")
    x, r = ir.Value(scalar), ir.Value(r_type)
    ops, v = [], x
    at0 = {"indexer": (Int(0),)}
    for _ in range(25_000):
        s, p, old, v2 = (ir.Value(scalar) for _ in range(4))
        ops += [
            ir.Op("add", (v, x), (s,)),
            ir.Op("mul", (s, x), (p,)),
            ir.Op("swap", (r, p), (old,), at0),
            ir.Op("get", (r,), (v2,), at0),
        ]
        v = v2
    f = ir.Function("f", ir.Block((x, r), ops, (v,)))
    (out,) = interpret(f, np.float32(0.5), np.zeros(1, np.float32))
    expected = np.float32(0.5)
    for _ in range(25_000):
        expected = (expected + np.float32(0.5)) * np.float32(0.5)
    assert_same(out, expected)
