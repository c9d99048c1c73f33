"""The fuzzers draw the parameters upstream's ops and block specs take (issue 46): the
generator draws each (``generate.kernel_params``), both fuzzers run them, count them per value
(``difftest.coverage``) and judge them, and the chip model knows what HIGHEST and an approximate
reciprocal compute there."""

from __future__ import annotations

import dataclasses
import io
import os
import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl

from minipallas.lowering.tpu import aot, compile_check, lower_to_mosaic
from minipallas.tools.difftest import ref
from minipallas.tools.difftest.coverage import Coverage
from minipallas.tools.difftest.harness import abstract
from minipallas.tools.difftest.outputs import interpret_outputs
from minipallas.tools.envelope.chips import TPU_V5E
from minipallas.tools.envelope.measure import envelope
from minipallas.tools.envelope.perturb import step_ulps
from minipallas.tools.fuzz import kernels as fuzz_kernels
from minipallas.tools.fuzz import tpu as fuzz_tpu
from minipallas.tools.generate import kernel_params
from minipallas.tools.generate.choices import RandomChoices
from minipallas.tools.generate.kernel_params import Dot
from minipallas.tools.generate.kernels import (
    IndexMap,
    KernelSpec,
    Operand,
    kernel_inputs,
    minipallas_call,
    random_kernel,
    tpu_sized,
)
from minipallas.tpu import VMEM

NEEDS_LIBTPU = pytest.mark.skipif(
    not aot.libtpu_available() and not os.environ.get("CI"), reason="libtpu is not installed"
)


def _drawn(seed: int, count: int) -> list[KernelSpec]:
    rng, params = random.Random(seed), kernel_params.generator(seed)
    return [random_kernel(RandomChoices(rng), params=RandomChoices(params)) for _ in range(count)]


def test_every_parameter_value_is_drawn_within_200_kernels():
    seen: dict[str, set[str]] = {}
    for spec in _drawn(0, 200):
        for name, value in kernel_params.parameters(spec).items():
            seen.setdefault(name, set()).add(value)
    assert seen == {
        "dot precision": {"None", "DEFAULT", "HIGHEST", "HIGH", "HIGHEST,DEFAULT"},
        "preferred_element_type": {"None", "float32", "bfloat16"},
        "reciprocal": {"exact", "approx"},
        "accuracy": {"exp", "tanh"},
        "pipeline_mode": {"Buffered(1)", "Buffered(2)", "Buffered(3)"},
        "multiple_of": {"body", "map", "body+map"},
        "mul out_dtype": {"float32", "bfloat16"},
    }


