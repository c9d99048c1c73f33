"""Cleanup around regions: pruning loop carries, loop constants, ``cond`` results and arguments,
scoped allocations; inlining regions that run once; callees; whole discharged programs and
generated ones, whose meaning must not change."""

import numpy as np
import pytest
from cleanup_harness import (
    FULL8,
    cleaned,
    cond_op,
    const,
    for_loop,
    make,
    names,
    op,
    read,
    sample,
    scoped,
    while_loop,
)
from ir_types import F8, I32, REF8

import minipallas
from minipallas import MiniPallasError
from minipallas.ir import (
    TPU_VMEM,
    Dyn,
    Function,
    Int,
    RefType,
    Slice,
)
from minipallas.passes.cleanup import cleanup, count_ops

# --- regions ---------------------------------------------------------------------------------


def test_dead_ops_inside_loop_bodies_and_dead_loops():
    def build(b, x):
        def body(bb, i, c, acc):
            op(bb, "exp", c)  # dead inside the body
            return [op(bb, "add", acc, c)]

        (kept,) = for_loop(b, 0, 4, [x], [x], body)
        for_loop(b, 0, 4, [x], [x], body)  # unused, no effects: removed
        return [kept]

    out = cleaned(make([F8], build), 2 * 5, 4)
    assert names(out) == ["constant", "constant", "for", "add"]


def test_unused_loop_carries_are_dropped_but_needed_ones_stay():
    def build(b, x, y, z):
        def body(bb, i, c, a, s, t):
            a2 = op(bb, "add", a, c)  # result used
            s2 = op(bb, "mul", s, s)  # unused, and no live carry needs it
            t2 = op(bb, "sub", t, t)  # unused, but feeds a via c? no: feeds nothing
            return [op(bb, "add", a2, t2), s2, t2]  # a needs t: t stays

        a, s, t = for_loop(b, 0, 3, [x], [x, y, z], body)
        return [a]

    out = cleaned(make([F8, F8, F8], build), 7, 6)
    (loop,) = [o for o in out.walk() if o.name == "for"]
    assert len(loop.results) == 2 and len(loop.regions[0].params) == 4  # i, c, a, t
    assert loop.operands[3:] == (out.params[0], out.params[2])


def test_unused_loop_constants_are_dropped():
    def build(b, x, y):
        (a,) = for_loop(b, 0, 3, [x, y], [x], lambda bb, i, c1, c2, acc: [op(bb, "add", acc, c2)])
        return [a]

    out = cleaned(make([F8, F8], build), 4, 4)
    (loop,) = [o for o in out.walk() if o.name == "for"]
    assert loop.attrs["num_consts"] == 1 and loop.operands[2] is out.params[1]


def test_loop_writing_a_ref_stays_even_without_used_results():
    def build(b, r, x):
        def body(bb, i, rr, acc):
            bb.create("addupdate", [rr, acc], {"indexer": FULL8})
            return [op(bb, "exp", acc)]

        for_loop(b, 0, 3, [r], [x], body)
        return []

    out = cleaned(make([REF8, F8], build), 5, 5)
    (loop,) = [o for o in out.walk() if o.name == "for"]
    assert len(loop.results) == 1  # the carry feeds the write


def test_trip_counts_zero_and_one_inline():
    def build(b, x):
        (once,) = for_loop(b, 2, 3, [x], [x], lambda bb, i, c, a: [op(bb, "add", a, c)])
        (never,) = for_loop(b, 5, 3, [x], [x], lambda bb, i, c, a: [op(bb, "mul", a, c)])
        return [once, never]

    out = cleaned(make([F8], build), 8, 1)
    assert names(out) == ["add"] and out.body.results[1] is out.params[0]


def test_while_keeps_carries_the_condition_reads():
    def build(b, n, x):
        def cond(cb, k, acc, junk):
            return op(cb, "lt", k, const(cb, 5, "int32"))

        def body(bb, k, acc, junk):
            return [
                op(bb, "add", k, const(bb, 1, "int32")),
                op(bb, "add", acc, acc),
                op(bb, "exp", junk),
            ]

        k, acc, junk = while_loop(b, [n, x, x], cond, body)
        return [acc]

    out = cleaned(make([I32, F8], build), 7, 6, args=[np.int32(1), np.ones(8, np.float32)])
    (loop,) = [o for o in out.walk() if o.name == "while"]
    assert len(loop.results) == 2


