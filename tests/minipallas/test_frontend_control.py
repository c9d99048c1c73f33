"""Control flow in traced code: region layouts, closure conversion (captured values and refs
become operands, recursively), scope lifetimes, and semantics under the interpreter."""

import numpy as np
import pytest
from frontend_helpers import arr, find, names, only, raises_at, ref, run, same, traced

import minipallas as mp
import minipallas.numpy as jnp
from minipallas import tpu
from minipallas.ir.effects import Accum, Read, Write

I32 = arr((), "int32")
F32 = arr(())

# ----- run_scoped -----


def test_run_scoped_layout_allocations_then_captures():
    def f(x_ref, o_ref, y, axes=("x",)):
        def body(a, b):
            a[...] = x_ref[...] + y  # captures x_ref and y, in order of first use
            b[...] = a[...]
            o_ref[...] = b[...]
            return b[0]

        return mp.run_scoped(body, tpu.VMEM((4,), jnp.float32), tpu.SMEM((4,), jnp.float32),
                             collective_axes=axes)  # fmt: skip

    fn = traced(f, ref((4,)), ref((4,)), arr((4,)))
    op = only(fn, "run_scoped")
    x_ref, o_ref, y = fn.params
    assert op.operands == (x_ref, y, o_ref)
    assert op.attrs["collective_axes"] == ("x",)
    body = op.regions[0]
    assert body.param_types == (tpu.VMEM((4,), "float32"), tpu.SMEM((4,), "float32"),
                                ref((4,)), arr((4,)), ref((4,)))  # fmt: skip
    assert op.result.type == F32 and fn.body.results == (op.result,)
    get_x = body.ops[0]
    assert get_x.name == "get" and get_x.operands == (body.params[2],)
    x = np.arange(4, dtype=np.float32)
    out = np.zeros(4, np.float32)
    with pytest.raises(NotImplementedError, match="^run_scoped discharge does not support"):
        run(fn, x, out, np.ones(4, np.float32))  # collective axes: no path runs them
    fn = traced(lambda x_ref, o_ref, y: f(x_ref, o_ref, y, ()), ref((4,)), ref((4,)), arr((4,)))
    (r,) = run(fn, x, out, np.ones(4, np.float32), uninitialized="error")
    same(out, x + 1)
    same(r, np.float32(1))


def test_run_scoped_keyword_types_and_pytree_results():
    def f():
        def body(a, *, acc):
            acc[...] = jnp.ones((2,), jnp.int32)
            a[...] = acc[...] * 3
            return {"a": a[...], "acc": acc[...]}

        out = mp.run_scoped(body, tpu.VMEM((2,), jnp.int32), acc=tpu.VMEM((2,), jnp.int32))
        return out["a"], out["acc"]

    fn = traced(f)
    a, acc = run(fn)
    same(a, np.array([3, 3], np.int32))
    same(acc, np.array([1, 1], np.int32))


def test_run_scoped_collective_axes_default_and_string():
    fn = traced(lambda: mp.run_scoped(lambda a: None, tpu.VMEM((1,), jnp.float32)))
    assert only(fn, "run_scoped").attrs["collective_axes"] == ()
    fn = traced(lambda: mp.run_scoped(lambda a: None, tpu.VMEM((1,), jnp.float32),
                                      collective_axes="core"))  # fmt: skip
    assert only(fn, "run_scoped").attrs["collective_axes"] == ("core",)


def test_each_entry_allocates_afresh():
    def f(o_ref):
        def step(i, carry):
            def body(s):
                s[0] = i.astype(jnp.float32)
                o_ref[i] = s[0]

            mp.run_scoped(body, tpu.VMEM((1,), jnp.float32))
            return carry

        mp.fori_loop(0, 3, step, ())

    fn = traced(f, ref((3,)))
    out = np.zeros(3, np.float32)
    run(fn, out, uninitialized="error")
    same(out, np.arange(3, dtype=np.float32))


def test_returning_a_scoped_ref_is_an_error_at_the_call():
    def f():
        return mp.run_scoped(lambda a: a, tpu.VMEM((2,), jnp.float32))

    with raises_at(f.__code__.co_firstlineno + 1, match="run_scoped body returned a ref") as info:
        mp.trace(f)
    assert "return the ref's contents" in str(info.value)


def test_a_scoped_ref_leaking_out_is_an_error_where_it_is_used():
    kept = []

    def f(o_ref):
        mp.run_scoped(kept.append, tpu.VMEM((2,), jnp.float32))
        o_ref[...] = kept[0][...]  # used after its run_scoped ended

    with raises_at(
        f.__code__.co_firstlineno + 2, match="run_scoped body .* has already ended"
    ) as e:
        mp.trace(f, ref((2,)))
    assert "fix: use values only inside the body that made them" in str(e.value)


