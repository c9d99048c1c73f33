"""``interpret(..., perturb=Perturbation(seed))``: the float freedoms of a correct compiler,
drawn at random but reproducibly, and nothing else changed."""

import ml_dtypes
import numpy as np
import pytest

from minipallas import parse
from minipallas.ir.errors import InterpretError
from minipallas.ir.interpret import interpret
from minipallas.ir.interpret.xla.transcendental import ULP_BOUND
from minipallas.tools.envelope.perturb import Perturbation, ordered, perturbable

F32, BF16 = np.float32, ml_dtypes.bfloat16
SEEDS = range(8)

SUM = """
func @f(%0: f32[4,300]) -> (f32[4], f32[]) {
  %1 = reduce_sum %0, axes (1) : f32[4]
  %2 = reduce_sum %0, axes (0, 1) : f32[]
  return %1, %2
}
"""

DOT = """
func @f(%0: f32[6,40], %1: f32[40,3]) -> (f32[6,3]) {
  %2 = dot %0, %1 : f32[6,3]
  return %2
}
"""


def ulps(a, b):
    return np.abs(ordered(np.asarray(a)) - ordered(np.asarray(b)))


def _wide(rng, *shape):
    """float32 values over many binades, so that the order of a sum shows in its bits."""
    return (rng.standard_normal(shape) * np.exp2(rng.integers(-10, 10, shape))).astype(F32)


def test_perturbation_is_deterministic_per_seed_and_varies_across_seeds():
    fn = parse(SUM)
    x = _wide(np.random.default_rng(0), 4, 300)
    runs = [interpret(fn, x, perturb=Perturbation(s)) for s in SEEDS]
    again = [interpret(fn, x, perturb=Perturbation(s)) for s in SEEDS]
    for a, b in zip(runs, again, strict=True):
        assert all(
            np.array_equal(p.view(np.int32), q.view(np.int32)) for p, q in zip(a, b, strict=True)
        )
    totals = {r[1].view(np.int32).item() for r in runs}
    assert len(totals) > 1  # orders differ in the last bits
    plain = interpret(fn, x)[1]
    assert all(ulps(r[1], plain) < 2**12 for r in runs)  # and only in the last bits


def test_perturb_none_is_the_plain_interpreter():
    fn = parse(SUM)
    x = _wide(np.random.default_rng(1), 4, 300)
    a, b = interpret(fn, x), interpret(fn, x, perturb=None)
    assert all(np.array_equal(p, q) for p, q in zip(a, b, strict=True))


def test_bad_perturb_and_seed_are_errors():
    fn = parse(SUM)
    with pytest.raises(InterpretError, match="perturb must be a RuleSet"):
        interpret(fn, np.zeros((4, 300), F32), perturb=3)
    with pytest.raises(InterpretError, match="non-negative int"):
        Perturbation(-1)


def test_ints_data_movement_comparisons_select_convert_stay_bit_for_bit():
    fn = parse("""
func @f(%0: f32[3,3], %1: i32[3,3]) -> (i32[3,3], f32[5], bool[3,3], f32[3,3], i32[]) {
  %2 = constant 1.0 : f32[]
  %3 = broadcast_in_dim %2, dims () : f32[3,3]
  %4 = lt %0, %3 : bool[3,3]
  %5 = transpose %0, permutation (1, 0) : f32[3,3]
  %6 = max %0, %3 : f32[3,3]
  %7 = select %4, %5, %6 : f32[3,3]
  %8 = convert %7 : i32[3,3]
  %9 = mul %8, %1 : i32[3,3]
  %10 = add %9, %1 : i32[3,3]
  %11 = reshape %0 : f32[9]
  %12 = slice %11[0:9:2] : f32[5]
  %13 = reduce_sum %10, axes (0, 1) : i32[]
  return %10, %12, %4, %7, %13
}
""")
    rng = np.random.default_rng(2)
    x, i = _wide(rng, 3, 3), rng.integers(-9, 9, (3, 3)).astype(np.int32)
    assert not perturbable(fn)
    plain = interpret(fn, x, i)
    for s in SEEDS:
        got = interpret(fn, x, i, perturb=Perturbation(s))
        for p, q in zip(plain, got, strict=True):
            assert p.dtype == q.dtype and p.tobytes() == q.tobytes()


