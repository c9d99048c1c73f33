"""``minipallas.trace``: parameters, results, names, locations, and misuse of tracers."""

import numpy as np
import pytest
from frontend_helpers import arr, names, next_line, raises_at, ref, run, same, traced

import minipallas as mp
import minipallas.numpy as jnp
from minipallas import tpu
from minipallas.frontend.refs import TracedRef
from minipallas.frontend.values import TracedArray


def test_one_tracer_per_type_and_function_signature():
    seen = []

    def f(x_ref, y, s_ref):
        seen.extend([type(x_ref), type(y), type(s_ref)])
        assert (x_ref.shape, x_ref.dtype, x_ref.ndim) == ((8, 128), np.float32, 2)
        assert (y.shape, y.dtype) == ((4,), np.int32)
        assert s_ref.memory_space == tpu.VMEM

    fn = traced(f, ref((8, 128)), arr((4,), "int32"), tpu.VMEM((2,), jnp.bfloat16))
    assert seen == [TracedRef, TracedArray, TracedRef]
    assert fn.name == "f"
    assert fn.param_types == (
        ref((8, 128)),
        arr((4,), "int32"),
        mp.RefType((2,), "bfloat16", tpu.VMEM),
    )
    assert fn.result_types == ()
    assert fn.body.ops == ()


@pytest.mark.parametrize(
    "ret, expected",
    [
        (lambda x: None, ()),
        (lambda x: x, (arr((4,)),)),
        (lambda x: (x, x + 1), (arr((4,)), arr((4,)))),
        (lambda x: [x], (arr((4,)),)),
        (lambda x: (1, 2.5, True), (arr((), "int32"), arr(()), arr((), "bool"))),
        (lambda x: np.arange(3), (arr((3,), "int32"),)),
    ],
)
def test_results(ret, expected):
    fn = traced(ret, arr((4,)))
    assert fn.result_types == expected


def test_returning_a_parameter_yields_it_directly():
    fn = traced(lambda x: x, arr((4,)))
    assert fn.body.results == fn.params


def test_python_results_become_constants_with_their_values():
    fn = traced(lambda: (7, np.array([1.5, 2.5], np.float32)))
    assert names(fn) == ["constant", "constant"]
    a, b = run(fn)
    same(a, np.int32(7))
    same(b, np.array([1.5, 2.5], np.float32))


def test_name_defaults_to_the_function_and_can_be_given():
    assert traced(lambda: None).name == "lambda"
    assert traced(lambda: None, name="kernel").name == "kernel"


def test_every_op_is_located_at_the_user_line():
    lines = []

    def f(x):
        lines.append(next_line())
        return jnp.exp(x) * 2.0

    fn = traced(f, arr((4,)))
    assert names(fn) == ["exp", "constant", "broadcast_in_dim", "mul"]
    for op in fn.body.ops:
        assert (op.loc.file, op.loc.line) == (__file__, lines[0])


def test_region_ops_are_located_at_the_call_line_and_body_ops_at_theirs():
    lines = []

    def f(x_ref):
        lines.append(next_line())
        mp.fori_loop(0, 4, body, 0.0)

    def body(i, c):
        lines.append(next_line())
        return c + x_ref_value[0]

    x_ref_value = np.ones(4, np.float32)
    fn = traced(f, ref((4,)))
    (loop,) = [op for op in fn.body.ops if op.name == "for"]
    assert loop.loc.line == lines[0]
    assert {op.loc.line for op in loop.regions[0].ops} == {lines[1]}


def test_kernel_end_to_end_against_numpy():
    def kernel(x_ref, o_ref):
        def body(scratch):
            scratch[...] = jnp.zeros((8, 128), jnp.float32)

            def step(i, acc):
                scratch[i] = x_ref[i] * 2.0 + acc
                return acc + 1.0

            total = mp.fori_loop(0, 8, step, 0.0)
            o_ref[...] = scratch[...] + total

        mp.run_scoped(body, tpu.VMEM((8, 128), jnp.float32))

    fn = traced(kernel, ref((8, 128)), ref((8, 128)))
    x = np.random.default_rng(0).standard_normal((8, 128)).astype(np.float32)
    out = np.zeros_like(x)
    run(fn, x, out, uninitialized="error")
    expected = x * np.float32(2) + np.arange(8, dtype=np.float32)[:, None] + np.float32(8)
    same(out, expected)


# ----- mistakes -----


def test_trace_rejects_non_types():
    line = next_line()
    with raises_at(line + 1, match="one type per argument"):
        mp.trace(lambda x: None, (8, 128))


def test_returning_a_ref_is_an_error():
    def f(x_ref):
        return x_ref

    with pytest.raises(mp.TraceError, match="returned a ref"):
        mp.trace(f, ref((4,)))


def test_using_a_tracer_after_its_trace_ended():
    kept = []
    mp.trace(lambda x: kept.append(x), arr((4,)))
    line = next_line()
    with raises_at(line + 1, match="already ended"):
        kept[0] + 1


def test_array_ops_outside_a_trace():
    line = next_line()
    with raises_at(line + 1, match="no function is being traced"):
        jnp.zeros((4,))


def test_traced_values_have_no_concrete_value():
    def f(x):
        line = next_line()
        if x > 0:  # a data-dependent Python branch
            pass
        return line

    with pytest.raises(mp.TraceError, match="no concrete value") as info:
        mp.trace(f, arr(()))
    assert info.value.loc.file == __file__
    assert "minipallas.cond" in str(info.value)


@pytest.mark.parametrize("use", [int, float, lambda x: range(x), np.asarray])
def test_traced_values_cannot_become_python_or_numpy_values(use):
    with pytest.raises(mp.TraceError, match="no concrete value"):
        mp.trace(lambda x: use(x) and None, arr((), "int32"))


def test_tracer_of_another_function_cannot_be_captured():
    outer = []

    def inner(y):
        return y + outer[0]

    def f(x):
        outer.append(x)
        return mp.call(inner, x)

    with pytest.raises(mp.TraceError, match="does not enclose"):
        mp.trace(f, arr((4,)))


def test_a_failed_trace_leaves_no_scope_open():
    with pytest.raises(mp.TraceError):
        mp.trace(lambda x_ref: x_ref[0, 0], ref((4,)))
    with pytest.raises(mp.TraceError, match="no function is being traced"):
        mp.program_id(0)
