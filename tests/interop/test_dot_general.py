"""``dot_general`` with any contracting and batch dimensions (``jnp.einsum`` programs) against
upstream: interpret, compile and to_jax bit for bit on exactly summable values, in every
operand dtype with ``preferred_element_type``; on random float32 values compile is bit for bit
with upstream's ``dot_general`` (XLA:CPU sums the transposed, reshaped form in the same
order; measured in ``bench/numerics/dot_general_bits.py``)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import minipallas as mp
from tests.interop.interop_helpers import arr, check

SPECS = {
    "bij,bjk->bik": ((2, 3, 4), (2, 4, 5)),
    "ij,kj->ik": ((3, 4), (5, 4)),
    "ji,jk->ik": ((4, 3), (4, 5)),
    "bi,bi->b": ((3, 7), (3, 7)),
    "ijk,kl->ijl": ((2, 3, 4), (4, 5)),
    "ibj,jbk->bik": ((3, 2, 4), (4, 2, 5)),
    "ijk,jkl->il": ((2, 3, 4), (3, 4, 5)),
    "abc,cba->b": ((2, 3, 4), (4, 3, 2)),
    "bhqd,bhkd->bhqk": ((2, 2, 3, 4), (2, 2, 5, 4)),
    "i,i->": ((7,), (7,)),
    "i,j->ij": ((3,), (4,)),
}


@pytest.mark.parametrize("spec", SPECS)
def test_einsum_matches_upstream_exactly(spec):
    """Small integers: every order of summation gives the same bits, so any difference is a
    wrong dimension, not rounding."""
    shapes = SPECS[spec]
    rng = np.random.default_rng(0)
    ints = [rng.integers(-3, 4, s) for s in shapes]

    def f(a, b):
        return (
            jnp.einsum(spec, a, b),
            jnp.einsum(spec, a.astype(jnp.bfloat16), b, preferred_element_type=jnp.float32),
            jnp.einsum(
                spec, a.astype(jnp.int8), b.astype(jnp.int8), preferred_element_type=jnp.int32
            ),
        )

    check(f, *[arr(s) for s in shapes], args=[x.astype(np.float32) for x in ints])


@pytest.mark.parametrize("spec", ["bij,bjk->bik", "ij,kj->ik", "ijk,jkl->il", "bhqd,bhkd->bhqk"])
def test_compile_sums_float32_in_upstreams_order(spec):
    shapes = [tuple(4 * d for d in s) for s in SPECS[spec]]
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(s).astype(np.float32) for s in shapes]

    def f(a, b):
        return jnp.einsum(spec, a, b)

    fn = mp.from_jaxpr(jax.make_jaxpr(f)(*args))
    got = mp.compile(fn)(*args)[0]
    np.testing.assert_array_equal(
        got.view(np.uint32), np.asarray(jax.jit(f)(*args)).view(np.uint32)
    )


def test_mixed_operand_dtypes_convert_to_the_result_dtype():
    def f(a, b):
        return jax.lax.dot_general(
            a, b, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32
        )

    x = np.arange(12, dtype=np.int16).reshape(3, 4)
    # quarters: every product and partial sum is exact, so the bits do not depend on whether
    # XLA:CPU fuses them (it does on some CPUs, e.g. an AMD EPYC, not on others)
    y = ((np.arange(20, dtype=np.float32) - 10) / 4).reshape(4, 5)
    check(f, arr((3, 4), "int16"), arr((4, 5)), args=[x, y])


def test_the_import_is_one_dot_between_transposes_and_reshapes():
    def f(a, b):
        return jnp.einsum("ibj,jbk->bik", a, b)

    fn = mp.from_jaxpr(
        jax.make_jaxpr(f)(np.ones((3, 2, 4), np.float32), np.ones((4, 2, 5), np.float32))
    )
    names = [op.name for op in fn.body.ops]
    assert names.count("dot") == 1
    (dot,) = [op for op in fn.body.ops if op.name == "dot"]
    assert [o.type.shape for o in dot.operands] == [(2, 3, 4), (2, 4, 5)]


def test_outer_products_keep_negative_zero_products():
    """No contracting dims: a product, not a sum of one (``0 * -3`` stays ``-0.0``)."""

    def f(a, b, c):
        return jnp.einsum("i,j->ij", a, b), jax.lax.dot_general(b, c, (((), ()), ((0,), (1,))))

    x, y = np.float32([0.0, 1.0, -2.0]), np.float32([-3.0, 0.0, 2.0, -0.0])
    z = np.arange(8, dtype=np.float32).reshape(2, 4) - 4
    check(f, arr((3,)), arr((4,)), arr((2, 4)), args=[x, y, z])


def _pallas_dot(trans_b, out_dtype):
    """Upstream's ``test_dot`` form: ``pl.dot`` (float32 out) of two float16 blocks, cast."""
    from jax.experimental import pallas as pl

    def kernel(x_ref, y_ref, o_ref):
        o_ref[:, :] = pl.dot(x_ref[:, :], y_ref[:, :], False, trans_b).astype(o_ref.dtype)

    def make(shape, interpret):
        return pl.pallas_call(kernel, jax.ShapeDtypeStruct(shape, out_dtype), interpret=interpret)

    return make


@pytest.mark.parametrize("size", [16, 32])
def test_a_float16_dot_is_a_float32_dot_rounded_once_in_xlas_order(size):
    """XLA:CPU computes a float16 dot as the float32 dot of the widened operands, rounded once,
    and so does the interpreter: the results differ only where the two float32 sums do, which
    is XLA's order (with a transposed right operand on this CPU: 2 or 4 interleaved partial
    sums; numpy's one FMA chain), by one float16 ulp. Compile runs XLA's order: bit for bit.
    The difftest envelope (its sum-order bound) admits upstream's value."""
    from minipallas.tools.envelope.measure import envelope, ulp_distance

    rng = np.random.default_rng(size)
    x = rng.standard_normal((size, 2 * size)).astype(np.float16)
    y = rng.standard_normal((size, 2 * size)).astype(np.float16)
    halves, singles = _pallas_dot(True, jnp.float16), _pallas_dot(True, jnp.float32)
    shape = (size, size)
    want = np.asarray(jax.jit(halves(shape, True))(x, y))
    want32 = np.asarray(jax.jit(singles(shape, True))(x, y))
    np.testing.assert_array_equal(want.view(np.uint16), want32.astype(np.float16).view(np.uint16))

    fn = mp.from_jaxpr(jax.make_jaxpr(halves(shape, False))(x, y))
    fn32 = mp.from_jaxpr(jax.make_jaxpr(singles(shape, False))(x, y))
    np.testing.assert_array_equal(mp.compile(fn)(x, y)[0].view(np.uint16), want.view(np.uint16))
    got, got32 = mp.interpret(fn, x, y)[0], mp.interpret(fn32, x, y)[0]
    np.testing.assert_array_equal(got.view(np.uint16), got32.astype(np.float16).view(np.uint16))

    ulps = ulp_distance(want, got)
    assert ulps.max() <= 1
    assert not (ulps.astype(bool) & (got32 == want32)).any()  # only where the f32 order differs
    assert envelope(fn, [x, y], [got]).judge(0, got, want).within
