"""``make fuzz-tpu`` on a machine without a TPU: its ahead-of-time mode, its shrinker, its
refusal to run the chip mode without a chip."""

from __future__ import annotations

import dataclasses
import io
import os
import random

import pytest

from minipallas.difftest import fuzz_tpu
from minipallas.difftest.tpu import NoTpuError
from minipallas.generate.kernels import tpu_sized
from minipallas.lowering.tpu import aot


@pytest.mark.skipif(
    not aot.libtpu_available() and not os.environ.get("CI"), reason="libtpu is not installed"
)
def test_an_aot_campaign_compiles_both_sides_and_finds_nothing():
    out = io.StringIO()
    s = fuzz_tpu.campaign(6, 600, 0, fuzz_tpu.aot_verdict, out=out)
    assert s.kernels == 6 and not s.findings, out.getvalue()
    assert s.classes["agree"] >= 3  # most kernels compile on both sides


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