def test_a_leaked_ref_written_in_a_later_scope_is_also_caught():
    kept = []

    def f():
        mp.run_scoped(kept.append, tpu.VMEM((2,), jnp.float32))
        mp.run_scoped(lambda b: kept[0].__setitem__(0, 1.0), tpu.VMEM((2,), jnp.float32))

    with raises_at(f.__code__.co_firstlineno + 2, match="already ended"):
        mp.trace(f)


def test_run_scoped_allocates_refs_only():
    def f():
        mp.run_scoped(lambda a: None, arr((2,)))

    with raises_at(f.__code__.co_firstlineno + 1, match="run_scoped allocates refs"):
        mp.trace(f)


# ----- closure conversion -----


def test_captures_thread_through_every_scope_once():
    def f(x_ref, y):
        def scoped(s):
            def step(i, c):
                def inner(t):
                    t[...] = y + y  # y used twice, three scopes down
                    x_ref[i] = t[0] + c
                    return t[1]

                return mp.run_scoped(inner, tpu.VMEM((4,), jnp.float32))

            return mp.fori_loop(0, 2, step, 0.0)

        return mp.run_scoped(scoped, tpu.VMEM((1,), jnp.float32))

    fn = traced(f, ref((4,)), arr((4,)))
    x_ref, y = fn.params
    outer = fn.body.ops[0]
    assert outer.operands == (y, x_ref)
    body = outer.regions[0]
    loop = only(fn, "for")
    assert loop.attrs["num_consts"] == 2
    assert loop.operands[2:4] == body.params[1:3]  # y and x_ref, as the outer body sees them
    inner = find(fn, "run_scoped")[1]
    loop_body = loop.regions[0]
    i, y_in, x_in, c = loop_body.params
    assert inner.operands == (y_in, c, x_in, i)  # in order of first use
    inner_body = inner.regions[0]
    add = inner_body.ops[0]
    assert add.name == "add" and add.operands == (inner_body.params[1], inner_body.params[1])
    out = np.zeros(4, np.float32)
    (r,) = run(fn, out, np.array([1, 2, 3, 4], np.float32))
    same(r, np.float32(4))
    same(out, np.array([2, 2 + 4, 0, 0], np.float32))  # the carry is t[1] = 4 after step 0


def test_effects_on_captured_refs_are_on_operand_positions():
    def f(a_ref, b_ref, c_ref):
        def step(i, carry):
            b_ref[i] = a_ref[i]
            return carry

        mp.fori_loop(0, 4, step, 0)
        mp.run_scoped(lambda s: mp.addupdate(c_ref, 0, 1.0), tpu.VMEM((1,), jnp.float32))

    fn = traced(f, ref((4,)), ref((4,)), ref((4,)))
    loop = only(fn, "for")
    # the two captured refs come after the bounds; a set (swap) only writes, as upstream's
    assert mp.effects(loop) == {Read(2), Write(3)}
    assert mp.effects(fn) == {Read(0), Write(1), Accum(2)}


def test_a_value_from_a_sibling_branch_is_rejected():
    kept = []

    def f(p, x):
        mp.cond(p, lambda: kept.append(x + 1), lambda: None)
        mp.cond(p, lambda: kept[0] * 2 and None, lambda: None)

    with pytest.raises(mp.TraceError, match="already ended"):
        mp.trace(f, arr((), "bool"), F32)


# ----- loops -----


def test_fori_loop_layout():
    def f(x_ref, n):
        def body(i, carry):
            acc, count = carry
            return acc + x_ref[i], count + 1

        return mp.fori_loop(1, n, body, (0.0, 0))

    fn = traced(f, ref((8,)), I32)
    loop = only(fn, "for")
    lower, upper, const, init_acc, init_count = loop.operands
    assert upper is fn.params[1] and const is fn.params[0]
    assert loop.attrs["num_consts"] == 1
    body = loop.regions[0]
    assert body.param_types == (I32, ref((8,)), F32, I32)
    assert [r.type for r in loop.results] == [F32, I32]
    x = np.arange(8, dtype=np.float32)
    acc, count = run(fn, x, np.int32(6))
    same(acc, np.float32(15))
    same(count, np.int32(5))


