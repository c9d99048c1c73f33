"""JAX functions inside a trace, arithmetic on refs, and functions with the wrong number of
parameters: each is a ``TraceError`` naming the op, the user's ``file:line`` and the fix."""

import jax
import jax.numpy as real_jnp
import numpy as np
import pytest
from frontend_helpers import next_line, ref

import minipallas as mp
import minipallas.numpy as mnp

R = ref((8,))
HERE = __file__


def _error(f, *types):
    with pytest.raises(mp.TraceError) as info:
        mp.trace(f, *types)
    return info.value


def _jax_said(error):
    """How the error quotes the JAX exception it replaces (its cause)."""
    cause = error.__cause__
    return f"{type(cause).__name__}: {str(cause).strip().splitlines()[0]}"


def test_jax_numpy_on_a_traced_value_names_the_call_and_minipallas_numpy():
    def f(o):
        o[...] = real_jnp.exp(o[...])

    line = f.__code__.co_firstlineno + 1
    e = _error(f, R)
    assert (e.op, str(e.loc)) == ("real_jnp.exp", f"{HERE}:{line}")
    assert isinstance(e.__cause__, TypeError) and "TracedArray" in str(e.__cause__)
    assert str(e) == (
        f"{HERE}:{line}: 'real_jnp.exp': a JAX function, which takes JAX arrays, was given a "
        f"minipallas traced value (JAX said: {_jax_said(e)})\n"
        "  fix: use minipallas.numpy.exp (minipallas.numpy is jax.numpy for traced values)"
    )


def test_jax_numpy_on_a_ref_also_says_to_read_it():
    def f(o):
        o[...] = jax.numpy.sum(o)

    e = _error(f, R)
    assert (e.op, e.loc.line) == ("jax.numpy.sum", f.__code__.co_firstlineno + 1)
    assert e.fix == (
        "use minipallas.numpy.sum (minipallas.numpy is jax.numpy for traced values); "
        "and read a ref's value first: x_ref[...]"
    )


def test_jax_fori_loop_over_a_traced_carry_names_minipallas_fori_loop():
    def f(o):
        o[...] = jax.lax.fori_loop(0, 4, lambda i, c: c + 1.0, o[...])

    e = _error(f, R)
    assert (e.op, str(e.loc)) == ("jax.lax.fori_loop", f"{HERE}:{f.__code__.co_firstlineno + 1}")
    assert e.fix == "use minipallas.fori_loop, which traces into the minipallas program"


def test_jax_tracers_reaching_minipallas_name_the_jax_transformation():
    """``jax.lax.fori_loop`` traces its body with JAX tracers: using its index on a ref (which
    used to be a raw ``TracerArrayConversionError``) is an error at the body's line."""

    def f(o):
        def body(i, c):
            o[...] = o[...] * i
            return c

        jax.lax.fori_loop(0, 4, body, 0)

    first = f.__code__.co_firstlineno
    e = _error(f, R)
    assert (e.op, str(e.loc)) == ("jax.lax.fori_loop", f"{HERE}:{first + 2}")
    assert e.message == (
        f"jax.lax.fori_loop (called at {HERE}:{first + 5}) traces this code with JAX's own "
        "tracers, which minipallas code cannot use (here: JitTracer(~int32[]))"
    )
    assert e.fix == "use minipallas.fori_loop, which traces into the minipallas program"


@pytest.mark.parametrize(
    "use",
    [
        lambda o, i: o[i],  # an index
        lambda o, i: o.__setitem__(0, i.astype(real_jnp.float32)),  # a stored value
        lambda o, i: o[...] + i,  # an operand of arithmetic
    ],
)
def test_every_way_a_jax_tracer_enters_is_the_same_error(use):
    def f(o):
        return jax.lax.fori_loop(0, 4, lambda i, c: use(o, i) and c, 0)

    e = _error(f, R)
    assert (e.op, e.loc.line) == ("jax.lax.fori_loop", use.__code__.co_firstlineno)


def test_jax_jit_of_a_traced_value_names_jit():
    def f(o):
        o[...] = jax.jit(lambda x: x * 2)(o[...])

    e = _error(f, R)
    assert (e.op, e.loc.line) == ("jax.jit", f.__code__.co_firstlineno + 1)
    assert e.fix == "call the function directly, or minipallas.call(f, *args) to keep it a function"


def test_jax_errors_about_other_values_are_left_alone():
    """A JAX call that fails on its own arguments, not on a minipallas value, keeps JAX's error."""

    def f(o):
        o[...] = o[...] + real_jnp.zeros(3, dtype="no such dtype")

    with pytest.raises(TypeError) as info:
        mp.trace(f, R)
    assert not isinstance(info.value, mp.MiniPallasError)


def test_the_minipallas_spelling_traces_to_what_jax_computes():
    """The fix works: minipallas.numpy and minipallas.fori_loop match JAX bit for bit."""

    def f(o):
        o[...] = mp.fori_loop(0, 3, lambda i, c: c * 0.5 + 0.1, mnp.maximum(o[...], 0.25))

    x = np.linspace(-2, 2, 8, dtype=np.float32)
    out = x.copy()
    mp.interpret(mp.trace(f, R), out)
    expected = jax.lax.fori_loop(0, 3, lambda i, c: c * 0.5 + 0.1, real_jnp.maximum(x, 0.25))
    np.testing.assert_array_equal(out.view(np.uint32), np.asarray(expected).view(np.uint32))


@pytest.mark.parametrize(
    "use, op, example",
    [
        (lambda x: x + 1, "+", "x_ref[...] + 1"),
        (lambda x: 2 * x, "*", "1 * x_ref[...]"),
        (lambda x: x @ x, "@", "x_ref[...] @ 1"),
        (lambda x: x < 0, "<", "x_ref[...] < 0"),
        (lambda x: -x, "-", "-x_ref[...]"),
        (lambda x: abs(x), "abs", "abs(x_ref[...])"),
        (lambda x: np.exp(x), "numpy", "minipallas.numpy.exp(x_ref[...])"),
    ],
)
def test_arithmetic_on_a_ref_says_to_read_it(use, op, example):
    def f(x_ref, o_ref):
        o_ref[...] = use(x_ref)

    e = _error(f, R, R)
    line = use.__code__.co_firstlineno
    assert str(e) == (
        f"{HERE}:{line}: '{op}': a ref is a mutable buffer, not an array value, so it cannot be "
        f"computed with\n  fix: read its value with ref[...] first, e.g. {example}"
    )


def test_a_function_with_too_few_or_too_many_parameters():
    def one(x):
        pass

    with pytest.raises(mp.TraceError) as info:
        line = next_line()
        mp.trace(one, R, R)
    assert str(info.value) == (
        f"{HERE}:{line}: @one (defined at {HERE}:{one.__code__.co_firstlineno}) takes "
        "1 parameter, but trace was given 2 types (too many positional arguments)\n"
        "  fix: give trace one type per parameter of @one: x"
    )

    def some(x, y, z=0):
        pass

    assert "takes 2 to 3 parameters, but trace was given 1 type" in str(_error(some, R))
    assert "takes at least 2 parameters" in str(_error(lambda a, b, *c: None, R))
    assert "missing a required argument: 'k'" in str(_error(lambda a, *, k: None, R))
