"""Invalid programs the verifier must reject: scoped allocation and escaping refs, control
flow, SSA and closed regions, calls and modules. Each test asserts the error class, the op's
name and the user's line (see ``verifier_build``).
"""

import pytest
from ir_types import F8, F32, I32, REF8, U32
from verifier_build import FULL8, I8, REF2D, at, fn, mk, rejects

import minipallas
from minipallas import ir
from minipallas.ir import (
    Block,
    Int,
    Module,
    Op,
    Slice,
    Value,
)
from minipallas.ir.errors import VerificationError

# -- run_scoped --------------------------------------------------------------------------------


def test_run_scoped_allocation_must_be_a_ref():
    scratch = Value(F8)
    body = Block((scratch,), (), ())
    rejects(
        fn([], [mk("run_scoped", [], [], {}, [body], line=40)]),
        "run_scoped",
        40,
        "allocation 0 must be a Ref, got f32[8]",
    )


def test_run_scoped_cannot_yield_its_allocation():
    scratch = Value(REF8)
    body = Block((scratch,), (), (scratch,))
    msg = rejects(
        fn([], [mk("run_scoped", [], [REF8], {}, [body], line=41)]),
        "run_scoped",
        41,
        "region 0 yields a Ref as value 0",
    )
    assert "scoped allocation lives only inside its body" in msg


def test_run_scoped_body_parameter_differs_from_operand():
    x = Value(F8)
    scratch, x_in = Value(REF8), Value(I8)
    body = Block((scratch, x_in), (), ())
    rejects(
        fn([x], [mk("run_scoped", [x], [], {}, [body], line=42)]),
        "run_scoped",
        42,
        "body parameter 1 has type i32[8], expected f32[8]",
    )


@pytest.mark.parametrize("axes", [["x"], ("x", 1), "x"])
def test_run_scoped_collective_axes_not_a_tuple_of_names(axes):
    body = Block((Value(REF8),), (), ())
    rejects(
        fn([], [mk("run_scoped", [], [], {"collective_axes": axes}, [body], line=43)]),
        "run_scoped",
        43,
        "collective_axes must be a tuple of axis names",
    )


def test_scoped_ref_used_after_its_run_scoped():
    scratch = Value(REF8)
    scoped = mk("run_scoped", [], [], {}, [Block((scratch,), (), ())], line=44)
    leak = mk("get", [scratch], [F8], {"indexer": FULL8}, line=45)
    msg = rejects(fn([], [scoped, leak]), "get", 45, "scoped allocation 0 of 'run_scoped'")
    assert "user.py:44" in msg and "used outside its body" in msg


def test_view_of_scoped_ref_used_after_its_run_scoped():
    scratch = Value(REF2D)
    view = mk("ref.at", [scratch], [REF8], {"indexer": (Int(0), Slice(0, 8, 1))}, line=46)
    scoped = mk("run_scoped", [], [], {}, [Block((scratch,), (view,), ())], line=47)
    leak = mk("get", [view.result], [F8], {"indexer": FULL8}, line=48)
    rejects(
        fn([], [scoped, leak]),
        "get",
        48,
        "used outside the region that defines it",
        "result 0 of 'ref.at' at user.py:46, in region 0 of 'run_scoped' at user.py:47",
    )


def test_inner_scoped_ref_used_in_outer_body_after_inner_ends():
    inner_scratch = Value(REF8)
    inner = mk("run_scoped", [], [], {}, [Block((inner_scratch,), (), ())], line=49)
    leak = mk("swap", [inner_scratch, Value(F8)], [F8], {"indexer": FULL8}, line=50)
    outer = mk("run_scoped", [], [], {}, [Block((Value(REF8),), (inner, leak), ())], line=51)
    rejects(fn([], [outer]), "swap", 50, "scoped allocation 0 of 'run_scoped' at user.py:49")


def test_callee_returning_a_ref():
    r = Value(REF8)
    g = fn([r], [], [r], name="g")
    x = Value(REF8)
    rejects(
        fn([x], [mk("call", [x], [REF8], {"callee": g}, line=52)]),
        "call",
        52,
        "callee @g returns a Ref as result 0",
    )


def test_function_returning_a_ref():
    r = Value(REF2D)
    view = mk("ref.at", [r], [REF8], {"indexer": (Int(0), Slice(0, 8, 1))}, line=53)
    rejects(fn([r], [view], [view.result]), "return", 53, "result 0 of @f is a Ref")


# -- control flow ------------------------------------------------------------------------------


def _for(lo, hi, inits, body, line, consts=()):
    types = [v.type for v in inits]
    return mk(
        "for", [lo, hi, *consts, *inits], types, {"num_consts": len(consts)}, [body], line=line
    )


