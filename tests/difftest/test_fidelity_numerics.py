"""Issue 39's two CPU numerics gaps: a bfloat16 ``dot_general`` into float32 and upstream's flash
attention, bit for bit between upstream's interpret mode and every minipallas way.

XLA:CPU runs such a dot in YNNPACK's bfloat16 kernel (``ir/interpret/xla/dot_order.py``) unless
its form makes XLA convert the operands to float32 first; minipallas's interpreter summed it
as float32 (numpy's order) and its lowering handed XLA a transposed operand, which XLA
converts. Before the fix, with these inputs: the ``ik,jk`` dot differed in 3270 of 16384
elements in every way; flash attention in 2 (interpret, discharge) and 1 (compile) of 65536.

The model was measured on an AMD EPYC with AVX-512/AVX512-BF16 (and by a probe on one with
AVX2); a CPU with AMX may run another bfloat16 kernel, so these bit-for-bit checks skip there.
"""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas.ops.tpu import flash_attention as fa

import minipallas as mp
from minipallas.ir.interpret.xla import dot_order
from minipallas.platforms.mesh_tpu import evaluate_kernels
from minipallas.tools.difftest import Case, run
from minipallas.tools.envelope.machine import here

pytestmark = pytest.mark.skipif(
    "amx_tile" in here().flags, reason="YNNPACK's bfloat16 kernel is unmeasured on AMX CPUs"
)

BF16 = ml_dtypes.bfloat16
F32 = jnp.float32
NT = (((1,), (1,)), ((), ()))


def normal(seed, *shapes):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(s).astype(BF16) for s in shapes)


def in_kernel(product, a, b):
    """``product`` of two whole blocks in a ``pallas_call`` run by upstream's interpret mode."""

    def kernel(a_ref, b_ref, o_ref):
        o_ref[...] = product(a_ref[...], b_ref[...])

    out = jax.eval_shape(product, a, b)
    return pl.pallas_call(kernel, out_shape=out, interpret=True)(a, b)


def assert_bit_equal(report):
    """Every minipallas way gives upstream's bits (no envelope consulted)."""
    want = report.outcomes["upstream"].outputs
    for way in ("interpret", "discharge", "compile"):
        got = report.outcomes[way].outputs
        for w, g in zip(want, got, strict=True):
            assert g.dtype == w.dtype and g.tobytes() == w.tobytes(), way
    assert report.finding.kind == "agree", report.finding


def test_the_issues_bf16_dot_contracting_both_last_dims():
    """128x256 by 128x256, contracting dim 1 of both, into float32."""

    def product(a, b):
        return lax.dot_general(a, b, NT, preferred_element_type=F32)

    a, b = normal(0, (128, 256), (128, 256))
    assert_bit_equal(run(Case("bf16_nt_dot", lambda a, b: in_kernel(product, a, b), (a, b))))


def einsum(spec):
    return lambda a, b: jnp.einsum(spec, a, b, preferred_element_type=F32)


# The forms around it. XLA:CPU runs the first three in bfloat16 and converts the last two to
# float32 (the transpose's result, the left side contracting its first dim), whose dot sums
# in numpy's order at these widths (a multiple of 64; at others XLA's float32 order is within
# the envelope, not bit for bit).
FORMS = {
    "ik,kj": (einsum("ik,kj->ij"), (64, 256), (256, 96)),
    "bqd,bkd": (einsum("bqd,bkd->bqk"), (2, 64, 128), (2, 48, 128)),
    "kbi,bkj": (einsum("kbi,bkj->bij"), (128, 2, 32), (2, 128, 48)),
    "ik,(jk).T": (lambda a, b: einsum("ik,kj->ij")(a, b.T), (64, 256), (128, 256)),
    "ki,kj": (einsum("ki,kj->ij"), (256, 64), (256, 128)),
}


@pytest.mark.parametrize("form", FORMS)
def test_bf16_dot_forms_in_a_kernel(form):
    product, *shapes = FORMS[form]
    a, b = normal(1, *shapes)
    assert_bit_equal(run(Case(form, lambda a, b: in_kernel(product, a, b), (a, b))))


def test_a_form_xla_fails_to_run_compiles_as_the_interpreter_computes_it():
    """``bki,kbj``: XLA:CPU (jaxlib 0.10.2) converts nothing and has no bfloat16 kernel for
    it ("Unsupported element type for DotThunk"); minipallas converts it to float32, as XLA
    converts ``bki,bkj``, and its ways agree."""

    a, b = normal(2, (2, 128, 32), (128, 2, 48))
    fn = mp.from_jaxpr(jax.make_jaxpr(einsum("bki,kbj->bij"))(a, b))
    (got,), (want,) = mp.compile(fn)(a, b), mp.interpret(fn, a, b)
    assert np.asarray(got).tobytes() == np.asarray(want).tobytes()