def test_permuted_sums_and_dots_of_integer_valued_floats_are_exact():
    rng = np.random.default_rng(3)
    x = rng.integers(-1000, 1000, (4, 300)).astype(F32)
    a, b = rng.integers(-30, 30, (6, 40)).astype(F32), rng.integers(-30, 30, (40, 3)).astype(F32)
    exact_rows, exact_total = x.astype(np.int64).sum(1), x.astype(np.int64).sum()
    exact_dot = a.astype(np.int64) @ b.astype(np.int64)
    for s in SEEDS:
        rows, total = interpret(parse(SUM), x, perturb=Perturbation(s))
        assert np.array_equal(rows, exact_rows.astype(F32)) and total == F32(exact_total)
        (product,) = interpret(parse(DOT), a, b, perturb=Perturbation(s))
        assert np.array_equal(product, exact_dot.astype(F32))


def test_perturbed_sums_and_dots_stay_near_float64():
    rng = np.random.default_rng(4)
    a, b = _wide(rng, 6, 40), _wide(rng, 40, 3)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    for s in SEEDS:
        (got,) = interpret(parse(DOT), a, b, perturb=Perturbation(s))
        assert np.all(np.abs(got - exact) <= 40 * 2**-24 * scale)  # n eps sum |a||b|


def _mantissa_bits(rng, n, bits):
    """float32 values with ``bits`` significant bits: products of two are exact in float64."""
    m = rng.integers(2 ** (bits - 1), 2**bits, n) * rng.choice([-1, 1], n)
    return np.ldexp(m.astype(np.float64), rng.integers(-bits - 2, -bits + 3, n)).astype(F32)


def test_fma_contraction_is_a_float64_fma_for_a_random_half():
    fn = parse("""
func @f(%0: f32[2000], %1: f32[2000], %2: f32[2000]) -> (f32[2000], f32[2000]) {
  %3 = mul %0, %1 : f32[2000]
  %4 = add %3, %2 : f32[2000]
  %5 = sub %2, %3 : f32[2000]
  return %4, %5
}
""")
    rng = np.random.default_rng(5)
    a, b, c = (_mantissa_bits(rng, 2000, 20) for _ in range(3))
    a64, b64, c64 = (v.astype(np.float64) for v in (a, b, c))
    # 20-bit significands: a*b is exact in float64 and so is a*b +- c (no double rounding)
    fused_add, fused_sub = (a64 * b64 + c64).astype(F32), (c64 - a64 * b64).astype(F32)
    plain_add, plain_sub = interpret(fn, a, b, c)
    assert np.array_equal(plain_add, a * b + c) and np.array_equal(plain_sub, c - a * b)
    assert perturbable(fn)
    for s in SEEDS:
        add, sub = interpret(fn, a, b, c, perturb=Perturbation(s))
        for got, fused, plain in ((add, fused_add, plain_add), (sub, fused_sub, plain_sub)):
            is_fused, is_plain = got == fused, got == plain
            assert np.all(is_fused | is_plain)
            differ = fused != plain
            share = np.count_nonzero(is_fused & differ) / np.count_nonzero(differ)
            assert 0.4 < share < 0.6


@pytest.mark.parametrize("name", sorted(ULP_BOUND))
def test_transcendental_offsets_stay_within_their_bound(name):
    fn = parse(f"""
func @f(%0: f32[4000]) -> (f32[4000]) {{
  %1 = {name} %0 : f32[4000]
  return %1
}}
""")
    rng = np.random.default_rng(6)
    x = np.concatenate([rng.uniform(0.01, 20, 3996), [np.nan, np.inf, 0.0, -1.0]]).astype(F32)
    (plain,) = interpret(fn, x)
    seen = np.zeros(4000, np.int64)
    for s in SEEDS:
        (got,) = interpret(fn, x, perturb=Perturbation(s))
        special = ~np.isfinite(plain)
        assert np.array_equal(got[special].view(np.int32), plain[special].view(np.int32))
        distance = ulps(got[~special], plain[~special])
        assert distance.max() <= ULP_BOUND[name]
        seen[~special] = np.maximum(seen[~special], distance)
    assert seen.max() == ULP_BOUND[name]