def test_cond_drops_unused_results_and_arguments():
    def build(b, i, x, y):
        r1, r2 = cond_op(
            b,
            i,
            [x, y],
            [
                lambda bb, p, q: [op(bb, "exp", p), op(bb, "neg", q)],
                lambda bb, p, q: [op(bb, "abs", p), q],
            ],
        )
        return [r1]

    out = cleaned(make([I32, F8, F8], build), 4, 3)
    (c,) = [o for o in out.walk() if o.name == "cond"]
    assert len(c.results) == 1 and c.operands[1:] == (out.params[1],)
    assert all(len(r.params) == 1 for r in c.regions)


def test_constant_index_and_single_branch_conds_inline():
    def build(b, x):
        branches = [lambda bb, p: [op(bb, "exp", p)], lambda bb, p: [op(bb, "neg", p)]]
        (high,) = cond_op(b, const(b, 7, "int32"), [x], branches)  # clamped to the last
        (low,) = cond_op(b, const(b, -2, "int32"), [x], branches)  # clamped to the first
        (one,) = cond_op(b, const(b, 0, "int32"), [x], branches[:1])
        return [high, low, one]

    out = cleaned(make([F8], build), 11, 2)
    assert sorted(names(out)) == ["exp", "neg"]
    assert out.body.results[1] is out.body.results[2]  # CSE after inlining


def test_dynamic_index_cond_stays():
    def build(b, i, x):
        return cond_op(
            b, i, [x], [lambda bb, p: [op(bb, "exp", p)], lambda bb, p: [op(bb, "neg", p)]]
        )

    for i in (0, 1, 5):
        cleaned(make([I32, F8], build), 3, 3, args=[np.int32(i), np.ones(8, np.float32)])


def test_run_scoped_without_allocations_is_inlined():
    def build(b, x):
        (r,) = scoped(b, [x], [], lambda bb, p: [op(bb, "neg", p)])
        return [r]

    out = cleaned(make([F8], build), 2, 1)
    assert names(out) == ["neg"]


def test_unused_allocations_and_operands_go_then_the_scope_inlines():
    def build(b, r, x):
        def body(bb, s_used, s_dead, r_in, x_in):
            bb.create("swap", [s_used, x_in], {"indexer": FULL8})
            v = op(bb, "get", s_used, indexer=FULL8)
            op(bb, "get", r_in, indexer=FULL8)
            return [op(bb, "neg", v)]

        return scoped(b, [r, x], [REF8, RefType((4,), "float32", TPU_VMEM)], body)

    out = cleaned(make([REF8, F8], build), 5, 4)
    (s,) = [o for o in out.walk() if o.name == "run_scoped"]
    assert s.operands == (out.params[1],) and len(s.regions[0].params) == 2


def test_collective_scope_is_not_inlined():
    def build(b, x):
        return scoped(b, [x], [], lambda bb, p: [op(bb, "neg", p)], axes=("x",))

    fn = make([F8], build)
    out = cleanup(fn)
    minipallas.verify(out)
    assert names(out) == ["run_scoped", "neg"]
    # the interpreter rejects both, as upstream does, with the same upstream message
    x = np.zeros(8, np.float32)
    messages = []
    for program in (fn, out):
        with pytest.raises(MiniPallasError) as caught:
            minipallas.interpret(program, x)
        messages.append(str(caught.value))
    assert messages[0] == messages[1] and "collective_axes" in messages[0]


# --- calls ------------------------------------------------------------------------------------


def test_callees_are_cleaned_once_and_keep_their_signature():
    callee = make([F8, F8], lambda b, x, y: [op(b, "neg", read(b, x, FULL8)), x], "callee")

    def build(b, x):
        r = b.create("call", [x, x], {"callee": callee}).results
        b.create("call", [x, x], {"callee": callee})  # unused and effect-free: removed
        return [r[0]]

    fn = make([F8], build)
    out = cleaned(fn, 2 + 2, 1 + 1)
    (call,) = [o for o in out.walk() if o.name == "call"]
    new_callee = call.attrs["callee"]
    assert new_callee is not callee and new_callee.param_types == callee.param_types
    assert names(new_callee) == ["neg"] and count_ops(callee) == 2


