"""``bind_grid``: program_id becomes a parameter threaded into regions; num_programs a constant."""

import numpy as np
import pytest

import minipallas as mp
import minipallas.numpy as mnp
from minipallas.passes.kernel.bind_grid import bind_grid

REF = mp.RefType((4,), "float32")
GRID = (3, 5)


def pid(axis):
    return mp.program_id(axis).astype(mnp.float32)


def in_for(o_ref):
    def body(i, c):
        return c + pid(1) * i.astype(mnp.float32)

    o_ref[...] = mnp.full((4,), mp.fori_loop(0, 3, body, pid(0)))


def in_while(o_ref):
    def cond(c):
        return c[0] < mp.program_id(1)

    def body(c):
        return c[0] + 1, c[1] + pid(0)

    o_ref[...] = mnp.full((4,), mp.while_loop(cond, body, (0, 0.0))[1])


def in_cond_and_scope(o_ref):
    def scoped(t_ref):
        t_ref[...] = mp.cond(mp.program_id(0) == 1, lambda: pid(1), lambda: -pid(1))
        o_ref[...] = mnp.full((4,), t_ref[...]) + mp.num_programs(1).astype(mnp.float32)

    mp.run_scoped(scoped, mp.RefType((), "float32"))


def helper(x):
    return x * pid(0) + pid(1)


def in_call(o_ref):
    o_ref[...] = mp.call(helper, mnp.ones((4,), mnp.float32))


@pytest.mark.parametrize("kernel", [in_for, in_while, in_cond_and_scope, in_call])
def test_bound_body_means_the_body_at_each_grid_point(kernel):
    body = mp.trace(kernel, REF)
    bound = bind_grid(body, GRID)
    mp.verify(bound)
    assert bound.param_types == (mp.ArrayType((), "int32"),) * 2 + (REF,)
    assert not any(
        op.name in ("program_id", "num_programs")
        for f in (bound, *bound.callees())
        for op in f.walk()
    )
    for i in range(GRID[0]):
        for j in range(GRID[1]):
            expected, got = np.zeros(4, np.float32), np.zeros(4, np.float32)
            mp.interpret(body, expected, program_ids=(i, j), grid=GRID)
            mp.interpret(bound, i, j, got)
            np.testing.assert_array_equal(got, expected)


def test_only_regions_that_ask_receive_the_indices():
    def kernel(o_ref):
        o_ref[0] = mp.fori_loop(0, 2, lambda i, c: c + 1.0, 0.0)
        o_ref[1] = mp.fori_loop(0, 2, lambda i, c: c + pid(0), 0.0)

    bound = bind_grid(mp.trace(kernel, REF), GRID)
    loops = [op for op in bound.body.ops if op.name == "for"]
    assert [op.attrs["num_consts"] for op in loops] == [0, 2]
    assert loops[1].operands[2:4] == bound.params[:2]


def test_the_input_function_is_unchanged_and_callees_without_grid_are_shared():
    def plain(x):
        return x + 1.0

    def kernel(o_ref):
        o_ref[...] = mp.call(plain, o_ref[...]) + pid(0)

    body = mp.trace(kernel, REF)
    before = str(body)
    bound = bind_grid(body, GRID)
    assert str(body) == before
    assert bound.callees() == body.callees()
