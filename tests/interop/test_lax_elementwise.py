"""The elementwise primitives real jnp programs use, imported from upstream jaxprs: the
interpreter, ``compile`` and ``to_jax`` agree with upstream bit for bit (``check``), through the
difftest harness as a whole program, and ``emit`` (``exporter/stateful.py``) gives upstream the
same primitives back."""

import jax
import jax.numpy as jnp
import jax.scipy.special as jss
import ml_dtypes
import numpy as np
import pytest
from interop_helpers import arr, check
from jax import lax

import minipallas
from minipallas.interop.exporter import stateful
from minipallas.tools import difftest

EDGES = [0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 0.999, -1.0, 1.0, 3.0, 1e-40, -1e-40, 88.9]
EDGES += [np.inf, -np.inf, np.nan, 1e30, -7.25, 0.3]
FLOAT = {
    "floor": jnp.floor,
    "ceil": jnp.ceil,
    "round_even": jnp.round,
    "rint": jnp.rint,
    "round_away": lax.round,
    "exp2": jnp.exp2,
    "expm1": jnp.expm1,
    "log1p": jnp.log1p,
    "erf": jss.erf,
    "erf_inv": jss.erfinv,
    "tan": jnp.tan,
    "asin": jnp.arcsin,
    "atan": jnp.arctan,
    "sinh": jnp.sinh,
    "cosh": jnp.cosh,
    "asinh": jnp.arcsinh,
    "cbrt": jnp.cbrt,
    "atan2": lambda x: jnp.arctan2(x, x[::-1]),
    "nextafter": lambda x: jnp.nextafter(x, x[::-1]),
}
# ops whose float32 interpreter values are within a bound (transcendental.ULP_BOUND)
ULPS = {"atan": 5, "asinh": 1}
INT = {
    "left_shift": lambda x, y: jnp.left_shift(x, y),
    "right_shift": lambda x, y: jnp.right_shift(x, y),
    "shift_right_logical": lax.shift_right_logical,
    "population_count": lambda x, y: lax.population_count(x),
    "clz": lambda x, y: lax.clz(x),
}


def _floats(dtype):
    values = np.array(EDGES * 2, np.float32)[:32].reshape(2, 16)
    with np.errstate(over="ignore"):  # 1e30 is inf in float16
        return values.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.float16])
@pytest.mark.parametrize("name", FLOAT)
def test_float_primitives_import(name, dtype):
    x = _floats(dtype)
    check(FLOAT[name], arr(x.shape, dtype), args=[x], ulps=ULPS.get(name, 0))


@pytest.mark.parametrize("dtype", ["int32", "int8", "uint32", "int16", "uint8"])
@pytest.mark.parametrize("name", INT)
def test_integer_primitives_import(name, dtype):
    width = 8 * np.dtype(dtype).itemsize
    x = np.array([0, 1, 2, 3, 5, 7, 100, 127, -1, -2, -128, 64, 9, 17, 33, 6], np.int64)
    y = np.array([0, 1, width - 1, width, width + 3, -1, 2, 3, 4, 5, 1, 7, 0, 2, 8, 31], np.int64)
    x, y = (v.astype(dtype) for v in (x, y))
    check(INT[name], arr((16,), dtype), arr((16,), dtype), args=[x, y])


def test_the_primitives_are_the_new_ops():
    """Each jnp function imports as its own op, not a formula of others."""

    def f(x):
        even = lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN)
        return even, lax.round(x), jnp.expm1(x), jss.erfinv(x)

    fn = minipallas.interop.from_jaxpr(jax.make_jaxpr(f)(arr((4,))))
    names = [op.name for op in fn.body.ops]
    assert {"round_even", "round", "expm1", "erf_inv"} <= set(names)


def test_a_program_of_them_agrees_every_way():
    """The difftest harness: interpret, compile, to_jax and upstream, all bit for bit."""

    def program(x, n):
        smooth = jnp.sinh(x) + jnp.cosh(x) * jnp.tanh(jnp.arcsinh(x))
        rounded = jnp.round(jnp.expm1(x) * 3) + jnp.floor(jnp.log1p(jnp.abs(x)))
        bits = jnp.left_shift(n, 3) ^ lax.population_count(n) ^ jnp.right_shift(n, 40)
        return smooth + rounded + jnp.cbrt(x), bits

    x = np.linspace(-3, 3, 64, dtype=np.float32)
    n = np.arange(-32, 32, dtype=np.int32) * 977
    report = difftest.run(difftest.Case("elementwise", program, (x, n)))
    assert report.ok, report.difference


def test_emit_gives_upstream_the_same_primitives():
    src = """func @f(%x: f32[8], %n: i32[8]) -> (f32[8], i32[8]) {
  %a = round %x : f32[8]
  %b = erf_inv %a : f32[8]
  %c = atan2 %b, %x : f32[8]
  %m = shift_right_arithmetic %n, %n : i32[8]
  %k = clz %m : i32[8]
  return %c, %k
}"""
    fn = minipallas.parse(src)
    primitives = {e.primitive.name for e in stateful.trace(fn).eqns}
    assert {"round", "erf_inv", "atan2", "shift_right_arithmetic", "clz"} <= primitives
    x = np.array([0.3, -0.2, 0.5, -0.5, 0.9, 1.0, np.nan, -0.0], np.float32)
    n = np.array([-9, 3, 40, -1, 7, 0, 31, 32], np.int32)
    want = minipallas.interpret(fn, x, n)
    got = jax.jit(stateful.emit(fn))(x, n)
    for w, g in zip(want, got, strict=True):
        np.testing.assert_array_equal(np.asarray(g).view(np.uint32), w.view(np.uint32))
