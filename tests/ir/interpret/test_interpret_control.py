"""Control flow and the kernel context: for, while, cond, call, program_id, num_programs."""

import numpy as np
import pytest
from interp_build import FILE, arr, assert_same, build, ref

from minipallas import InterpretError, interpret
from minipallas.ir import Dyn, Int

I32 = arr((), "int32")


def _for_program():
    """acc = for i in lo..hi-1: out[i] = i * 2; acc + i."""

    def loop_body(b, i, out, acc):
        b.op(
            "swap",
            out,
            i,
            b.v("convert", b.v("mul", i, b.const(2, "int32")), dtype="float32"),
            indexer=(Int(Dyn(0)),),
        )
        return b.v("add", acc, i)

    def body(b, out, lo, hi):
        block = b.region([I32, ref((6,)), I32], loop_body)
        return b.v("for", lo, hi, out, b.const(100, "int32"), num_consts=1, regions=(block,))

    return build([ref((6,)), I32, I32], body)


@pytest.mark.parametrize("lo, hi", [(0, 6), (2, 5), (4, 4), (5, 1)])
def test_for_runs_lower_to_upper_minus_one(lo, hi):
    out = np.zeros(6, np.float32)
    (acc,) = interpret(_for_program(), out, np.int32(lo), np.int32(hi))
    expected = np.zeros(6, np.float32)
    for i in range(lo, hi):
        expected[i] = 2 * i
    assert_same(acc, np.int32(100 + sum(range(lo, hi))))
    assert_same(out, expected)


def test_while_condition_sees_the_bodys_writes():
    """while r[0] < 50: r[0] = r[0] * 3; n += 1 (the condition reads the ref the body writes)."""

    def cond(b, r, n):
        return b.v("lt", b.v("get", r, indexer=(Int(0),)), b.const(50.0, "float32"))

    def loop_body(b, r, n):
        x = b.v("get", r, indexer=(Int(0),))
        b.op("swap", r, b.v("mul", x, b.const(3.0, "float32")), indexer=(Int(0),))
        return b.v("add", n, b.const(1, "int32"))

    def body(b, r):
        c = b.region([ref((1,)), I32], cond)
        w = b.region([ref((1,)), I32], loop_body)
        return b.v(
            "while", r, r, b.const(0, "int32"), cond_nconsts=1, body_nconsts=1, regions=(c, w)
        )

    f = build([ref((1,))], body)
    r = np.float32([2.0])
    (n,) = interpret(f, r)
    assert_same(n, np.int32(3))  # 2 -> 6 -> 18 -> 54: three trips
    assert_same(r, np.float32([54.0]))


def test_cond_clamps_its_index_and_branches_write_refs():
    def branch(k):
        def run(b, x, r):
            b.op("swap", r, x, indexer=(Int(k),))
            return b.v("add", x, b.const(float(k), "float32"))

        return run

    def body(b, i, x, r):
        branches = [b.region([arr(()), ref((3,))], branch(k)) for k in range(3)]
        return b.v("cond", i, x, r, regions=tuple(branches))

    f = build([I32, arr(()), ref((3,))], body)
    for index, chosen in [(-7, 0), (0, 0), (1, 1), (2, 2), (99, 2)]:
        r = np.zeros(3, np.float32)
        (out,) = interpret(f, np.int32(index), np.float32(5), r)
        assert_same(out, np.float32(5 + chosen))
        expected = np.zeros(3, np.float32)
        expected[chosen] = 5
        assert_same(r, expected)


def test_call_passes_refs_through():
    callee = build(
        [ref((2,)), arr(())],
        lambda b, r, x: (b.op("addupdate", r, x, indexer=(Int(1),)), b.v("mul", x, x))[1],
        name="g",
    )

    def body(b, r):
        return b.v("call", r, b.const(3.0, "float32"), callee=callee)

    f = build([ref((2,))], body)
    r = np.float32([1, 1])
    (out,) = interpret(f, r)
    assert_same(out, np.float32(9))
    assert_same(r, np.float32([1, 4]))


def test_program_id_and_num_programs():
    f = build([], lambda b: (b.v("program_id", axis=1), b.v("num_programs", axis=0)))
    pid, n = interpret(f, program_ids=(3, 1), grid=(4, 2))
    assert_same(pid, np.int32(1))
    assert_same(n, np.int32(4))


def test_kernel_context_missing_is_an_error_with_a_fix():
    f = build([], lambda b: b.v("program_id", axis=0, line=5))
    with pytest.raises(InterpretError) as info:
        interpret(f)
    assert str(info.value).startswith(
        f"{FILE}:5: 'program_id': asks for axis 0, but no program_ids were given"
    )
    assert "program_ids=(...)" in info.value.fix
    g = build([], lambda b: b.v("num_programs", axis=2, line=6))
    with pytest.raises(
        InterpretError,
        match=r"prog.py:6: 'num_programs': asks for axis 2, but "
        r"grid=\(4,\) has 1 axes",
    ):
        interpret(g, grid=(4,))
    with pytest.raises(InterpretError, match="is not a point of grid"):
        interpret(f, program_ids=(4,), grid=(4,))