def test_count_ops_counts_regions_and_callees_once():
    callee = make([F8], lambda b, x: [op(b, "neg", x)], "callee")

    def build(b, x):
        (a,) = for_loop(b, 0, 2, [], [x], lambda bb, i, c: [op(bb, "exp", c)])
        r1 = b.create("call", [a], {"callee": callee}).result
        return [b.create("call", [r1], {"callee": callee}).result]

    assert count_ops(make([F8], build)) == 2 + 1 + 1 + 2 + 1


# --- whole programs: discharge then cleanup ---------------------------------------------------


def scratch_kernel():
    """Scratch copy, a doubled read, a loop accumulating into the output."""
    scratch = RefType((8,), "float32", TPU_VMEM)

    def build(b, x, o):
        def body(bb, s, x_in, o_in):
            v = op(bb, "get", x_in, indexer=FULL8)
            two = const(bb, 2.0, shape=(8,))
            bb.create("swap", [s, op(bb, "mul", v, two)], {"indexer": FULL8})
            w = op(bb, "get", s, indexer=(Slice(0, 4, 1),))
            bb.create("swap", [o_in, w], {"indexer": (Slice(4, 4, 1),)})
            bb.create(
                "swap",
                [o_in, op(bb, "get", o_in, indexer=(Slice(0, 4, 1),))],
                {"indexer": (Slice(0, 4, 1),)},
            )

            def loop(lb, i, oo, acc):
                e = op(lb, "get", oo, i, indexer=(Int(Dyn(0)),))
                lb.create("addupdate", [oo, const(lb, 1.0, shape=(8,))], {"indexer": FULL8})
                return [op(lb, "add", acc, e)]

            for_loop(bb, 0, 8, [o_in], [const(bb, 0.0)], loop)
            return []

        scoped(b, [x, o], [scratch], body)
        return []

    return make([REF8, REF8], build, "kernel")


def test_discharged_kernel_gets_smaller_and_means_the_same():
    from minipallas.passes.discharge import discharge

    fn = scratch_kernel()
    pure = discharge(fn)
    minipallas.verify(pure)
    out = cleaned(pure)
    assert count_ops(out) < count_ops(pure)
    assert not any(o.name in ("uninitialized", "run_scoped") for o in out.walk())
    (loop,) = [o for o in out.walk() if o.name == "for"]
    assert len(loop.results) == 1  # the unused accumulator carry is gone
    rng = np.random.default_rng(1)
    x, o = sample(F8, rng), sample(F8, rng)
    x1, o1 = x.copy(), o.copy()
    minipallas.interpret(fn, x1, o1)
    results = minipallas.interpret(out, x, o)
    np.testing.assert_array_equal(results[0], x1)
    np.testing.assert_array_equal(results[1], o1)


@pytest.mark.parametrize("rounds", [1, 2])
def test_cleanup_is_idempotent(rounds):
    from minipallas.passes.discharge import discharge

    out = cleanup(discharge(scratch_kernel()))
    again = out
    for _ in range(rounds):
        again = cleanup(again)
    assert names(again) == names(out)


def test_function_object_identity_of_result():
    fn = make([F8], lambda b, x: [x])
    out = cleanup(fn)
    assert isinstance(out, Function) and out is not fn and count_ops(out) == 0


@pytest.mark.parametrize("seed", range(25))
def test_random_programs_keep_their_meaning(seed):
    """Generated programs (every op family, nested regions, views), stateful and discharged."""
    import random

    from minipallas.passes.discharge import discharge
    from minipallas.tools.generate import random_inputs, random_program

    fn = random_program(random.Random(seed), 60)
    for program in (fn, discharge(fn)):
        out = cleaned(program, args=random_inputs(program, seed))
        assert count_ops(out) <= count_ops(program)
