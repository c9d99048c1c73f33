"""The difftest's TPU ways, checked on a machine with no TPU.

What needs the chip (their values) runs in the hardware check (``minipallas-difftest
tests/difftest/chip_cases.py --device tpu``); here: every way's program compiles for a v5e
ahead of time with libtpu, the verdict logic on outcomes made by hand, the undefined-element
masks, the chip's numerics model, and the beyond-upstream rows (upstream refuses each,
minipallas's module compiles, the CPU ways agree).
"""

from __future__ import annotations

import dataclasses
import os
import re

import chip_cases
import jax
import numpy as np
import pytest

from minipallas.ir.errors import MiniPallasError
from minipallas.lowering.runtime.libtpu import libtpu_available, tpu_sharding
from minipallas.lowering.tpu import aot
from minipallas.tools.difftest import run
from minipallas.tools.difftest.mosaic import UpstreamError, upstream_mosaic
from minipallas.tools.difftest.report import Outcome
from minipallas.tools.difftest.tpu import TPU_WAYS, defined_masks, judge, tpu_functions
from minipallas.tools.envelope.chips import TPU_V5E
from minipallas.tools.envelope.measure import envelope

NEEDS_LIBTPU = pytest.mark.skipif(
    not aot.libtpu_available() and not os.environ.get("CI"),
    reason="libtpu is not installed (make test installs it)",
)


@pytest.fixture(scope="module")
def reports():
    """The CPU ways of every case, once."""
    return {c.name: run(c) for c in chip_cases.CASES}


def _on_tpu() -> bool:
    try:
        return bool(jax.devices("tpu"))
    except RuntimeError:
        return False


@pytest.mark.skipif(_on_tpu(), reason="this machine has a TPU")
def test_device_tpu_without_a_tpu_runs_what_needs_no_chip():
    """No chip: the CPU ways, the kernel checks and libtpu's compile of both sides run; the
    verdict says the chip ways did not."""
    report = run(chip_cases.CHIP[0], device="tpu")
    assert report.finding.kind in ("agree", "within-envelope")
    assert not any(way in report.outcomes for way in TPU_WAYS)
    assert report.tpu.kind == "no-chip" and report.tpu.ok
    assert ("compiled both sides" in report.tpu.message) == libtpu_available()


def test_an_unknown_device_is_an_error_with_a_fix():
    with pytest.raises(MiniPallasError, match="not a device") as e:
        run(chip_cases.CHIP[0], device="gpu")
    assert "'tpu'" in e.value.fix


@NEEDS_LIBTPU
@pytest.mark.parametrize("name", [c.name for c in chip_cases.CHIP])
def test_every_tpu_way_compiles_for_a_v5e(reports, name):
    """The ``tpu`` way's custom call holds minipallas's module, ``upstream-tpu``'s upstream's
    (the case says ``interpret=True``: the way lowers it anyway), both named as upstream names
    it (the kernel function's name); ``xla-tpu`` has none."""
    report = reports[name]
    sharding = tpu_sharding()
    specs = [jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype, sharding=sharding)
             for a in report.case.args]  # fmt: skip
    kernels = {}
    for way, fn in tpu_functions(report).items():
        lowered = jax.jit(fn, out_shardings=sharding).lower(*specs)
        kernels[way] = re.findall(r'kernel_name = "([^"]*)"', lowered.as_text())
        lowered.compile()
    assert len(kernels["upstream-tpu"]) == 1 and kernels["upstream-tpu"] != ["kernel"]
    assert kernels["tpu"] == kernels["upstream-tpu"] and kernels["xla-tpu"] == []


def test_undefined_elements_are_the_unwritten_rows_and_what_padding_feeds(reports):
    (half,) = defined_masks(reports["half_rows_written"])
    assert half[:4].all() and not half[4:8].any() and half[8:12].all() and not half[12:].any()
    (sums,) = defined_masks(reports["partial_block_sums"])  # rows 16..19: the partial block
    assert sums[:16].all() and not sums[16:].any()
    (scalar,) = defined_masks(reports["scalar_sum"])
    assert scalar[0, 0] and scalar.sum() == 1


