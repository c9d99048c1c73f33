"""``make fuzz-tpu`` on a machine without a TPU: its ahead-of-time mode, its shrinker, its
refusal to run the chip mode without a chip."""

from __future__ import annotations

import argparse
import dataclasses
import io
import os
import random
from pathlib import Path

import pytest

from minipallas.lowering.tpu import aot
from minipallas.tools.difftest.tpu import NoTpuError
from minipallas.tools.fuzz import tpu as fuzz_tpu
from minipallas.tools.generate.kernels import tpu_sized
from minipallas.tools.user_passes import loaded


@pytest.mark.skipif(
    not aot.libtpu_available() and not os.environ.get("CI"), reason="libtpu is not installed"
)
def test_an_aot_campaign_compiles_both_sides_and_finds_nothing():
    """Seed 1's first 6 kernels: one out of bounds on purpose, one both refuse by the
    block-shape rule, the rest compile (a module Mosaic refuses would fail the test of its own:
    ``tests/mosaic_compile.py``; seed 0 has two bfloat16 scalar extracts)."""
    out = io.StringIO()
    s = fuzz_tpu.campaign(6, 600, 1, fuzz_tpu.aot_verdict, out=out)
    assert s.kernels == 6 and not s.findings, out.getvalue()
    assert s.classes["agree"] >= 3 and s.classes["out-of-bounds-flagged"] == 1


@pytest.mark.skipif(
    not aot.libtpu_available() and not os.environ.get("CI"), reason="libtpu is not installed"
)
def test_a_worker_that_dies_costs_only_its_kernel():
    """A halted chip kills the process holding it: kernel 1's worker dies, it is reported
    ``halted`` and a fresh worker checks kernel 2."""
    s = fuzz_tpu.supervised(3, 600, 0, aot=True, simulate_halt=1)
    assert s.kernels == 3 and s.classes["halted"] == 1
    assert [f for f in s.findings if f.startswith("halted (kernel 1)")]


def test_kernels_are_mosaic_legal_and_write_their_outputs():
    rng = random.Random(1)
    for _ in range(20):
        spec, _ = fuzz_tpu.kernel(rng)
        assert not spec.accumulate
        assert spec.block[-1] is None or spec.block[-1] % 128 == 0


def test_shrinking_keeps_the_class_and_reaches_the_plainest_spec():
    """A made-up finding (any bf16 kernel with more than one grid step): shrinking keeps a
    bf16 kernel and one axis of size > 1 (the last: axes shrink in order), and drops every
    option it can."""

    def verdict(spec, seed):
        return ("odd", "") if spec.dtype == "bfloat16" and max(spec.grid) > 1 else ("agree", "")

    spec, _ = fuzz_tpu.kernel(random.Random(3))
    spec = dataclasses.replace(
        spec, dtype="bfloat16", grid=(3, 2), inner_loop=True, staged=True, reduce="sum",
        reset_axis=0, scale_axis=1, branch_axis=None,
    )  # fmt: skip
    small = fuzz_tpu.shrink(spec, 0, "odd", verdict)
    assert small.dtype == "bfloat16" and small.grid == (1, 2)
    assert (small.inner_loop, small.staged, small.reduce, small.scratch) == (
        False,
        False,
        None,
        None,
    )


def test_the_chip_mode_without_a_chip_says_so():
    spec = tpu_sized(fuzz_tpu.kernel(random.Random(0))[0])
    try:
        import jax

        if jax.devices("tpu"):
            pytest.skip("this machine has a TPU")
    except RuntimeError:
        pass
    with pytest.raises(NoTpuError):
        fuzz_tpu.chip_verdict(spec, 0)


def test_kernels_are_drawn_in_bounds():
    """Every block of every grid point starts inside its array, by the generator's arithmetic
    and by ``halts``' run of the index maps on the TPU blocks (before arrays were sized to the
    maps, 74 of seed 0's first 200 kernels were not)."""
    for seed in range(4):
        rng = random.Random(seed)
        for _ in range(60):
            spec, inputs_seed = fuzz_tpu.kernel(rng, oob_rate=0.0)
            assert spec.outside() is None, spec.describe()
            assert fuzz_tpu.bounds_verdict(spec, inputs_seed) is None, spec.describe()


def test_kernels_made_out_of_bounds_are_flagged_and_never_judged():
    """With ``oob_rate=1`` every kernel is one block short somewhere, and ``halts`` flags each:
    counted apart from the rest, the verdict (the chip) never asked."""
    judged = []

    def verdict(spec, seed):
        judged.append(spec)
        return "agree", ""

    s = fuzz_tpu.campaign(30, 600, 0, verdict, out=io.StringIO(), oob_rate=1.0)
    assert s.classes == {"out-of-bounds-flagged": 30} and not s.findings and not judged
    s = fuzz_tpu.campaign(40, 600, 0, verdict, out=io.StringIO(), oob_rate=0.25)
    assert 0 < s.classes["out-of-bounds-flagged"] < 40 and s.classes["agree"] == len(judged)
    assert all(spec.outside() is None for spec in judged)


def test_the_generators_bounds_and_the_checks_disagreeing_is_a_finding(monkeypatch):
    """The generator's claim and the checks are held against each other: a kernel made out of
    bounds that ``halts`` passes (here a check that flags nothing) is a finding, and so is a
    kernel made in bounds that a verdict calls out of bounds."""
    s = fuzz_tpu.campaign(
        3, 600, 0, lambda spec, seed: ("out-of-bounds", "?"), out=io.StringIO(), oob_rate=0.0
    )
    assert s.classes == {"out-of-bounds": 3} and len(s.findings) == 3
    monkeypatch.setattr(fuzz_tpu, "out_of_bounds_block", lambda kernel, operands: None)
    s = fuzz_tpu.campaign(
        2, 600, 0, lambda spec, seed: ("agree", ""), out=io.StringIO(), oob_rate=1.0
    )
    assert s.classes == {"out-of-bounds-missed": 2} and len(s.findings) == 2


def test_directed_kernels_are_ones_the_pass_rewrites_and_a_worker_draws_them_again():
    """Directed at ``loosen-reciprocals`` (``fuzz_planted_kernel_passes.py``), every kernel
    holds an exact reciprocal it rewrites (of seed 0's first 4 plain ones, one), and a worker
    that skips the first kernels draws the very kernels the campaign drew after them."""
    planted = str(Path(__file__).with_name("fuzz_planted_kernel_passes.py"))
    args = argparse.Namespace(load=[planted], pass_pipeline="loosen-reciprocals")
    with loaded(args) as passes:
        specs: list = []

        def seen(spec, seed):
            specs.append(spec)
            return "agree", ""

        common = {"out": io.StringIO(), "oob_rate": 0.0, "passes": passes}
        s = fuzz_tpu.campaign(4, 600, 0, lambda spec, seed: ("agree", ""), **common)
        assert s.passes.changed == {"loosen-reciprocals": 1}  # plain
        s = fuzz_tpu.campaign(4, 600, 0, seen, targets=[passes], **common)
        assert s.passes.changed == {"loosen-reciprocals": 4}
        assert all(spec.reciprocal == "exact" for spec in specs)
        s = fuzz_tpu.campaign(4, 600, 0, seen, targets=[passes], skip=2, **common)
        assert s.kernels == 2 and specs[4:] == specs[2:4]