def test_fori_loop_bounds_promote_and_a_carry_of_python_scalars_is_weak():
    def f(n):
        return mp.fori_loop(0, n, lambda i, c: c + 1, jnp.zeros((), jnp.int8))

    fn = traced(f, arr((), "int8"))
    loop = only(fn, "for")
    assert loop.operands[0].type == arr((), "int8")
    (r,) = run(fn, np.int8(5))
    same(r, np.int8(5))
    fn = traced(lambda: mp.fori_loop(0, 3, lambda i, c: 2.0, jnp.zeros((), jnp.bfloat16)))
    assert fn.result_types == (arr((), "bfloat16"),)


def test_fori_loop_with_dict_and_none_carries():
    def f():
        return mp.fori_loop(0, 4, lambda i, c: {"s": c["s"] + i, "z": None}, {"s": 0, "z": None})

    fn = traced(lambda: f()["s"])
    same(run(fn)[0], np.int32(6))


def test_while_loop_layout_and_semantics():
    def f(limit, step_ref):
        def cond_fun(carry):
            i, _ = carry
            return i < limit

        def body_fun(carry):
            i, total = carry
            return i + 1, total + step_ref[0]

        return mp.while_loop(cond_fun, body_fun, (0, 0.0))

    fn = traced(f, I32, ref((1,)))
    op = only(fn, "while")
    assert (op.attrs["cond_nconsts"], op.attrs["body_nconsts"]) == (1, 1)
    assert op.operands[:2] == fn.params
    cond_block, body_block = op.regions
    assert cond_block.param_types == (I32, I32, F32)
    assert body_block.param_types == (ref((1,)), I32, F32)
    i, total = run(fn, np.int32(4), np.array([2.5], np.float32))
    same(i, np.int32(4))
    same(total, np.float32(10))


@pytest.mark.parametrize(
    "loop, match",
    [
        (lambda: mp.fori_loop(0, 2, lambda i, c: c + 0.5, 0), "output 0 has type f32"),
        (lambda: mp.fori_loop(0, 2, lambda i, c: (c, c), 0), "must return the structure"),
        (lambda: mp.fori_loop(0, 2, lambda i, c: jnp.zeros((2,)), 0.0), "expected f32\\[\\]"),
        (lambda: mp.fori_loop(0.0, 2, lambda i, c: c, 0), "bounds must be integer scalars"),
        (lambda: mp.while_loop(lambda c: c, lambda c: c, 1), "must return a bool scalar"),
        (lambda: mp.while_loop(lambda c: c > 0, lambda c: c * 1.5, 1), "has type f32"),
    ],
)
def test_loop_mistakes(loop, match):
    with raises_at(loop.__code__.co_firstlineno, match=match):
        mp.trace(loop)


def test_loop_carries_cannot_be_refs():
    def f(x_ref):
        mp.fori_loop(0, 2, lambda i, r: r, x_ref)

    with raises_at(f.__code__.co_firstlineno + 1, match="carries arrays, not refs"):
        mp.trace(f, ref((2,)))


# ----- conditionals -----


def test_cond_layout_union_of_captures():
    def f(p, a, b, o_ref):
        def yes():
            o_ref[0] = a
            return a * 2

        def no():
            return b

        return mp.cond(p, yes, no)

    fn = traced(f, arr((), "bool"), F32, F32, ref((1,)))
    p, a, b, o_ref = fn.params
    convert = fn.body.ops[0]
    assert convert.name == "convert" and convert.operands == (p,)
    op = only(fn, "cond")
    # the false branch is traced first, then the true one (which uses o_ref, then a)
    assert op.operands == (convert.result, b, o_ref, a)
    no_block, yes_block = op.regions
    assert no_block.param_types == yes_block.param_types == (F32, ref((1,)), F32)
    assert no_block.results == (no_block.params[0],)
    assert [o.name for o in yes_block.ops][0] == "swap"
    for pred, expected in [(True, 6.0), (False, 5.0)]:
        out = np.zeros(1, np.float32)
        (r,) = run(fn, np.bool_(pred), np.float32(3), np.float32(5), out)
        same(r, np.float32(expected))
        same(out, np.array([3.0 if pred else 0.0], np.float32))


def test_cond_operands_int_predicate_and_weak_outputs():
    def f(n, x):
        return mp.cond(n, lambda v: v + 1, lambda v: 0, x)

    fn = traced(f, I32, arr((), "bfloat16"))
    assert names(fn)[:3] == ["constant", "ne", "convert"]
    assert fn.result_types == (arr((), "bfloat16"),)
    x = np.array(1.5, jnp.bfloat16)
    assert [float(run(fn, np.int32(k), x)[0]) for k in (0, 7)] == [0.0, 2.5]


