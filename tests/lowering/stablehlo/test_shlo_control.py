"""Control flow through StableHLO: ``for``/``while`` as ``stablehlo.while``, ``cond`` as
``stablehlo.if``/``case`` with lax.switch's index clamp (``stablehlo.select`` when both
branches only move data), ``call`` as ``func.call``."""

import numpy as np
import pytest
from ir_types import F32, I32
from shlo_util import check, const

import minipallas
from minipallas.ir import ArrayType, Builder, params

VEC = ArrayType((4,), "float32")


def counted_loop(index_dtype="int32"):
    """``acc = x; for i in [lo, hi): acc = acc * scale + i``."""
    it = ArrayType((), index_dtype)
    b = Builder()
    lo, hi, scale, x = params([it, it, VEC, VEC])
    body = Builder()
    i, s, acc = params([it, VEC, VEC])
    fi = body.create("convert", [i], {"dtype": "float32"}).result
    fb = body.create("broadcast_in_dim", [fi], {"shape": (4,), "dims": ()}).result
    prod = body.create("mul", [acc, s]).result
    new = body.create("add", [prod, fb]).result
    loop = b.create("for", [lo, hi, scale, x], {"num_consts": 1}, [body.block([i, s, acc], [new])])
    return b.function("loop", [lo, hi, scale, x], [loop.result])


LOOP_CASES = [
    (bounds, dtype)
    for bounds in [(0, 5), (3, 3), (5, 2), (-2, 3)]
    for dtype in ["int32", "int8", "uint32"]
    if not (dtype == "uint32" and min(bounds) < 0)
]


@pytest.mark.parametrize("bounds, index_dtype", LOOP_CASES)
def test_for_loop(bounds, index_dtype):
    dtype = np.dtype(index_dtype)
    lo, hi = (np.asarray(v).astype(dtype) for v in bounds)
    scale = np.array([1.0, 0.5, -1.0, 2.0], np.float32)
    x = np.arange(4, dtype=np.float32)
    check(counted_loop(index_dtype), lo, hi, scale, x)


def collatz_steps():
    """``while n != 1: n = n/2 if even else 3n+1; steps += 1`` with a constant per region."""
    b = Builder()
    n0, one_in = params([I32, I32])
    cond = Builder()
    c_one, c_n, c_steps = params([I32, I32, I32])
    done = cond.create("ne", [c_n, c_one]).result
    body = Builder()
    n, steps = params([I32, I32])
    two = const(body, 2, "int32")
    three = const(body, 3, "int32")
    one = const(body, 1, "int32")
    even = body.create("eq", [body.create("rem", [n, two]).result, const(body, 0, "int32")]).result
    half = body.create("div", [n, two]).result
    up = body.create("add", [body.create("mul", [n, three]).result, one]).result
    nxt = body.create("select", [even, half, up]).result
    more = body.create("add", [steps, one]).result
    zero = const(b, 0, "int32")
    loop = b.create(
        "while",
        [one_in, n0, zero],
        {"cond_nconsts": 1, "body_nconsts": 0},
        [cond.block([c_one, c_n, c_steps], [done]), body.block([n, steps], [nxt, more])],
    )
    return b.function("collatz", [n0, one_in], list(loop.results))


@pytest.mark.parametrize("n", [1, 6, 27])
def test_while_loop(n):
    out = check(collatz_steps(), np.int32(n), np.int32(1))
    assert out[0] == 1


def switch(n_branches, index_dtype="int32"):
    """Branch k returns ``x * (k + 1)`` and ``k``."""
    b = Builder()
    idx, x = params([ArrayType((), index_dtype), VEC])
    branches = []
    for k in range(n_branches):
        br = Builder()
        (bx,) = params([VEC])
        factor = br.create(
            "broadcast_in_dim", [const(br, k + 1.0, "float32")], {"shape": (4,), "dims": ()}
        ).result
        out = br.create("mul", [bx, factor]).result
        branches.append(br.block([bx], [out, const(br, k, "int32")]))
    op = b.create("cond", [idx, x], {}, branches)
    return b.function(f"switch{n_branches}", [idx, x], list(op.results))


@pytest.mark.parametrize("index_dtype", ["int32", "int8", "uint32"])
@pytest.mark.parametrize("n_branches", [1, 2, 3, 5])
def test_cond_clamps_its_index(n_branches, index_dtype):
    fn = switch(n_branches, index_dtype)
    x = np.arange(4, dtype=np.float32)
    for index in [-100, -1, 0, 1, 2, 4, 7, 127]:
        if index_dtype == "uint32" and index < 0:
            index = 2**32 + index  # huge unsigned: clamps to the last branch
        idx = np.asarray(index).astype(index_dtype)
        out = check(fn, idx, x)
        assert out[1] == min(max(int(idx), 0), n_branches - 1)