def test_bf16_arithmetic_rounds_to_a_neighbour_at_random():
    fn = parse("""
func @f(%0: bf16[3000], %1: bf16[3000]) -> (bf16[3000]) {
  %2 = div %0, %1 : bf16[3000]
  return %2
}
""")
    rng = np.random.default_rng(7)
    x, y = (rng.uniform(0.5, 4, 3000).astype(BF16) for _ in range(2))
    exact = x.astype(np.float64) / y.astype(np.float64)
    (plain,) = interpret(fn, x, y)
    moved = 0
    for s in SEEDS:
        (got,) = interpret(fn, x, y, perturb=Perturbation(s))
        distance = ulps(got, plain)
        assert distance.max() <= 1
        # the other neighbour lies on the exact value's other side
        other = distance == 1
        assert np.all(
            np.sign(got[other].astype(np.float64) - exact[other])
            != np.sign(plain[other].astype(np.float64) - exact[other])
        )
        moved += np.count_nonzero(other)
    assert 0.4 < moved / (3000 * len(SEEDS)) < 0.6


DIV = """
func @f(%0: f32[2000], %1: f32[2000]) -> (f32[2000], f32[2000]) {{
  %2 = constant {c} : f32[]
  %3 = broadcast_in_dim %2, dims () : f32[2000]
  %4 = div %0, %3 : f32[2000]
  %5 = sub %4, %1 : f32[2000]
  return %4, %5
}}
"""


def test_division_by_a_constant_is_the_reciprocal_product_for_a_random_half():
    """XLA computes ``x / 3.0`` as ``x * (1 / 3.0)``; that product may then fuse into an FMA
    with the ``sub`` it feeds."""
    fn = parse(DIV.format(c="3.0"))
    rng = np.random.default_rng(8)
    x, o = rng.standard_normal(2000).astype(F32), rng.standard_normal(2000).astype(F32)
    r = F32(1) / F32(3)
    quotient, product = x / F32(3), x * r
    plain_q, plain_s = interpret(fn, x, o)
    assert np.array_equal(plain_q, quotient) and np.array_equal(plain_s, quotient - o)
    assert perturbable(fn)
    differ = quotient != product
    assert 0.2 < np.mean(differ) < 0.5  # the reciprocal moves a third of the quotients
    fused = (x.astype(np.float64) * np.float64(r) - o).astype(F32)  # exact product, one rounding
    for s in SEEDS:
        q, d = interpret(fn, x, o, perturb=Perturbation(s))
        is_product = q == product
        assert np.all(is_product | (q == quotient))
        assert 0.4 < np.count_nonzero(is_product & differ) / np.count_nonzero(differ) < 0.6
        assert np.all((d == q - o) | (d == fused))  # the sub, plain or fused with x * (1/3)
        assert np.any((d == fused) & (d != q - o))


def test_division_by_a_power_of_two_or_a_parameter_stays_bit_for_bit():
    assert not perturbable(
        parse(DIV.replace("%5 = sub %4, %1", "%5 = max %4, %1").format(c="0.25"))
    )
    by_param = parse("""
func @f(%0: f32[8], %1: f32[8]) -> (f32[8]) {
  %2 = div %0, %1 : f32[8]
  return %2
}
""")
    assert not perturbable(by_param)
    x = np.linspace(-3, 5, 8, dtype=F32)
    y = np.full(8, 3, F32)
    for s in SEEDS:
        (q,) = interpret(by_param, x, y, perturb=Perturbation(s))
        assert np.array_equal(q.view(np.int32), (x / y).view(np.int32))