def test_for_carry_type_differs():
    lo, hi, init = Value(I32), Value(I32), Value(F32)
    i, c = Value(I32), Value(F32)
    conv = mk("convert", [c], [I32], {"dtype": "int32"}, line=60)
    body = Block((i, c), (conv,), (conv.result,))
    rejects(
        fn([lo, hi, init], [_for(lo, hi, [init], body, 61)]),
        "for",
        61,
        "body result 0 has type i32[], expected f32[]",
    )


def test_for_bounds_of_different_dtypes():
    lo, hi = Value(I32), Value(U32)
    body = Block((Value(I32),), (), ())
    rejects(
        fn([lo, hi], [_for(lo, hi, [], body, 62)]),
        "for",
        62,
        "upper bound has type u32[], expected i32[]",
    )


def test_for_carry_cannot_be_a_ref():
    lo, hi, r = Value(I32), Value(I32), Value(REF8)
    body = Block((Value(I32), Value(REF8)), (), ())
    rejects(fn([lo, hi, r], [_for(lo, hi, [r], body, 63)]), "for", 63, "loop carry 0 is a Ref")


def test_for_body_cannot_yield_a_ref():
    lo, hi, r = Value(I32), Value(I32), Value(REF8)
    i, r_in, c = Value(I32), Value(REF8), Value(F32)
    body = Block((i, r_in, c), (), (r_in,))
    init = Value(F32)
    rejects(
        fn([lo, hi, r, init], [_for(lo, hi, [init], body, 64, consts=[r])]),
        "for",
        64,
        "region 0 yields a Ref as value 0",
    )


def test_for_num_consts_negative():
    lo, hi = Value(I32), Value(I32)
    body = Block((Value(I32),), (), ())
    rejects(
        fn([lo, hi], [mk("for", [lo, hi], [], {"num_consts": -1}, [body], line=65)]),
        "for",
        65,
        "'num_consts' must be a non-negative int",
    )


def test_while_condition_not_bool():
    init = Value(I32)
    c = Value(I32)
    cond = Block((c,), (), (c,))
    b = Value(I32)
    body = Block((b,), (), (b,))
    rejects(
        fn(
            [init],
            [
                mk(
                    "while",
                    [init],
                    [I32],
                    {"cond_nconsts": 0, "body_nconsts": 0},
                    [cond, body],
                    line=66,
                )
            ],
        ),
        "while",
        66,
        "condition result 0 has type i32[], expected bool[]",
    )


def test_cond_branches_disagree():
    idx, x = Value(I32), Value(F32)
    a = Value(F32)
    b = Value(F32)
    conv = mk("convert", [b], [I32], {"dtype": "int32"}, line=67)
    branches = [Block((a,), (), (a,)), Block((b,), (conv,), (conv.result,))]
    rejects(
        fn([idx, x], [mk("cond", [idx, x], [F32], {}, branches, line=68)]),
        "cond",
        68,
        "branch 1 result 0 has type i32[], expected f32[]",
    )


def test_cond_index_must_be_an_int():
    idx, x = Value(F32), Value(F32)
    a = Value(F32)
    rejects(
        fn([idx, x], [mk("cond", [idx, x], [F32], {}, [Block((a,), (), (a,))], line=69)]),
        "cond",
        69,
        "branch index must be an integer scalar",
    )


def test_call_arity_mismatch():
    p, q = Value(F8), Value(F8)
    g = fn([p, q], [], [], name="g")
    x = Value(F8)
    rejects(
        fn([x], [mk("call", [x], [], {"callee": g}, line=70)]),
        "call",
        70,
        "@g takes 2 arguments, got 1",
    )


def test_call_argument_type_differs():
    p = Value(F8)
    g = fn([p], [], [], name="g")
    x = Value(I8)
    rejects(
        fn([x], [mk("call", [x], [], {"callee": g}, line=75)]),
        "call",
        75,
        "argument 0 of @g has type i32[8], expected f32[8]",
    )


def test_call_callee_not_a_function():
    rejects(
        fn([], [mk("call", [], [], {"callee": "g"}, line=71)]),
        "call",
        71,
        "attribute 'callee' must be a function",
    )


def test_recursive_call():
    g = fn([], [], [], name="g")
    g.body = Block((), (mk("call", [], [], {"callee": g}, line=72),), ())
    rejects(g, "call", 72, "recursive call: @g -> @g")


def test_mutual_recursion():
    a = fn([], [], [], name="a")
    b = fn([], [mk("call", [], [], {"callee": a}, line=76)], [], name="b")
    a.body = Block((), (mk("call", [], [], {"callee": b}, line=77),), ())
    rejects(Module([b]), "call", 77, "recursive call: @b -> @a -> @b")


