"""Programs written with the tracing front end (``minipallas.trace``), compiled and compared with
the interpreter: a blocked matmul accumulating into ``run_scoped`` scratch, gathers/scatters
through integer-array indices, and a while loop with a switch inside."""

import numpy as np
from shlo_util import check

import minipallas as mp
import minipallas.numpy as jnp
from minipallas import tpu


def blocked_matmul(x_ref, w_ref, o_ref, idx_ref):
    def body(acc_ref):
        acc_ref[...] = jnp.zeros((8, 16), jnp.float32)

        def step(k, count):
            a = x_ref[:, mp.ds(k * 4, 4)]
            b = w_ref[mp.ds(k * 4, 4), :]
            acc_ref[...] += jnp.dot(a, b)
            return count + 1

        n = mp.fori_loop(0, 8, step, 0)
        o_ref[...] = jnp.tanh(acc_ref[...]) * n
        return jnp.sum(acc_ref[...])

    total = mp.run_scoped(body, tpu.VMEM((8, 16), jnp.float32))
    rows = o_ref[idx_ref[...], :]
    o_ref[idx_ref[...], :] = rows + 1.0
    return total


def test_blocked_matmul_with_scratch_and_row_scatter():
    fn = mp.trace(
        blocked_matmul,
        mp.RefType((8, 32), "float32"),
        mp.RefType((32, 16), "float32"),
        mp.RefType((8, 16), "float32"),
        mp.RefType((3,), "int32"),
    )
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 32)).astype(np.float32)
    w = rng.standard_normal((32, 16)).astype(np.float32)
    rows = np.array([1, 5, 9], np.int32)  # 9 is out of range: read clamps, write drops
    # 32 products summed in another order: within float32 summation error of |x| @ |w|
    atol = 32 * float(np.finfo(np.float32).eps) * float((np.abs(x) @ np.abs(w)).sum())
    total, _, _, o, _ = check(fn, x, w, np.zeros((8, 16), np.float32), rows, atol=atol)
    assert o.shape == (8, 16) and np.isfinite(total)


def halving(counter_ref, x):
    def cond(carry):
        i, v = carry
        return v > 1.0

    def body(carry):
        i, v = carry
        v = mp.switch(i % 3, [lambda v: v / 2.0, lambda v: v - 1.0, lambda v: v * 0.75], v)
        counter_ref[i % 4] += 1
        return i + 1, v

    steps, last = mp.while_loop(cond, body, (0, x))
    return steps, last


def test_while_loop_with_switch_and_dynamic_ref_updates():
    fn = mp.trace(halving, mp.RefType((4,), "int32"), mp.ArrayType((), "float32"))
    steps, last, counter = check(fn, np.zeros(4, np.int32), np.float32(1000.0))
    assert counter.sum() == steps and last <= 1.0