def test_drawing_parameters_keeps_each_seeds_kernels():
    """Parameters come from a generator of their own: the kernels' draws are those of a seed
    without parameters (a dot halves blocks of 4, each array keeping its count of blocks)."""
    for seed in range(3):
        plain = random.Random(seed)
        kernels = [random_kernel(RandomChoices(plain)) for _ in range(40)]
        for before, after in zip(kernels, _drawn(seed, 40), strict=True):
            after = kernel_params.plain(after)
            if after.block != before.block:  # a dot's: halved
                assert [b // 2 if b == 4 else b for b in before.block] == list(after.block)
                assert before.outside() == after.outside()
                continue
            assert after == before


def test_dot_kernels_tile_for_mosaics_matmul():
    """On the TPU a dot step's contraction and width are multiples of 128."""
    specs = [tpu_sized(s) for s in _drawn(1, 120) if s.dot is not None]
    assert specs
    for spec in specs:
        assert all(b % 128 == 0 for b in spec.block) and max(spec.block) <= 256, spec.block


def test_coverage_counts_kernels_per_value_and_verdict():
    c = Coverage()
    c.add({"dot precision": "HIGHEST", "reciprocal": "approx"}, "agree")
    c.add({"dot precision": "HIGHEST"}, "both-refuse")
    c.add({}, "agree")
    assert c.lines() == [
        "dot precision=HIGHEST: 2 kernels (agree 1, both-refuse 1)",
        "reciprocal=approx: 1 kernels (agree 1)",
    ]
    assert c.rows() == {"drew dot precision=HIGHEST": 2, "drew reciprocal=approx": 1}


# -- the kernels the fuzzers judge -------------------------------------------------------------


def _spec(**params) -> KernelSpec:
    """A one-input float32 kernel over a grid of 2 row blocks, with ``params``."""
    rows = IndexMap(("axis", "const"), (0, 0))
    base = KernelSpec(
        grid=(2,), block=(1, 1), inputs=(Operand((2, 1), rows),), output=Operand((2, 1), rows),
        accumulate=False, scratch=None, reset_axis=0, scale_axis=0,
    )  # fmt: skip
    return dataclasses.replace(base, **params)


def _aligned(spec: KernelSpec) -> KernelSpec:
    (x,) = spec.inputs
    return dataclasses.replace(
        spec, inputs=(dataclasses.replace(x, index_map=dataclasses.replace(x.index_map,
                                                                           multiple_of=True)),)
    )  # fmt: skip


def test_a_cpu_kernel_with_highest_and_an_approx_reciprocal_agrees():
    """minipallas's two CPU ways against upstream's interpret mode; the approximate
    reciprocal's stand-in keeps its bfloat16 quotient in float32 (``KNOWN``)."""
    spec = _aligned(_spec(dot=Dot(("HIGHEST",), "float32"), reciprocal="approx", multiple_of=True,
                          buffered=(0, 1)))  # fmt: skip
    outcome = fuzz_kernels.check(spec, seed=0)
    assert outcome.problem is None, outcome.problem
    assert set(outcome.known) <= {"approx reciprocal in float32", "excess precision"}
    assert outcome.verdict in ("agree", "known")


def test_a_dropped_approx_is_a_disagreement(monkeypatch):
    """minipallas computing the exact reciprocal where approx was asked (as if the front end
    dropped it) gives other bits than upstream's stand-in."""
    import minipallas

    real = minipallas.reciprocal
    monkeypatch.setattr(minipallas, "reciprocal", lambda x, approx=False, **kw: real(x))
    outcome = fuzz_kernels.check(_spec(reciprocal="approx"), seed=0)
    assert outcome.verdict == "disagree" and "reciprocal=approx" in outcome.problem


def test_accuracy_is_refused_on_the_cpu_as_upstreams_mosaic_refuses_it():
    outcome = fuzz_kernels.check(_spec(accuracy="exp"), seed=0)
    assert outcome.verdict == "refused-as-on-the-tpu" and outcome.known == ["accuracy refused"]
    # a pipeline's blame has nothing to run on (fuzz-tpu --aot --pass-pipeline stopped here)
    spec = _spec(accuracy="exp")
    args = fuzz_kernels.kernel_inputs(spec, 0)
    assert fuzz_kernels.pipeline_blame(spec, args, "fuse-grid-steps{min_steps=1}") is None


@NEEDS_LIBTPU
@pytest.mark.parametrize(
    "params, shows",
    [
        ({"dot": Dot(("HIGHEST",), "float32")}, ["#tpu.contract_precision<fp32>"]),
        ({"dot": Dot(None, None), "buffered": (-1, 2)}, ["double_buffered"]),
        ({"reciprocal": "approx", "buffered": (0, 1)}, ["approx = true", "synchronous"]),
        ({"multiple_of": True, "aligned": True}, ["tpu.assume_multiple"]),
    ],
    ids=lambda p: str(p) if isinstance(p, dict) else "",
)
def test_aot_compiles_both_sides_of_a_parameter_both_honour(params, shows):
    """Upstream's module and the importer's agree (compile both); minipallas's own front end
    (``minipallas_call``, the other namespace) lowers the kernel with the parameter in its
    module, which libtpu compiles too."""
    params = dict(params)
    aligned = params.pop("aligned", False)
    spec = tpu_sized(_aligned(_spec(**params)) if aligned else _spec(**params))
    assert fuzz_tpu.aot_verdict(spec, 0) == ("agree", "")
    kernel = minipallas_call(spec).trace(*kernel_inputs(spec, 0), memory_space=VMEM)
    lowered = lower_to_mosaic(kernel)
    assert all(text in str(lowered.module) for text in shows), shows
    compile_check(kernel, lowered)


@NEEDS_LIBTPU
@pytest.mark.parametrize(
    "params, upstream",
    [
        ({"buffered": (0, 3)}, "Only single (1) and double (2) buffering"),
        ({"dot": Dot(("HIGH",))}, "Unsupported dot precision: HIGH"),
        ({"dot": Dot(("HIGHEST", "DEFAULT"))}, "precision"),
        ({"accuracy": "tanh"}, "Not implemented: accuracy"),
    ],
    ids=lambda p: str(p) if isinstance(p, dict) else "",
)
def test_aot_both_refuse_a_parameter_upstreams_mosaic_refuses(params, upstream):
    kind, why = fuzz_tpu.aot_verdict(tpu_sized(_spec(**params)), 0)
    assert kind == "both-refuse" and upstream in why.split("upstream:")[1], why


@NEEDS_LIBTPU
def test_upstream_failing_a_documented_parameter_is_no_finding():
    """``lax.mul``'s ``out_dtype``: upstream's Mosaic rule fails, minipallas runs it
    (``fuzz_tpu.BEYOND``): counted, not a finding."""
    kind, why = fuzz_tpu.aot_verdict(tpu_sized(_spec(mul_out="bfloat16")), 0)
    assert kind == "beyond-upstream-documented" and kind in fuzz_tpu.GOOD, why
    # a float32 dot into bfloat16: accumulated in float32 and rounded once, where upstream's
    # matmul takes a bfloat16 accumulator Mosaic refuses
    kind, why = fuzz_tpu.aot_verdict(tpu_sized(_spec(dot=Dot(None, "bfloat16"))), 0)
    assert kind == "beyond-upstream-documented" and "acc to be 32-bit" in why, why


@NEEDS_LIBTPU
def test_an_aot_campaign_reports_its_parameters():
    """Seed 1 (seed 0 has bfloat16 scalar extracts Mosaic refuses: ``tests/mosaic_compile.py``
    fails a test on them)."""
    s = fuzz_tpu.campaign(12, 600, 1, fuzz_tpu.aot_verdict, out=io.StringIO())
    assert not s.findings, s.findings
    assert s.coverage.rows() and all(
        set(counts) <= set(fuzz_tpu.GOOD) for counts in s.coverage.verdicts.values()
    )


# -- the chip's numerics -------------------------------------------------------------------------


def _import(fn, *args):
    import minipallas

    return minipallas.from_jaxpr(jax.make_jaxpr(fn)(*abstract(args)))


def test_the_chips_approx_reciprocal_is_inside_its_envelope_and_outside_the_cpus():
    """The interpreter computes upstream's stand-in (``1 / x`` of ``x`` in bfloat16); the chip
    its own approximation, measured within 1.6e-5 of ``1 / x``: inside the chip's envelope."""
    rng = np.random.default_rng(0)
    x = (1 + 4 * rng.random(512)).astype(np.float32)
    fn = _import(lambda r: pl.reciprocal(r[...], approx=True), ref(x))
    base = interpret_outputs(fn, (ref(x),))
    chip_like = 1 / x.astype(np.float64) * (1 + rng.uniform(-1.6e-5, 1.6e-5, x.shape))
    chip_like = chip_like.astype(np.float32)
    chip = envelope(fn, (ref(x),), base, chip=TPU_V5E).judge(0, base[0], chip_like)
    cpu = envelope(fn, (ref(x),), base).judge(0, base[0], chip_like)
    assert chip.within and not cpu.within, (chip, cpu)
    exact = _import(lambda r: pl.reciprocal(r[...]), ref(x))
    base = interpret_outputs(exact, (ref(x),))
    one_ulp = step_ulps(base[0], rng.integers(-1, 2, x.shape))  # the chip's: measured 1 ulp
    assert envelope(exact, (ref(x),), base, chip=TPU_V5E).judge(0, base[0], one_ulp).within


def test_a_highest_dot_is_not_given_the_one_pass_envelope():
    """At HIGHEST the chip multiplies float32 operands: the one bfloat16 pass of the default
    precision lies outside that dot's envelope (a dropped HIGHEST shows), inside a default
    dot's."""
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((16, 128)).astype(np.float32) for _ in range(2))
    bf16 = jnp.bfloat16
    one_pass = np.asarray(a.astype(bf16), np.float32) @ np.asarray(b.T.astype(bf16), np.float32)
    args = (ref(a), ref(b.T.copy()))
    for precision, within in ((jax.lax.Precision.HIGHEST, False), (None, True)):
        fn = _import(lambda x, y, p=precision: jnp.dot(x[...], y[...], precision=p), *args)
        base = interpret_outputs(fn, args)
        d = envelope(fn, args, base, chip=TPU_V5E).judge(0, base[0], one_pass)
        assert d.within == within, (precision, d)