def _judged(report, tpu, upstream_tpu=None, xla_tpu=None):
    report = dataclasses.replace(report, outcomes=dict(report.outcomes))
    for way, outputs in (("tpu", tpu), ("upstream-tpu", upstream_tpu), ("xla-tpu", xla_tpu)):
        if isinstance(outputs, Exception):
            report.outcomes[way] = Outcome(way, error=outputs, stage="run")
        elif outputs is not None:
            report.outcomes[way] = Outcome(way, outputs=[np.asarray(o) for o in outputs])
    return judge(report)


def test_the_verdict_skips_undefined_elements_and_only_those(reports):
    report = reports["half_rows_written"]
    (good,) = report.outcomes["interpret"].outputs
    garbage = good.copy()
    garbage[4:8] = 7.0  # rows neither side defines
    verdict = _judged(report, [garbage], [good])
    assert verdict.kind == "agree" and verdict.undefined == 8 * 128, verdict
    wrong = good.copy()
    wrong[1, 5] += 1.0  # a defined row
    verdict = _judged(report, [wrong], [good])
    assert verdict.kind == "lowering-difference" and "[1, 5]" in verdict.message
    assert verdict.module_differences  # the modules were put side by side


def test_a_value_outside_the_chips_envelope_names_the_way(reports):
    report = reports["exp_tanh_log"]
    (good,) = report.outcomes["interpret"].outputs
    far = good * np.float32(1.001)
    verdict = _judged(report, [good], [good], [far])
    assert verdict.kind == "outside-chip-envelope" and verdict.message.startswith("xla-tpu")


def test_upstream_refusing_what_minipallas_runs_is_beyond_upstream(reports):
    report = reports["float_iota"]
    (good,) = report.outcomes["interpret"].outputs
    verdict = _judged(report, [good], RuntimeError("iota verification failed"))
    assert verdict.kind == "beyond-upstream" and verdict.ok
    verdict = _judged(report, RuntimeError("halted"), [good])
    assert verdict.kind == "error" and not verdict.ok


def test_the_chips_one_pass_dot_is_inside_its_envelope_and_outside_the_cpus(reports):
    """The chip model rounds float32 dot operands to bfloat16: a product computed so is
    within the chip's envelope, and far outside XLA:CPU's."""
    report = reports["matmul_f32_default"]
    x, y = report.case.args
    bf16 = jax.numpy.bfloat16
    one_pass = np.asarray(x.astype(bf16), np.float32) @ np.asarray(y.astype(bf16), np.float32)
    base = report.outcomes["interpret"].outputs
    chip = envelope(report.program, report.case.args, base, chip=TPU_V5E).judge(
        0, base[0], one_pass
    )
    cpu = envelope(report.program, report.case.args, base).judge(0, base[0], one_pass)
    assert chip.within and not cpu.within, (chip, cpu)


@pytest.mark.parametrize("row", chip_cases.BEYOND, ids=lambda b: b.case.name)
def test_beyond_upstream(reports, row):
    """Upstream's Mosaic lowering refuses the kernel; minipallas's module compiles for a v5e
    and its CPU ways agree (on the chip: the hardware check)."""
    report = reports[row.case.name]
    assert report.expected and report.difference is None, report.text()
    with pytest.raises(UpstreamError, match=re.escape(row.upstream)):
        upstream_mosaic(tpu_functions(report)["upstream-tpu"], *row.case.args)
    if aot.libtpu_available():
        sharding = tpu_sharding()
        specs = [jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype, sharding=sharding)
                 for a in row.case.args]  # fmt: skip
        jax.jit(tpu_functions(report)["tpu"], out_shardings=sharding).lower(*specs).compile()
