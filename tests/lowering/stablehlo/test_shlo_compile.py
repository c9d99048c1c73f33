"""``minipallas.compile(fn)``: runs the emitted module itself on XLA:CPU, compiles once per
function object, checks its arguments, and returns results then final ref values."""

import numpy as np
import pytest
from ir_types import F8 as VEC
from ir_types import I32
from ir_types import REF8 as REF
from shlo_util import check, const

import minipallas
from minipallas.ir import ArrayType, Builder, Dyn, Int, Slice, params
from minipallas.ir.errors import MiniPallasError
from minipallas.lowering.runtime import jax_dispatch, xla_cpu


def accumulate():
    """``ref[i] += x`` for a dynamic ``i``; returns the sum of ``x`` and a copy of ``ref[0]``."""
    b = Builder()
    r, x, i = params([REF, VEC, I32])
    b.create("addupdate", [r, x], {"indexer": (Slice(0, 8, 1),)})
    v = b.create("get", [r, i], {"indexer": (Int(Dyn(0)),)}).result
    s = b.create("reduce_sum", [x], {"axes": (0,)}).result
    return b.function("accumulate", [r, x, i], [s, v])


def test_results_are_fresh_writable_arrays():
    r = np.zeros(8, np.float32)
    out = minipallas.compile(accumulate())(r, np.ones(8, np.float32), np.int32(0))
    assert all(o.flags.writeable for o in out)
    minipallas.interpret(accumulate(), out[2], np.ones(8, np.float32), np.int32(0))  # as a ref


def test_stateful_results_then_final_refs():
    r = np.arange(8, dtype=np.float32)
    x = np.ones(8, np.float32)
    total, at_i, final = check(accumulate(), r, x, np.int32(3))
    assert total == 8.0 and at_i == 4.0
    np.testing.assert_array_equal(final, np.arange(8, dtype=np.float32) + 1)
    np.testing.assert_array_equal(r, np.arange(8, dtype=np.float32))  # inputs are not mutated


def compiled_texts(monkeypatch) -> list[str]:
    """The module texts compiled from now on, through either way a module runs: behind
    ``jax.jit``'s dispatch or through jaxlib's Python bindings."""
    texts: list[str] = []
    jitted, cpu_compile = jax_dispatch.jitted, xla_cpu.cpu_compile

    def jitted_counting(text, params, results):
        texts.append(text)
        return jitted(text, params, results)

    def cpu_compile_counting(text, callbacks=()):
        texts.append(text)
        return cpu_compile(text, callbacks)

    monkeypatch.setattr(jax_dispatch, "jitted", jitted_counting)
    monkeypatch.setattr(xla_cpu, "cpu_compile", cpu_compile_counting)
    return texts


def test_compiled_once_per_function_and_callable_many_times(monkeypatch):
    texts = compiled_texts(monkeypatch)
    fn = accumulate()
    compiled = minipallas.compile(fn)
    assert minipallas.compile(fn) is compiled
    for k in range(3):
        out = compiled(np.zeros(8, np.float32), np.full(8, k, np.float32), np.int32(0))
        assert out[1] == k
    assert len(texts) == 1
    assert minipallas.compile(accumulate()) is not compiled  # another function object
    assert len(texts) == 2


def test_the_emitted_module_is_what_runs(monkeypatch):
    texts = compiled_texts(monkeypatch)
    fn = accumulate()
    assert minipallas.compile(fn).jitted is not None  # behind jax.jit's dispatch
    assert texts == [minipallas.lower(fn).as_text(debug_info=False)]


def test_arguments_are_checked():
    compiled = minipallas.compile(accumulate())
    good = (np.zeros(8, np.float32), np.zeros(8, np.float32), np.int32(0))
    with pytest.raises(MiniPallasError, match="takes 3 arguments, got 2"):
        compiled(*good[:2])
    with pytest.raises(
        MiniPallasError, match=r"argument 1 of @accumulate must be f32\[8\], got f32\[7\]"
    ):
        compiled(good[0], np.zeros(7, np.float32), good[2])
    with pytest.raises(
        MiniPallasError, match=r"argument 0 of @accumulate must be f32\[8\], got float64\[8\]"
    ):
        compiled(np.zeros(8), *good[1:])
    with pytest.raises(MiniPallasError, match=r"must be i32\[\], got int64\[\]"):
        compiled(*good[:2], np.int64(0))
    assert compiled(*good[:2], 5)[1] == 0.0  # a Python scalar takes the parameter's dtype
    with pytest.raises(MiniPallasError, match=r"must be i32\[\], got float64\[\]"):
        compiled(*good[:2], np.float64(0))  # a numpy scalar keeps its own
    with pytest.raises(MiniPallasError, match=r"must be i32\[\]"):
        compiled(*good[:2], 2**40)


def test_bfloat16_and_bool_arguments_and_no_arguments():
    b = Builder()
    x, p = params([ArrayType((3,), "bfloat16"), ArrayType((3,), "bool")])
    y = b.create("select", [p, x, b.create("neg", [x]).result]).result
    fn = b.function("signs", [x, p], [y])
    import ml_dtypes

    check(fn, np.array([1.5, -2, 3], ml_dtypes.bfloat16), np.array([True, False, True]))
    b = Builder()
    assert minipallas.compile(b.function("nothing", [], [const(b, 7, "int8")]))()[0] == 7