def test_switch_clamps_its_index():
    def f(i):
        return mp.switch(i, [lambda: 10, lambda: 20, lambda: 30])

    fn = traced(f, I32)
    assert len(only(fn, "cond").regions) == 3
    assert [int(run(fn, np.int32(k))[0]) for k in (-4, 0, 1, 2, 9)] == [10, 10, 20, 30, 30]


def test_when_traced_and_static():
    def f(p, o_ref):
        @mp.when(p)
        def _():
            o_ref[0] = 1.0

        @mp.when(True)
        def _():
            o_ref[1] = 2.0

        @mp.when(False)
        def _():
            o_ref[2] = 3.0

    fn = traced(f, arr((), "bool"), ref((3,)))
    assert names(fn) == ["convert", "cond", "constant", "swap"]
    empty, body = only(fn, "cond").regions
    assert empty.ops == () and body.ops[-1].name == "swap"
    for pred in (True, False):
        out = np.zeros(3, np.float32)
        run(fn, np.bool_(pred), out)
        same(out, np.array([1.0 if pred else 0.0, 2.0, 0.0], np.float32))


@pytest.mark.parametrize(
    "bad, match",
    [
        (lambda x: mp.cond(x[0] > 0, lambda: x, lambda: x[0]), "different types for output 0"),
        (lambda x: mp.cond(x[0] > 0, lambda: x, lambda: (x, x)), "the same structure"),
        (lambda x: mp.cond(x, lambda: 1, lambda: 2), "must be a bool or int scalar"),
        (lambda x: mp.switch(1.5, [lambda: 1]), "switch index must be an int scalar"),
        (lambda x: mp.switch(0, []), "non-empty sequence"),
        (lambda x: mp.when(x[0] > 0)(lambda: 1), "must return nothing"),
    ],
)
def test_conditional_mistakes(bad, match):
    with raises_at(bad.__code__.co_firstlineno, match=match):
        mp.trace(bad, arr((2,)))


# ----- call, program_id -----


def test_call_traces_a_python_function_once_per_types():
    def axpy(a, x):
        return a * x + 1.0

    def f(x, y, z):
        return mp.call(axpy, 2.0, x), mp.call(axpy, 3.0, y), mp.call(axpy, 2.0, z)

    fn = traced(f, arr((4,)), arr((4,)), arr((2,)))
    calls = find(fn, "call")
    assert calls[0].attrs["callee"] is calls[1].attrs["callee"]
    assert calls[2].attrs["callee"] is not calls[0].attrs["callee"]
    assert [c.attrs["callee"].name for c in calls] == ["axpy", "axpy", "axpy_1"]  # distinct
    assert fn.callees() == [calls[0].attrs["callee"], calls[2].attrs["callee"]]
    x = np.arange(4, dtype=np.float32)
    a, b, c = run(fn, x, x, x[:2].copy())
    same(a, x * 2 + 1)
    same(b, x * 3 + 1)
    same(c, x[:2] * 2 + 1)


def test_call_of_a_function_object_with_refs():
    def bump(r):
        r[0] = r[0] + 1

    callee = traced(bump, ref((2,), "int32"))

    def f(r):
        assert mp.call(callee, r) is None
        mp.call(callee, r)

    fn = traced(f, ref((2,), "int32"))
    assert [op.attrs["callee"] for op in fn.body.ops] == [callee, callee]
    x = np.zeros(2, np.int32)
    run(fn, x)
    same(x, np.array([2, 0], np.int32))


def test_call_argument_mismatch():
    callee = traced(lambda x: x, arr((4,)))

    def f(y):
        return mp.call(callee, y)

    with raises_at(f.__code__.co_firstlineno + 1, match=r"@lambda takes \(f32\[4\]\), got"):
        mp.trace(f, arr((4,), "int32"))


def test_program_id_and_num_programs():
    def f():
        return mp.program_id(1) * 10 + mp.num_programs(0)

    fn = traced(f)
    pid, nprog = only(fn, "program_id"), only(fn, "num_programs")
    assert pid.attrs["axis"] == 1 and nprog.attrs["axis"] == 0
    (r,) = run(fn, program_ids=(0, 2), grid=(4, 3))
    same(r, np.int32(24))


@pytest.mark.parametrize("axis", [-1, 1.0, True])
def test_program_id_axis_must_be_a_static_int(axis):
    def f():
        mp.program_id(axis)

    with raises_at(f.__code__.co_firstlineno + 1, match="static grid axis"):
        mp.trace(f)
