"""Discharge of programs written with the tracing front end, as users write them."""

import numpy as np
from discharge_harness import check, op_names

import minipallas as mp
import minipallas.numpy as jnp
from minipallas import tpu
from minipallas.ir.types import RefType


def test_blocked_matmul_with_a_scratch_accumulator():
    def kernel(x_ref, y_ref, o_ref):
        def body(acc):
            acc[...] = jnp.zeros((4, 4), jnp.float32)

            def step(k, carry):
                xs = x_ref[:, mp.ds(k * 2, 2)]
                ys = y_ref[mp.ds(k * 2, 2), :]
                acc[...] += jnp.dot(xs, ys)
                return carry

            mp.fori_loop(0, 3, step, 0)
            o_ref[...] = acc[...]

        mp.run_scoped(body, tpu.VMEM((4, 4), jnp.float32))

    fn = mp.trace(kernel, RefType((4, 6), "float32"), RefType((6, 4), "float32"),
                  RefType((4, 4), "float32"))  # fmt: skip
    out = check(fn)
    assert "run_scoped" not in op_names(out)
    # partial discharge, as the GPU path does it: operands stay refs, the scratch is carried
    gpu = check(fn, should_discharge=False)
    (loop,) = [op for op in gpu.walk() if op.name == "for"]
    assert [str(r.type) for r in loop.results][-1] == "f32[4,4]"


def test_views_loops_and_conditionals():
    def f(r, counts, n):
        row = r.at[1]
        flipped = r.T

        def body(i, c):
            @mp.when(i % 2 == 0)
            def _():
                row[mp.ds(i, 1)] = flipped[i, 1:2] * 2.0

            mp.addupdate(counts, (i % 3,), jnp.int32(1))
            return c + counts[0]

        total = mp.fori_loop(0, n, body, jnp.int32(0))

        def cond_fun(k):
            return counts[k % 3] < 5

        def body_fun(k):
            counts[k % 3] = counts[k % 3] + 2
            return k + 1

        return total, mp.while_loop(cond_fun, body_fun, jnp.int32(0))

    fn = mp.trace(f, RefType((4, 4), "float32"), RefType((3,), "int32"), mp.ArrayType((), "int32"))
    for n in (0, 3, 4):
        args = [np.arange(16, dtype=np.float32).reshape(4, 4), np.zeros(3, np.int32), np.int32(n)]
        check(fn, *args)
        check(fn, *args, should_discharge=[False, True, False])
