"""Why ``bf16_matmul`` under ``jax.jit`` once differed from the eager call, and that it no
longer does.

A bfloat16 dot with a float32 result (``preferred_element_type``): the StableHLO lowering
(``minipallas.compile``, the eager call) gives XLA the bf16 operands as they are, as upstream
emits ``jnp.dot(..., preferred_element_type=f32)``; ``to_jax`` (what ``jax.jit`` of the call
runs) converted them to float32 first. Every product of two bf16 values is exact in float32,
so both dots compute the same products, but XLA:CPU sums an f32 x f32 dot in another order
than a bf16 x bf16 -> f32 one: the bits differed (8% of the elements, at most 4e-6, equally
far from the exact sums) though neither is less precise. ``to_jax`` now keeps bf16/f16
operands of an f32 dot as they are.
"""

import jax
import jax.numpy as jnp
import numpy as np
from kernel_helpers import assert_same_bits

from minipallas.tools.corpora.suite import BY_NAME


def test_bf16_matmul_under_jit_equals_the_eager_call_and_upstream_bit_for_bit():
    case = BY_NAME["bf16_matmul"]
    call, args = case.minipallas(), case.inputs()
    got = jax.jit(call)(*args)
    assert_same_bits(got, call(*args))
    assert_same_bits(got, case.upstream()(*args))


def test_the_jitted_dot_takes_the_bf16_operands_as_they_are():
    case = BY_NAME["bf16_matmul"]
    call, args = case.minipallas(), case.inputs()
    text = jax.jit(call).trace(*args).lower(lowering_platforms=("cpu",)).as_text()
    (dot,) = [line for line in text.splitlines() if "stablehlo.dot_general" in line]
    assert "(tensor<64x64xbf16>, tensor<64x128xbf16>) -> tensor<64x128xf32>" in dot


def test_converting_first_changes_only_the_order_of_the_sum():
    """The explanation, pinned: the products are exact either way, the converted dot's bits
    differ from the eager call's, and both are as close to the exact (float64) sums."""
    case = BY_NAME["bf16_matmul"]
    call, (x, y) = case.minipallas(), case.inputs()
    x32, y32 = x.astype(np.float32), y.astype(np.float32)
    products = x32[:, :, None] * y32[None, :, :]
    exact_products = x32.astype(np.float64)[:, :, None] * y32.astype(np.float64)[None, :, :]
    np.testing.assert_array_equal(products, exact_products)
    converted = np.asarray(jax.jit(lambda a, b: jnp.dot(a, b))(x32, y32))
    eager = call(x, y)
    assert 0 < np.mean(converted != eager) < 0.5
    exact = x32.astype(np.float64) @ y32.astype(np.float64)
    bound = 64 * np.finfo(np.float32).eps * np.abs(exact_products).sum(axis=1)
    assert np.all(np.abs(eager - exact) <= bound) and np.all(np.abs(converted - exact) <= bound)
