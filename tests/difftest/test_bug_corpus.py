"""The kernel checks on the bug corpus (issue 39): every buggy kernel is the kernel's bug, of
the kind the corpus names, and no correct kernel is; the corpus's chip behaviours are the ones
a TPU v5e showed (``bench/results/tpu_bugs.json``).

Compile errors need libtpu (``device="tpu"`` without a chip compiles both sides ahead of
time); every other kind is found on the CPU alone.
"""

import functools
import json
import os
from pathlib import Path

import pytest

from minipallas.lowering.runtime.libtpu import libtpu_available
from minipallas.lowering.tpu.aot import MosaicCompileError
from minipallas.tools.corpora.bug_corpus import ENTRIES
from minipallas.tools.difftest import Case, run

MEASURED = Path(__file__).resolve().parents[2] / "bench" / "results" / "tpu_bugs.json"
NO_LIBTPU = not libtpu_available() and not os.environ.get("CI")


# minipallas's own module for these is refused too, which the conftest's compile of every
# module a test emits then reports
BOTH_REFUSED = ("vmem_scratch_200mib", "smem_scratch_4mib")
CASES = [
    pytest.param(
        e,
        marks=pytest.mark.xfail(raises=MosaicCompileError, strict=not NO_LIBTPU)
        if e.name in BOTH_REFUSED
        else (),
    )
    for e in ENTRIES
]


@pytest.mark.parametrize("entry", CASES, ids=lambda e: e.name)
def test_the_checks_report_each_bug_as_the_kernels_and_no_correct_kernel(entry):
    if entry.bug == "compile" and NO_LIBTPU:
        pytest.skip("libtpu is not installed (make test installs it)")
    device = "tpu" if entry.bug == "compile" else "cpu"
    case = Case(entry.name, functools.partial(entry.fn, interpret=True), entry.args)
    report = run(case, device=device)
    kinds = [b.kind for b in report.kernel_bugs]
    if entry.bug is None:
        assert kinds == [] and report.finding.kind in ("agree", "within-envelope"), report.text()
        return
    assert report.finding.kind == "kernel-bug", report.text()
    assert report.finding.name == entry.bug, report.text()
    bug = report.kernel_bugs[0]
    assert bug.fix and (bug.kernel or bug.kind == "compile")  # a refusal is the program's
    assert bug.latent == (entry.bug == "race")


def test_the_corpus_says_what_the_chip_did():
    """Every entry's ``chip`` is what one run on a v5e measured."""
    rows = json.loads(MEASURED.read_text())["entries"]
    measured = {row["name"]: row["chip"] for row in rows}
    assert {e.name: e.chip for e in ENTRIES} == measured