def test_bad_op_inside_a_callee_is_reported_with_its_function():
    r = Value(REF8)
    g = fn([r], [mk("get", [r], [F32], {"indexer": (Int(9),)}, line=73)], name="g")
    x = Value(REF8)
    rejects(fn([x], [mk("call", [x], [], {"callee": g}, line=74)]), "get", 73, "(in @g)")


# -- SSA and closed regions --------------------------------------------------------------------


def test_use_before_definition():
    x = Value(F8)
    first = mk("neg", [x], [F8], line=80)
    second = mk("neg", [first.result], [F8], line=81)
    dangling = mk("abs", [second.result], [F8], line=79)
    rejects(
        fn([x], [dangling, first, second]),
        "abs",
        79,
        "used before its definition",
        "result 0 of 'neg' at user.py:81",
    )


def test_value_defined_twice():
    x = Value(F8)
    first = mk("neg", [x], [F8], line=82)
    again = Op("abs", (x,), first.results, {}, (), at(83))
    rejects(
        fn([x], [first, again]), "abs", 83, "already defined", "result 0 of 'neg' at user.py:82"
    )


def test_same_op_listed_twice():
    x = Value(F8)
    op = mk("neg", [x], [F8], line=84)
    rejects(fn([x], [op, op]), "neg", 84, "already defined")


def test_region_reuses_a_parameter_value():
    idx, x = Value(I32), Value(F32)
    a = Value(F32)
    shared = Block((a,), (), (a,))
    rejects(
        fn([idx, x], [mk("cond", [idx, x], [F32], {}, [shared, shared], line=85)]),
        "cond",
        85,
        "parameter 0 of region 1 (f32[]) is already defined",
    )


def test_outer_value_used_inside_a_closed_region():
    lo, hi, outer = Value(I32), Value(I32), Value(F32)
    i, c = Value(I32), Value(F32)
    add = mk("add", [c, outer], [F32], line=86)
    body = Block((i, c), (add,), (add.result,))
    msg = rejects(
        fn([lo, hi, outer], [_for(lo, hi, [outer], body, 87)]),
        "add",
        86,
        "defined outside this region",
        "parameter 2 of @f",
    )
    assert "pass it as an operand of 'for' at user.py:87" in msg


def test_outer_ref_used_inside_a_nested_run_scoped():
    r = Value(REF8)
    inner_get = mk("get", [r], [F8], {"indexer": FULL8}, line=88)
    inner = mk("run_scoped", [], [], {}, [Block((Value(REF8),), (inner_get,), ())], line=89)
    outer = mk("run_scoped", [], [], {}, [Block((Value(REF8),), (inner,), ())], line=90)
    msg = rejects(fn([r], [outer]), "get", 88, "defined outside this region")
    assert "operand of 'run_scoped' at user.py:90" in msg  # the outermost region that closes


def test_region_yields_an_outer_value():
    idx, x = Value(I32), Value(F32)
    branch = Block((Value(F32),), (), (x,))
    rejects(
        fn([idx, x], [mk("cond", [idx, x], [F32], {}, [branch], line=91)]),
        "cond",
        91,
        "value 0 yielded by region 0 (f32[]) is defined outside this region",
    )


def test_loop_value_used_after_the_loop():
    lo, hi, init = Value(I32), Value(I32), Value(F32)
    i, c = Value(I32), Value(F32)
    neg = mk("neg", [c], [F32], line=92)
    loop = _for(lo, hi, [init], Block((i, c), (neg,), (neg.result,)), 93)
    after = mk("abs", [neg.result], [F32], line=94)
    rejects(fn([lo, hi, init], [loop, after]), "abs", 94, "used outside the region that defines it")


def test_value_from_another_function():
    y = Value(F8)
    x = Value(F8)
    rejects(
        fn([x], [mk("neg", [y], [F8], line=95)]), "neg", 95, "not defined anywhere in this function"
    )


def test_operand_that_is_not_a_value():
    x = Value(F8)
    rejects(fn([x], [Op("neg", (F8,), (Value(F8),), {}, (), at(96))]), "neg", 96, "not a Value")


# -- what is verified --------------------------------------------------------------------------


def test_module_verifies_every_function():
    good = fn([], [], [], name="good")
    r = Value(REF8)
    bad = fn([r], [mk("get", [r], [F32], {"indexer": (Int(-1),)}, line=120)], name="bad")
    rejects(Module([good, bad]), "get", 120, "out of bounds", "(in @bad)")


def test_module_with_two_functions_of_one_name():
    with pytest.raises(VerificationError, match="defines @f twice"):
        minipallas.verify(Module([fn([], []), fn([], [])]))


def test_verify_rejects_what_is_not_ir():
    with pytest.raises(VerificationError, match="expected a Function or a Module"):
        minipallas.verify(ir.Block())
