"""int16, uint8 and uint16: every way (interpret, compile, to_jax) bit for bit against upstream
on edge values (wrap-around, division by zero, INT_MIN / -1, float -> int saturation and NaN),
text-IR literals round trip, and the front end promotes as jnp does."""

import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import minipallas as mp
from minipallas.frontend.promotion import promote
from minipallas.ir import dtypes
from minipallas.ir.conversions import to_dtype
from tests.interop.interop_helpers import arr, check

NEW = ("int16", "uint8", "uint16")
INTS = ("int8", "int16", "int32", "uint8", "uint16", "uint32")


def edges(dtype: str, n: int = 40) -> np.ndarray:
    info = np.iinfo(dtype)
    rng = np.random.default_rng(0)
    fixed = [info.min, info.min + 1, info.max, info.max - 1, 0, 1, 2] + [-1] * (info.min < 0)
    drawn = rng.integers(info.min, info.max, n, endpoint=True, dtype=np.int64)
    return np.concatenate([fixed, drawn]).astype(dtype)


def arithmetic(a, b):
    return (
        a + b,
        a - b,
        a * b,
        lax.div(a, b),
        lax.rem(a, b),
        jnp.maximum(a, b),
        jnp.minimum(a, b),
        a & b,
        a | b,
        a ^ b,
        ~a,
        -a,
        jnp.abs(a),
        jnp.sign(a),
        a**3,
        a < b,
        a >= b,
        a == b,
        jnp.where(a > b, a, b),
        jnp.clip(a, 3, 100),
        jnp.max(a),
    )


@pytest.mark.parametrize("dtype", NEW)
def test_arithmetic_and_comparisons_match_upstream(dtype):
    x = edges(dtype)
    y = np.concatenate([x[::-1][:-1], [0]]).astype(dtype)  # a zero divisor and the -1 pairs
    n = x.size
    check(arithmetic, arr((n,), dtype), arr((n,), dtype), args=[x, y])


@pytest.mark.parametrize("dtype", NEW)
def test_conversions_from_every_dtype_match_upstream(dtype):
    floats = np.float32(
        [np.nan, -np.nan, np.inf, -np.inf, 1e10, -1e10, 65535.5, 65536.0, 255.9, 256.0]
        + [-0.5, -1.5, 32767.9, -32768.9, 127.5, -0.0, 1.5]
    )
    for source in dtypes.NAMES:
        if dtypes.is_float(source):
            x = to_dtype(floats, source)  # 65536 is inf in float16
        elif source == "bool":
            x = np.array([True, False])
        else:
            x = edges(source)
        check(lambda v: lax.convert_element_type(v, dtype), arr(x.shape, source), args=[x])


@pytest.mark.parametrize("dtype", NEW)
def test_conversions_to_every_dtype_match_upstream(dtype):
    x = edges(dtype)
    targets = [d for d in dtypes.NAMES if d != dtype]

    def f(v):
        return tuple(lax.convert_element_type(v, t) for t in targets)

    check(f, arr(x.shape, dtype), args=[x])


def test_bitcasts_between_equal_widths_match_upstream():
    x = edges("int16")
    check(
        lambda v: (
            lax.bitcast_convert_type(v, jnp.uint16),
            lax.bitcast_convert_type(v, jnp.float16),
            lax.bitcast_convert_type(lax.convert_element_type(v, jnp.int8), jnp.uint8),
        ),
        arr(x.shape, "int16"),
        args=[x],
    )


@pytest.mark.parametrize("dtype", NEW)
def test_literals_round_trip_through_text(dtype):
    short = dtypes.SHORT[dtype]
    values = edges(dtype, 4)
    items = ", ".join(str(int(v)) for v in values)
    text = (
        f"func @f() -> ({short}[{values.size}], {short}[]) {{\n"
        f"  %0 = constant [{items}] : {short}[{values.size}]\n"
        f"  %1 = constant {int(values[2])} : {short}[]\n"
        f"  return %0, %1\n}}"
    )
    fn = mp.parse(text)
    assert str(mp.parse(str(fn))) == str(fn)
    got, scalar = mp.interpret(fn)
    assert got.dtype == dtypes.to_numpy(dtype)
    np.testing.assert_array_equal(got, values)
    assert scalar == values[2]


def test_a_literal_out_of_range_is_a_parse_error():
    with pytest.raises(mp.ParseError, match="256 does not fit in u8"):
        mp.parse("func @f() -> (u8[]) {\n  %0 = constant 256 : u8[]\n  return %0\n}")


def test_front_end_promotion_is_jnps():
    for a in INTS:
        for b in INTS:
            assert promote(a, b) == np.dtype(jnp.promote_types(a, b)).name, (a, b)


def test_front_end_sums_narrow_ints_as_jnp_does():
    def f(x_ref, out_ref):
        out_ref[...] = mp.numpy.sum(x_ref[...]).astype(out_ref.dtype)

    for dtype, wide in (("int16", "int32"), ("uint8", "uint32"), ("uint16", "uint32")):
        fn = mp.trace(f, mp.RefType((4,), dtype), mp.RefType((), wide))
        x = np.array([np.iinfo(dtype).max] * 4, dtype)
        out = np.zeros((), wide)
        mp.interpret(fn, x, out)
        assert out == np.asarray(jnp.sum(x)) == 4 * int(np.iinfo(dtype).max)