def test_a_transposed_left_side_stays_unfolded_next_to_a_batch_moving_right_side():
    """Folding both transposes would hand XLA that same failing form (``bki,kbj``); the
    lowering keeps them, and XLA converts the dot to float32 and runs it: the product to
    float32's rounding (not the interpreter's bits, whose bfloat16 sum cannot see that the
    left side is a transpose)."""
    fn = mp.parse(
        """
        func @f(%0: bf16[2,128,32], %1: bf16[128,2,48]) -> (f32[2,32,48]) {
          %2 = transpose %0, permutation (0, 2, 1) : bf16[2,32,128]
          %3 = transpose %1, permutation (1, 0, 2) : bf16[2,128,48]
          %4 = dot %2, %3 : f32[2,32,48]
          return %4
        }
        """
    )
    a, b = normal(4, (2, 128, 32), (128, 2, 48))
    (got,) = mp.compile(fn)(a, b)
    want = np.einsum("bki,kbj->bij", a.astype(np.float32), b.astype(np.float32))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


# upstream's ``ik,kj`` bfloat16 dot into float32, for XLA:CPU to compile
XLA_DOT = jax.jit(
    lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ())), preferred_element_type=F32)
)


@pytest.mark.parametrize(
    "m, k, n, scale",
    [
        (32, 255, 40, 1.0),  # an odd depth: the last element has no pair
        (16, 8192, 64, 1.0),  # blocks of the contracted axis, wide right side
        (16, 8192, 8, 1.0),  # narrow right side: longer blocks
        (64, 64, 64, 1e-19),  # products near float32's smallest normal: one rounding each
        (64, 64, 64, 1e19),  # products past float32's largest: no overflow in the fused add
    ],
)
def test_the_model_sums_as_xla_does(m, k, n, scale):
    rng = np.random.default_rng(3)
    a, b = ((rng.standard_normal(s) * scale).astype(BF16) for s in ((m, k), (k, n)))
    got = dot_order.pairwise_dot(a.astype(np.float32), b.astype(np.float32))
    assert got.tobytes() == np.asarray(XLA_DOT(a, b)).tobytes()


@pytest.mark.parametrize("m, k, n", [(4, 4, 8), (2, 8, 4), (3, 8, 3), (2, 256, 2), (1, 64, 64)])
def test_which_shapes_xla_runs_in_bfloat16(m, k, n):
    """``native`` against XLA's compiled program: a float32 conversion where it says no."""
    text = XLA_DOT.lower(np.zeros((m, k), BF16), np.zeros((k, n), BF16)).compile().as_text()
    assert dot_order.native(m, k, n) == ("convert" not in text)


def test_the_issues_flash_attention_causal_with_segment_ids():
    """The issue's block sizes, causal, two segment boundaries; one head of 512 (the issue
    has four, where 1 of 262,144 outputs still differs in the interpreter: a row sum, whose
    order XLA:CPU's YNNPACK picks, not a dot; see docs/numerics.md)."""
    sizes = fa.BlockSizes(
        block_q=128, block_k_major=256, block_k=128, block_b=1,
        block_q_major_dkv=128, block_k_major_dkv=128, block_k_dkv=128, block_q_dkv=128,
        block_k_major_dq=128, block_k_dq=128, block_q_dq=128,
    )  # fmt: skip
    q, k, v = normal(0, *[(1, 1, 512, 128)] * 3)
    segments = (np.arange(512) * 3 // 512).astype(np.int32)[None]

    def attention(q, k, v, q_segments, kv_segments):
        ids = fa.SegmentIds(q=q_segments, kv=kv_segments)
        return fa.flash_attention(q, k, v, segment_ids=ids, causal=True, block_sizes=sizes)

    args = (q, k, v, segments, segments)
    closed = jax.make_jaxpr(attention)(*args)

    def interpret_mode(eqn, ins):
        return eqn.primitive.bind(*ins, **{**eqn.params, "interpret": True})

    def fn(*xs):
        return evaluate_kernels(closed.jaxpr, closed.consts, xs, {"pallas_call": interpret_mode})

    assert_bit_equal(run(Case("flash_attention", fn, args)))