def test_shrinking_drops_the_parameters_a_finding_does_not_need():
    """A made-up finding of every kernel whose dot is at HIGH: shrinking keeps that dot and
    drops the product dtype, every other parameter and the grid's second step."""

    def verdict(spec, seed):
        high = spec.dot is not None and spec.dot.precision == ("HIGH",)
        return ("odd", "") if high else ("agree", "")

    spec = _aligned(
        _spec(dot=Dot(("HIGH",), "float32"), reciprocal="approx", buffered=(0, 2),
              multiple_of=True, mul_out="bfloat16", accuracy="exp")
    )  # fmt: skip
    small = fuzz_tpu.shrink(spec, 0, "odd", verdict)
    assert small == _spec(dot=Dot(("HIGH",)), grid=(1,))


def test_a_bf16_chain_xla_tpu_keeps_in_f32_is_inside_the_chips_envelope():
    """A float32 kernel's ``lax.mul(out_dtype=bfloat16) * 3`` widened back: on the chip the
    xla-tpu way computed it all in float32, its inputs unrounded (``perturb``'s rule 7; seen as
    1.5 bfloat16 ulps, "outside" before the rule); XLA:CPU's per-op bits stay the CPU's."""
    rng = np.random.default_rng(2)
    x, y = (rng.standard_normal((16, 128)).astype(np.float32) for _ in range(2))

    def chain(a, b):
        return (jax.lax.mul(a[...], b[...], out_dtype=jnp.bfloat16) * 3.0).astype(jnp.float32)

    args = (ref(x), ref(y))
    fn = _import(chain, *args)
    base = interpret_outputs(fn, args)
    kept = (x * y) * np.float32(3.0)
    assert not np.array_equal(kept, base[0])
    assert envelope(fn, args, base, chip=TPU_V5E).judge(0, base[0], kept).within
    assert not envelope(fn, args, base).judge(0, base[0], kept).within
