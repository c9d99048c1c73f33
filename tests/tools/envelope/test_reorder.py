"""``interpret(..., perturb=OrderBound(op))``: one float sum or dot moved by its order bound,
``bound(n) * u * sum|x_i|``, and nothing else changed; ``sites`` finds those ops in callees."""

import ml_dtypes
import numpy as np
import pytest
from test_perturb import DOT, SUM  # the sum and the dot the perturbations are tested on

from minipallas import parse
from minipallas.ir.interpret import interpret
from minipallas.tools.envelope.reorder import UNIT_ROUNDOFF, OrderBound, bound, sites

F32, BF16 = np.float32, ml_dtypes.bfloat16


def test_bound_grows_as_the_root_of_the_terms_and_never_past_the_worst_case():
    assert bound(0) == 0 and bound(1) == 0  # one term: no addition, no order
    assert bound(2) == 2  # the worst case 2 * (n - 1) is the smaller
    assert bound(100) == 20 and bound(1024) == 64


def _expected(plain, magnitude, n):
    """``plain`` moved up by the bound, rounded once to float32."""
    return (plain.astype(np.float64) + bound(n) * UNIT_ROUNDOFF * magnitude).astype(F32)


def test_order_bound_moves_its_site_only_by_the_bound_of_its_terms():
    fn = parse(SUM)
    x = np.random.default_rng(0).standard_normal((4, 300)).astype(F32)
    rows, total = interpret(fn, x)
    first, second = sites(fn)
    moved_rows, same_total = interpret(fn, x, perturb=OrderBound(first))
    magnitude = np.abs(x.astype(np.float64)).sum(1)
    np.testing.assert_array_equal(moved_rows, _expected(rows, magnitude, 300))
    assert np.all(moved_rows > rows)
    assert same_total.view(np.int32) == total.view(np.int32)
    _, moved_total = interpret(fn, x, perturb=OrderBound(second))
    assert moved_total == _expected(total, np.abs(x.astype(np.float64)).sum(), 1200)


def test_order_bound_of_a_dot_is_from_the_products_magnitudes():
    fn = parse(DOT)
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((6, 40)).astype(F32), rng.standard_normal((40, 3)).astype(F32)
    (plain,) = interpret(fn, a, b)
    (moved,) = interpret(fn, a, b, perturb=OrderBound(sites(fn)[0]))
    magnitude = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    np.testing.assert_array_equal(moved, _expected(plain, magnitude, 40))


def test_a_bfloat16_sum_is_moved_and_rounded_once_and_non_finite_values_stay():
    fn = parse(
        "func @f(%0: bf16[3,64]) -> (bf16[3]) {\n"
        "  %1 = reduce_sum %0, axes (1) : bf16[3]\n"
        "  return %1\n"
        "}"
    )
    x = np.full((3, 64), 1.0, BF16)
    x[1, 0], x[2, :2] = np.inf, (np.inf, -np.inf)
    (plain,) = interpret(fn, x)
    (moved,) = interpret(fn, x, perturb=OrderBound(sites(fn)[0]))
    # 64 + 16 * 2**-24 * 64 is 64 in bfloat16: the bound is far below its ulp
    assert moved[0] == plain[0] == 64 and moved.dtype == BF16
    assert moved[1] == np.inf and np.isnan(moved[2]) and np.isnan(plain[2])


def test_sites_are_the_float_sums_and_dots_of_the_function_and_its_callees():
    fn = parse(
        """
        func @g(%0: f32[8]) -> (f32[]) {
          %1 = reduce_sum %0, axes (0) : f32[]
          return %1
        }
        func @f(%0: f32[8], %1: i32[8]) -> (f32[]) {
          %2 = reduce_sum %1, axes (0) : i32[]  // an integer sum: bit for bit, no site
          %3 = call @g(%0) : f32[]
          return %3
        }
        """
    )
    callee = fn.body.ops[1].attrs["callee"]
    (site,) = sites(fn)
    assert site in callee.body.ops
    x = np.arange(8, dtype=F32)
    (moved,) = interpret(fn, x, np.arange(8, dtype=np.int32), perturb=OrderBound(site))
    assert moved == _expected(np.float32(28), 28.0, 8)


@pytest.mark.parametrize("perturb", [0, "seed", object()])
def test_interpret_takes_a_rule_set_only(perturb):
    from minipallas.ir.errors import InterpretError

    with pytest.raises(InterpretError, match="perturb must be a RuleSet"):
        interpret(parse(DOT), np.zeros((6, 40), F32), np.zeros((40, 3), F32), perturb=perturb)
