"""The envelope holds on every CPU: the two correct kernels issue 27 saw called bugs on an AMD
EPYC (a tiled matmul with an f32 scratch accumulator over a K grid axis, and a row layer norm
with gain and bias in 16-row blocks) are judged on what other CPUs' XLA computes, modeled in
numpy (``legal_orders``: sequential with and without FMA, AVX2's 8 lanes, AVX-512's 16,
128-term tiles, pairwise), and every modeled order lies within the envelope, while planted
bugs on the same values do not. The samples alone (the envelope before the order bound) reject
some legal order: the tests would fail without it.
"""

import jax
import numpy as np
import pytest
from legal_orders import ORDERS, dot, total

import minipallas
from minipallas.tools.corpora.float_corpus import BK, EPS, k_matmul, row_layer_norm
from minipallas.tools.difftest.harness import abstract
from minipallas.tools.difftest.outputs import interpret_outputs
from minipallas.tools.envelope.measure import SAFETY, distance, envelope

F32 = np.float32


def _judged(fn, shapes, seed):
    """(inputs, the interpreter's result, the envelope of the import around it)."""
    rng = np.random.default_rng(seed)
    args = tuple(rng.standard_normal(s, dtype=F32) for s in shapes)
    program = minipallas.from_jaxpr(jax.make_jaxpr(fn)(*abstract(args)))
    base = interpret_outputs(program, args)
    return args, base[0], envelope(program, args, base)


def _matmul_in(x, y, order):
    """What the kernel computes with each K block's dot in ``order``: ``acc += dot``."""
    acc = np.zeros((x.shape[0], y.shape[1]), F32)
    for k in range(0, x.shape[1], BK):
        acc = acc + dot(x[:, k : k + BK], y[k : k + BK], order)
    return acc


def _layer_norm_in(x, g, b, order, fused, eps=EPS):
    """The kernel's layer norm with its sums in ``order`` and ``y * g + b`` one FMA or not."""
    n = F32(x.shape[1])
    centred = x - total(x, order)[:, None] / n
    var = ORDERS[order](centred, centred)[:, None] / n  # XLA fuses the square into the sum
    y = centred * (1 / np.sqrt((var + F32(eps)).astype(np.float64))).astype(F32)
    if fused:
        return (y.astype(np.float64) * g + b).astype(F32)
    return y * g + b


def _old_rule(env, want, got):
    """The distance under the samples alone, as the envelope judged before the order bound."""
    return distance(want, got, SAFETY * env.spreads[0] + env.floor)


@pytest.fixture(scope="module")
def matmul():
    args, base, env = _judged(k_matmul, ((64, 512), (512, 64)), 0)
    return args, base, env


@pytest.fixture(scope="module")
def layer_norm():
    args, base, env = _judged(row_layer_norm, ((128, 256), (1, 256), (1, 256)), 0)
    return args, base, env


def test_every_legal_order_of_the_k_matmul_is_within_the_envelope(matmul):
    (x, y), base, env = matmul
    old = []
    for order in ORDERS:
        got = _matmul_in(x, y, order)
        d = env.judge(0, base, got)
        assert d.within, (order, d)
        old.append(_old_rule(env, base, got).fraction)
    assert max(old) > 1, old  # the samples alone call some legal order a bug


def test_a_scaled_k_matmul_is_still_out_of_the_envelope(matmul):
    (x, y), base, env = matmul
    got = _matmul_in(x, y, "avx2_8_lanes") * F32(1 + 2.0**-17)
    assert env.judge(0, base, got).fraction > 2


def test_every_legal_order_of_the_row_layer_norm_is_within_the_envelope(layer_norm):
    (x, g, b), base, env = layer_norm
    for order in ORDERS:
        for fused in (False, True):
            d = env.judge(0, base, _layer_norm_in(x, g, b, order, fused))
            assert d.within, (order, fused, d)


@pytest.mark.parametrize("plant", ["scale", "eps"])
def test_a_planted_row_layer_norm_is_still_out_of_the_envelope(layer_norm, plant):
    (x, g, b), base, env = layer_norm
    if plant == "scale":
        got = _layer_norm_in(x, g, b, "avx2_8_lanes", True) * F32(1 + 2.0**-17)
    else:
        got = _layer_norm_in(x, g, b, "avx2_8_lanes", True, eps=1e-6)
    assert env.judge(0, base, got).fraction > 2
