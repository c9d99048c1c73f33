"""Every import error names the primitive (or what is wrong) and the user's ``file:line``:
unsupported primitives at their line, also inside loops and jitted helpers, primitives from
jax's own functions traced directly (no user frame recorded: the ``from_jaxpr`` call's line),
bad input dtypes and malformed calls (the ``from_jaxpr`` call's line)."""

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import minipallas
from minipallas.interop import JaxprImportError, from_jaxpr
from minipallas.interop.importer import engine as importer

HERE = __file__
X = np.ones(4, np.float32)


def _here() -> int:
    """The caller's line."""
    return inspect.currentframe().f_back.f_lineno


def _message(info) -> str:
    assert isinstance(info.value, minipallas.MiniPallasError)
    return str(info.value)


def test_an_unsupported_primitive_names_itself_at_its_line():
    line = _here() + 1
    jaxpr = jax.make_jaxpr(lambda x: lax.igamma(x, x))(X)
    with pytest.raises(JaxprImportError) as info:
        from_jaxpr(jaxpr)
    message = _message(info)
    assert f"{HERE}:{line}: 'igamma': minipallas cannot import the primitive 'igamma'" in message
    assert "fix:" in message


def test_inside_a_loop_and_a_jitted_helper():
    line = _here() + 1
    helper = jax.jit(lambda y: lax.lgamma(y))
    jaxpr = jax.make_jaxpr(lambda x: lax.fori_loop(0, 2, lambda i, c: c + helper(c), x))(X)
    with pytest.raises(JaxprImportError) as info:
        from_jaxpr(jaxpr)
    assert f"{HERE}:{line}: 'lgamma'" in _message(info)


def test_a_jax_function_traced_directly_gets_the_from_jaxpr_line():
    jaxpr = jax.make_jaxpr(jnp.linalg.cholesky)(np.eye(2, dtype=np.float32))
    with pytest.raises(JaxprImportError) as info:
        line = _here() + 1
        from_jaxpr(jaxpr)
    assert f"{HERE}:{line}: 'cholesky'" in _message(info)


def test_bad_dtypes_at_their_line_or_the_call():
    line = _here() + 1
    jaxpr = jax.make_jaxpr(lambda x: x.astype(jnp.complex64).real)(X)
    with pytest.raises(JaxprImportError) as info:
        from_jaxpr(jaxpr)
    assert f"{HERE}:{line}: 'convert_element_type'" in _message(info)
    complex_input = jax.make_jaxpr(lambda z: z.real)(np.ones(4, np.complex64))
    with pytest.raises(JaxprImportError) as info:
        line = _here() + 1
        from_jaxpr(complex_input)
    assert f"{HERE}:{line}: input 0 has dtype complex64" in _message(info)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda j: from_jaxpr(j, [1]), "a ClosedJaxpr carries its own consts"),
        (lambda j: from_jaxpr("x + 1"), "from_jaxpr expects a jaxpr"),
        (lambda j: from_jaxpr(j.jaxpr, [1]), "the jaxpr has 0 constvars but 1 consts"),
        (lambda j: from_jaxpr(j, pallas_oob="wrap"), "pallas_oob='wrap' is not a mode"),
    ],
)
def test_malformed_calls_carry_the_call_line(call, message):
    jaxpr = jax.make_jaxpr(lambda x: x + 1)(X)
    with pytest.raises(JaxprImportError) as info:
        call(jaxpr)
    line = inspect.getsourcelines(call)[1]  # the lambda calling from_jaxpr
    assert f"{HERE}:{line}: {message}" in _message(info)


def test_a_rules_python_error_is_an_import_error_at_the_line(monkeypatch):
    def broken(scope, eqn):
        return [eqn.params["no such param"]]

    monkeypatch.setitem(importer.RULES, "sin", broken)
    line = _here() + 1
    jaxpr = jax.make_jaxpr(lambda x: jnp.sin(x))(X)
    with pytest.raises(JaxprImportError) as info:
        from_jaxpr(jaxpr)
    message = _message(info)
    assert f"{HERE}:{line}: 'sin': the import rule failed: KeyError" in message
    assert "importer bug" in message
