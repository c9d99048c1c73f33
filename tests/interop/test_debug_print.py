"""``jax.debug.print`` imported as the ``debug_print`` op: the interpreter, ``compile`` (an XLA
host callback, as upstream lowers it on CPU) and ``to_jax`` print exactly the lines
``jax.jit``-ed upstream prints; discharge and cleanup keep it; what the IR cannot hold is
refused by name; kernels refuse it with a fix. Output is read with ``capfd``: XLA's callback
prints from another thread."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import minipallas as mp
from minipallas.interop import JaxprImportError, from_jaxpr, to_jax
from minipallas.lowering.runtime.compiled import compile as mp_compile
from minipallas.passes.cleanup import cleanup
from minipallas.tools.difftest import Case, ref, run


def _lines(capfd) -> list[str]:
    jax.effects_barrier()
    return capfd.readouterr().out.splitlines()


def _program(options: dict):
    """A fresh function (so no trace cache hides the print options it is traced under)."""

    def f(x, i, b, h):
        jax.debug.print("x={x} i={} s={s:.3f}", i, x=x, s=x.sum(), ordered=True)
        jax.debug.print("b={} h={h} w={}", b, 3, h=h, ordered=True)
        jax.debug.print("no placeholders", x[0], i, ordered=True, skip_format_check=True)
        return (x * 2,)

    with np.printoptions(**options):
        return jax.jit(f), jax.make_jaxpr(f)


ARGS = (
    (np.arange(12, dtype=np.float32).reshape(3, 4) / 7).astype(ml_dtypes.bfloat16),
    np.int32(-5),
    np.array([True, False]),
    np.array([1e-9, np.nan, -np.inf, 12345.678], np.float16),
)


@pytest.mark.parametrize(
    "options", [{}, {"precision": 3, "suppress": True, "linewidth": 30, "sign": "+"}], ids=str
)
def test_every_path_prints_what_upstream_prints(capfd, options):
    jitted, make_jaxpr = _program(options)
    jitted(*ARGS)
    upstream = _lines(capfd)
    assert len(upstream) >= 3 and upstream[0].startswith("x=[[")
    fn = from_jaxpr(make_jaxpr(*ARGS))
    assert sum(op.name == "debug_print" for op in fn.walk()) == 3

    mp.interpret(fn, *ARGS)
    assert _lines(capfd) == upstream  # in program order, as upstream's ordered prints
    mp_compile(fn)(*ARGS)
    assert sorted(_lines(capfd)) == sorted(upstream)  # XLA may reorder unordered callbacks
    jax.jit(to_jax(fn))(*ARGS)
    assert sorted(_lines(capfd)) == sorted(upstream)


def test_a_print_in_a_program_over_refs_survives_discharge_and_cleanup(capfd):
    def kernel(o_ref, a_ref):
        def body(k, carry):
            jax.debug.print("k={} row={r}", k, r=a_ref[k])
            return carry

        jax.lax.fori_loop(0, 3, body, 0)
        o_ref[...] = a_ref[...] + 1

    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    report = run(Case("print", kernel, (ref(np.zeros_like(x)), ref(x))))
    assert report.ok, report.text()
    lines = _lines(capfd)
    expected = [f"k={k} row={x[k]}" for k in range(3)]
    assert sorted(lines) == sorted(expected * len(report.outcomes))
    pure = cleanup(mp.discharge(report.program))
    assert [op.name for op in pure.walk()].count("debug_print") == 1  # inside the loop


def test_cleanup_keeps_a_print_whose_values_nothing_else_uses(capfd):
    fn = mp.parse(
        """
        func @f(%x: f32[3], %n: i32[]) -> () {
          %lo = constant 0 : i32[]
          for %lo to %n (%x) {
          ^(%i: i32[], %y: f32[3]):
            %z = neg %y : f32[3]
            debug_print %i, %z, fmt "{} {z}", names ("", "z")
            yield
          }
          return
        }
        """
    )
    kept = cleanup(fn)
    assert [op.name for op in kept.walk()] == ["constant", "for", "neg", "debug_print"]
    mp.interpret(kept, np.float32([1, 2, 0]), np.int32(2))
    assert _lines(capfd) == ["0 [-1. -2. -0.]", "1 [-1. -2. -0.]"]


def test_text_round_trip_keeps_format_names_and_options():
    text = (
        'debug_print %x, %i, fmt "x={x} \\"{}\\"", names ("", "x"), '
        'options (precision 3, suppress true, sign " ")'
    )
    fn = mp.parse(f"func @f(%x: f32[2], %i: i32[]) -> () {{\n  {text}\n  return\n}}")
    (op,) = fn.body.ops
    assert op.attrs["options"] == (("precision", 3), ("suppress", True), ("sign", " "))
    assert str(mp.parse(str(fn))) == str(fn)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda x: jax.debug.print("{} {}", "text", x), "non-array arguments"),
        (lambda x: jax.debug.print("{}", [x, x]), "nested arguments"),
        (lambda x: jax.debug.print("{!r}", x), "'!r'"),
        (lambda x: jax.debug.log("{}", x), "jax.debug.log"),
    ],
    ids=["static", "nested", "repr", "log"],
)
def test_what_the_ir_cannot_hold_is_refused_by_name(call, match):
    closed = jax.make_jaxpr(call)(jnp.zeros(2))
    with pytest.raises(JaxprImportError, match=f"debug_print.*{match}"):
        from_jaxpr(closed)


def test_a_custom_formatter_is_refused():
    with np.printoptions(formatter={"float": lambda v: "?"}):
        closed = jax.make_jaxpr(lambda x: jax.debug.print("{}", x))(jnp.zeros(2))
    with pytest.raises(JaxprImportError, match="formatter"):
        from_jaxpr(closed)


@pytest.mark.parametrize("backend", ["tpu", "gpu"])
def test_kernel_backends_refuse_it_with_a_fix(backend):
    import importlib

    rules = importlib.import_module(f"minipallas.lowering.{backend}.context").RULES
    fn = mp.parse(
        'func @f(%x: f32[8]) -> () {\n  debug_print %x, fmt "{}", names ("")\n  return\n}'
    )
    with pytest.raises(mp.PassError, match="debug_print.*not lowered") as e:
        rules["debug_print"](None, fn.body.ops[0])
    assert "minipallas.interpret" in str(e.value)


def test_a_kernel_that_prints_runs_its_grid_as_loops(capfd):
    """Batching the grid would print once for all points; upstream's interpret mode prints at
    each."""
    from minipallas.frontend.scopes import emit
    from minipallas.kernels.programs.vectorized_grid import vectorized_grid_plan

    def kernel(x_ref, o_ref):
        emit(None, "debug_print", [], {"fmt": "block", "names": (), "options": ()})
        o_ref[...] = x_ref[...] * 2

    call = mp.pallas_call(
        kernel,
        out_shape=mp.ArrayType((6,), "float32"),
        grid=(3,),
        in_specs=[mp.BlockSpec((2,), lambda i: (i,))],
        out_specs=mp.BlockSpec((2,), lambda i: (i,)),
    )
    x = np.arange(6, dtype=np.float32)
    assert vectorized_grid_plan(call.trace(x)) is None
    np.testing.assert_array_equal(call(x), 2 * x)
    assert _lines(capfd) == ["block"] * 3


def test_a_print_of_a_ref_prints_its_current_contents_as_upstream(capfd):
    """``pl.debug_print("{}", o_ref)`` hands upstream the ref itself: its interpret mode prints
    what the ref holds at that point of each grid step, and so does the import (a whole-ref
    read before the print)."""
    from jax.experimental import pallas as pl

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1
        pl.debug_print("o: {}", o_ref)
        o_ref[...] += 1
        pl.debug_print("x then o: ", x_ref, o_ref)

    def call(interpret):
        return pl.pallas_call(
            kernel,
            jax.ShapeDtypeStruct((4,), jnp.float32),
            grid=(2,),
            in_specs=[pl.BlockSpec((2,), lambda i: (i,))],
            out_specs=pl.BlockSpec((2,), lambda i: (i,)),
            interpret=interpret,
        )

    x = np.arange(4, dtype=np.float32)
    want = np.asarray(jax.jit(call(True))(x))
    expected = _lines(capfd)
    assert expected == ["o: [1. 2.]", "x then o:  [0. 1.] [2. 3.]", "o: [3. 4.]",
                        "x then o:  [2. 3.] [4. 5.]"]  # fmt: skip
    fn = from_jaxpr(jax.make_jaxpr(call(False))(x))
    (got,) = mp.interpret(fn, x)
    np.testing.assert_array_equal(got, want)
    assert _lines(capfd) == expected
    (got,) = mp_compile(fn)(x)  # unordered prints (pl.debug_print's): XLA may reorder them
    np.testing.assert_array_equal(got, want)
    assert sorted(_lines(capfd)) == sorted(expected)
