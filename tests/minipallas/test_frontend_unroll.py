"""``fori_loop(..., unroll=)`` with jax's meaning: ``True`` unrolls fully (no loop op), an int
``k`` runs ``k`` iterations per trip of the loop and the remainder after it. Every unrolling
gives the rolled loop's results bit for bit (interpreted and compiled) and jax's."""

import jax
import numpy as np
import pytest
from frontend_helpers import arr, find, raises_at, ref, run, same, traced

import minipallas as mp
import minipallas.numpy as jnp


def kernel_like(lower, upper, unroll):
    """A float carry, an int carry and a ref written at the loop index. The values stay exact
    (dyadic, under 24 bits), so XLA's fused multiply-adds round as the interpreter does."""

    def f(x, o_ref):
        def body(i, carry):
            s, n = carry
            o_ref[i] = x[i] * s
            return s * 2.0 + x[i], n + i

        return mp.fori_loop(lower, upper, body, (jnp.float32(0.25), 0), unroll=unroll)

    return traced(f, arr((16,)), ref((16,)))


X = np.arange(-3, 13, dtype=np.float32) % 7
UNROLLS = [None, False, 1, True, 2, 3, 4, 5, 7, 9, 16, 40]


def outputs(fn):
    o = np.zeros(16, np.float32)
    interpreted = run(fn, X, o)
    compiled = mp.compile(fn)(X, np.zeros(16, np.float32))
    return [*interpreted, o], list(compiled)


@pytest.mark.parametrize("bounds", [(0, 16), (3, 10), (5, 5), (7, 2)])
@pytest.mark.parametrize("unroll", UNROLLS)
def test_every_unrolling_gives_the_rolled_results(bounds, unroll):
    rolled, _ = outputs(kernel_like(*bounds, None))
    interpreted, compiled = outputs(kernel_like(*bounds, unroll))
    for a, b, c in zip(rolled, interpreted, compiled, strict=True):
        same(b, a)
        same(c, a)


@pytest.mark.parametrize("unroll", [True, 2, 3, 5])
def test_unrolled_results_equal_jax(unroll):
    def body(i, c):
        return c * 2 + jax.numpy.float32(i)

    theirs = jax.jit(
        lambda: jax.lax.fori_loop(1, 12, body, jax.numpy.float32(0.5), unroll=unroll)
    )()
    ours = traced(lambda: mp.fori_loop(1, 12, lambda i, c: c * 2 + i.astype(jnp.float32),
                                       jnp.float32(0.5), unroll=unroll))  # fmt: skip
    same(run(ours)[0], np.asarray(theirs))


def test_unroll_true_leaves_no_loop_and_constant_indices():
    fn = kernel_like(0, 4, True)
    assert not find(fn, "for")
    assert len(find(fn, "swap")) + len(find(fn, "store")) == 4


@pytest.mark.parametrize("k, trips, inline", [(2, 8, 0), (3, 5, 1), (5, 3, 1), (16, 1, 16)])
def test_unroll_k_runs_k_iterations_per_trip(k, trips, inline):
    """16 iterations: 16 // k trips of k inline bodies, 16 % k after the loop; one trip is
    traced inline, no loop."""
    fn = kernel_like(0, 16, k)
    writes = lambda ops: [op for op in ops if op.name in ("swap", "store")]  # noqa: E731
    loops = find(fn, "for")
    if trips == 1:
        assert not loops and len(writes(fn.walk())) == inline
        return
    (loop,) = loops
    defs = {op.result: op for op in fn.body.ops if op.name == "constant"}
    lower, upper = (int(defs[v].attrs["value"].array()) for v in loop.operands[:2])
    assert (lower, upper) == (0, trips)
    assert len(writes(loop.regions[0].ops)) == k
    assert len(writes(fn.body.ops)) == 16 % k


def test_unroll_needs_static_bounds():
    def f(n):
        return mp.fori_loop(0, n, lambda i, c: c + 1, 0, unroll=2)

    with raises_at(f.__code__.co_firstlineno + 1, match="static") as info:
        mp.trace(f, arr((), "int32"))
    assert "unroll" in info.value.fix


@pytest.mark.parametrize("bad", [-1, 2.5, "2"])
def test_unroll_must_be_a_bool_or_a_non_negative_int(bad):
    def f():
        return mp.fori_loop(0, 4, lambda i, c: c + 1, 0, unroll=bad)

    with raises_at(f.__code__.co_firstlineno + 1, match="non-negative int"):
        mp.trace(f)


def test_unrolled_body_with_a_wrong_carry_type_is_reported():
    def f():
        return mp.fori_loop(0, 4, lambda i, c: c + 0.5, 0, unroll=2)

    with raises_at(f.__code__.co_firstlineno + 1, match="output 0 has type f32"):
        mp.trace(f)