def test_two_branches_become_if_more_become_case():
    text2 = str(minipallas.lower(switch(2)))
    text3 = str(minipallas.lower(switch(3)))
    assert "stablehlo.if" in text2 and "stablehlo.case" not in text2
    assert "stablehlo.case" in text3 and "stablehlo.clamp" in text3


def reset(index_dtype="int32"):
    """A kernel's ``when``: branch 0 keeps ``x`` (a reshape of it), branch 1 zeroes it."""
    b = Builder()
    idx, x = params([ArrayType((), index_dtype), VEC])
    keep, zero = Builder(), Builder()
    (kx,) = params([VEC])
    kept = keep.create("reshape", [kx], {"shape": (4,)}).result
    (zx,) = params([VEC])
    zeros = zero.create(
        "broadcast_in_dim", [const(zero, 0.0, "float32")], {"shape": (4,), "dims": ()}
    ).result
    op = b.create(
        "cond", [idx, x], {}, [keep.block([kx], [kept, kx]), zero.block([zx], [zeros, zx])]
    )
    return b.function("reset", [idx, x], list(op.results))


@pytest.mark.parametrize("index_dtype", ["int32", "int8", "uint32"])
def test_two_branches_that_only_move_data_select(index_dtype):
    fn = reset(index_dtype)
    text = str(minipallas.lower(fn))
    assert "stablehlo.select" in text and "stablehlo.if" not in text
    x = np.arange(1, 5, dtype=np.float32)
    for index in [-3, 0, 1, 9] if index_dtype != "uint32" else [0, 1, 2**32 - 1]:
        out = check(fn, np.asarray(index).astype(index_dtype), x)  # against the interpreter
        np.testing.assert_array_equal(out[0], x if index <= 0 else np.zeros(4, np.float32))
        np.testing.assert_array_equal(out[1], x)


def callee(name="scale"):
    b = Builder()
    x, k = params([VEC, F32])
    kb = b.create("broadcast_in_dim", [k], {"shape": (4,), "dims": ()}).result
    return b.function(name, [x, k], [b.create("mul", [x, kb]).result])


def test_calls_share_one_private_function():
    inner = callee()
    b = Builder()
    x, k = params([VEC, F32])
    once = b.create("call", [x, k], {"callee": inner}).result
    twice = b.create("call", [once, k], {"callee": inner}).result
    fn = b.function("main_like", [x, k], [twice])
    check(fn, np.arange(4, dtype=np.float32), np.float32(3))
    text = str(minipallas.lower(fn))
    assert text.count("func.func private @scale") == 1
    assert text.count("call @scale") == 2


def test_callee_names_never_clash():
    """Two different functions named alike, and one named ``main``, get distinct symbols."""
    first, second, main = callee("f"), callee("f"), callee("main")
    b = Builder()
    x, k = params([VEC, F32])
    y = b.create("call", [x, k], {"callee": first}).result
    y = b.create("call", [y, k], {"callee": second}).result
    y = b.create("call", [y, k], {"callee": main}).result
    fn = b.function("main", [x, k], [y])
    check(fn, np.arange(4, dtype=np.float32), np.float32(2))
    lowered = minipallas.lower(fn)
    text = str(lowered)
    assert "func.func @main(" in text
    for name in ("f", "f_1", "main_1"):
        assert f"func.func private @{name}(" in text


def test_nested_regions_and_a_call_inside_a_loop():
    inner = callee()
    b = Builder()
    n, x, k = params([I32, VEC, F32])
    body = Builder()
    i, bk, acc = params([I32, F32, VEC])
    two = const(body, 2, "int32")
    parity = body.create("rem", [i, two]).result
    br0, br1 = Builder(), Builder()
    a0, k0 = params([VEC, F32])
    a1, k1 = params([VEC, F32])
    scaled = br1.create("call", [a1, k1], {"callee": inner}).result
    pick = body.create(
        "cond", [parity, acc, bk], {}, [br0.block([a0, k0], [a0]), br1.block([a1, k1], [scaled])]
    )
    zero = const(b, 0, "int32")
    loop = b.create(
        "for", [zero, n, k, x], {"num_consts": 1}, [body.block([i, bk, acc], [pick.result])]
    )
    fn = b.function("nested", [n, x, k], [loop.result])
    check(fn, np.int32(5), np.arange(4, dtype=np.float32), np.float32(1.5))
