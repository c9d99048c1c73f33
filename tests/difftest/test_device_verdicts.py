"""The difftest's verdicts on cases that span devices (issue 47 item 4): upstream's TPU interpret
mode in a time-boxed worker against minipallas's simulator under several schedules.

The cases (``device_verdict_cases.py``) run in two processes at once, each with 4 CPU devices
and a time box of 20 s an upstream run: ``difftest.run`` on four of them (``XLA_FLAGS`` set),
and ``minipallas-difftest --devices 4`` on the token ring, whose upstream hangs. The verdicts
that no kernel of ours gives upstream (``upstream-wrong``, and ``upstream-hangs`` where the
simulator finishes) are checked on reports whose upstream runs are given, in this process.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import minipallas
from minipallas import MiniPallasError
from minipallas.ir.errors import InterpretError
from minipallas.tools.difftest import Case
from minipallas.tools.difftest.classify import classify, recognize_crash
from minipallas.tools.difftest.devices import UpstreamHang, UpstreamRuns, _rebuilt, compiled_way
from minipallas.tools.difftest.report import Outcome, Report, first_difference

CASES = Path(__file__).with_name("device_verdict_cases.py")
SECONDS = 20
PLAIN = ["InterpretParams()", "InterpretParams() again"]  # the worker's first two runs


NAMES = ["right_permute", "upstream_all_gather", "permute_read_early", "hidden", "nowhere",
         "right_permute_check_vma", "right_permute@tpu"]  # fmt: skip


def _start(command: list[str], **env: str) -> subprocess.Popen:
    plain = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**plain, "JAX_PLATFORMS": "cpu", **env})  # fmt: skip


@pytest.fixture(scope="module")
def verdicts() -> dict:
    four = _start([sys.executable, str(CASES), str(SECONDS), *NAMES],
                  XLA_FLAGS="--xla_force_host_platform_device_count=4")  # fmt: skip
    cli = _start([sys.executable, "-m", "minipallas.tools.difftest.cli", "--devices", "4",
                  "--upstream-seconds", str(SECONDS), str(CASES), "-k", "token_ring"])  # fmt: skip
    out, err = four.communicate(timeout=600)
    assert four.returncode == 0, err[-3000:]
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    table, err = cli.communicate(timeout=600)
    return {**{v["case"]: v for v in lines}, "cli": (cli.returncode, table, err)}


def test_a_correct_right_permute_agrees_with_upstream_in_every_run(verdicts):
    v = verdicts["right_permute"]
    assert (v["kind"], v["expected"], v["upstream_ok"]) == ("agree", True, True), v
    assert v["upstream_equal"] == [True] * 5 and v["races"] is False  # 2 plain, 3 detecting
    assert set(v["ways"]) == {"interpret", "schedule-0", "schedule-1", "on-devices", "upstream"}


def test_device_tpu_leaves_a_case_that_spans_devices_to_its_own_ways(verdicts):
    """The TPU ways (and libtpu's one-chip compile, which would refuse the mesh) skip it."""
    v = verdicts["right_permute@tpu"]
    assert (v["kind"], v["tpu"]) == ("agree", "None"), v
    assert "device='tpu': the TPU ways run one chip's kernels" in v["notes"][-1]


def test_upstreams_own_all_gather_is_a_race_its_own_detector_names(verdicts):
    """Its two copies from one neighbour share a receive semaphore, so a wait can be satisfied
    by the later copy: the simulator names it under a seeded schedule, upstream's interpreter
    shows it as NaNs that vary between runs, and its race detector names the copy's line. The
    finding is the kernel's race, not upstream's mistake: a chip may deliver the copies in
    either order too."""
    v = verdicts["upstream_all_gather"]
    assert (v["kind"], v["name"]) == ("kernel-bug", "race"), v
    assert v["races"] is True and "all_gather.py:" in v["detail"]
    assert v["runs"][:2] == [[label, True] for label in PLAIN]
    assert all(ok for _, ok in v["runs"]) and "detect_races=True" in v["runs"][2][0]


def test_a_planted_race_is_named_by_the_simulator_with_both_lines(verdicts):
    v = verdicts["permute_read_early"]
    assert (v["kind"], v["name"]) == ("kernel-bug", "race"), v
    assert "RaceError" in v["detail"]
    assert v["detail"].count("device_verdict_cases.py:") == 2  # the read and the copy


def test_a_token_ring_is_a_deadlock_and_upstream_hangs_in_its_time_box(verdicts):
    """Through ``minipallas-difftest --devices 4``: this process starts without XLA_FLAGS."""
    code, table, err = verdicts["cli"]
    assert code == 0, (table, err[-3000:])  # the finding is the one the case expects
    assert re.search(r"token_ring +kernel-bug \(deadlock\) +yes", table), table
    assert (
        f"(InterpretParams(), 4 devices) gave no result within the time box of {SECONDS} s" in table
    )
    assert table.count("waits at semaphore_wait") == 3  # every blocked device


def test_upstream_crashing_on_check_vma_is_a_known_upstream_defect(verdicts):
    """Upstream's interpret mode fails on right permute in a shard_map with check_vma=True,
    which the simulator runs to numpy's result."""
    v = verdicts["right_permute_check_vma"]
    assert (v["kind"], v["name"], v["expected"]) == (
        "upstream-crash", "interpret-vma-mismatch", True), v  # fmt: skip
    assert "requires varying manual axes to match" in v["detail"]


@pytest.mark.parametrize("case", ["hidden", "nowhere"])
def test_a_case_the_worker_cannot_find_is_a_case_error_with_its_fix(verdicts, case):
    v = verdicts[case]
    assert (v["kind"], v["name"], v["expected"]) == ("case-error", "case-not-found", True), v
    assert "define the Case at module level" in v["detail"]


def test_the_compiled_way_refusing_a_kernel_is_a_note_not_a_failed_way(monkeypatch):
    def refuse(fn):
        raise MiniPallasError("a copy's target depends on data", fix="run it simulated")

    monkeypatch.setattr(minipallas, "on_devices", refuse, raising=False)
    report = Report(Case("refused", lambda x: x, (X,)))
    compiled_way(report)
    assert "on-devices" not in report.outcomes
    assert report.check_notes == ["on-devices: not compiled: a copy's target depends on data\n"
                                  "  fix: run it simulated"]  # fmt: skip


# -- the verdicts on given upstream runs ---------------------------------------------------


def _report(ours: np.ndarray, *upstream: np.ndarray | None) -> Report:
    """A report of a case that spans devices: the simulator's ways all give ``ours``; each
    upstream run gives its array (None: it hung)."""
    report = Report(Case("given", lambda x: x, (ours,)))
    runs = UpstreamRuns(devices=4, seconds=SECONDS, races=False)
    for label, out in zip(PLAIN, upstream, strict=False):
        error = None if out is not None else UpstreamHang("no result within the time box")
        runs.runs.append(Outcome(label, None if out is None else [out], error, "eval"))
        runs.hung = out is None
    report.upstream_runs = runs
    first = runs.runs[0]
    report.outcomes["upstream"] = Outcome("upstream", first.outputs, first.error, "eval")
    for way in ("interpret", "schedule-0", "schedule-1"):
        report.outcomes[way] = Outcome(way, [ours])
    report.labels = ["result 0"]
    report.difference = first_difference(report, 0)
    return report


X = np.arange(8, dtype=np.float32)


def test_upstream_results_that_vary_between_runs_are_upstream_wrong():
    other = X.copy()
    other[3] = np.nan
    found = classify(_report(X, X, other))
    assert (found.kind, found.name) == ("upstream-wrong", "varies between runs")
    assert "1 of 8 elements differ" in found.detail


def test_upstream_disagreeing_with_every_simulated_schedule_is_upstream_wrong():
    found = classify(_report(X, X + 1, X + 1))
    assert (found.kind, found.name) == ("upstream-wrong", "disagrees with every minipallas way")


def test_an_upstream_hang_where_the_simulator_finishes_is_upstream_hangs():
    found = classify(_report(X, None))
    assert (found.kind, found.name) == ("upstream-hangs", "upstream-hangs")
    assert "time box 20 s a run" in found.detail and "minipallas: ran" in found.detail


def _one_way_off(way: str):
    """The verdict where ``way`` alone gives ``X + 1``, beside upstream and the simulator."""
    report = _report(X, X, X)
    report.outcomes[way] = Outcome(way, [X + 1])
    report.difference = first_difference(report, 0)
    return classify(report)


def test_schedules_that_disagree_without_a_named_race_are_a_kernel_bug():
    found = _one_way_off("schedule-1")
    assert (found.kind, found.name) == ("kernel-bug", "schedule-dependent")
    assert "schedule-1 vs interpret" in found.detail


def test_the_compiled_way_disagreeing_with_the_simulator_is_a_minipallas_bug():
    found = _one_way_off("on-devices")
    assert (found.kind, found.name) == ("minipallas-bug", "on-devices disagrees with interpret")


@pytest.mark.parametrize(
    "message, kind",
    [
        ("program (0,) starts an async copy here, and this copy into program (1,)'s row is "
         "never waited for: the kernel ends with it in flight", "dma"),
        ("the semaphore at [2] of a shared int32[4] semaphore buffer holds 1 when every "
         "program has finished", "semaphore"),
    ],
)  # fmt: skip
def test_what_else_the_simulator_raises_at_a_kernels_end_is_its_bug(message, kind):
    """The simulator's end-of-kernel checks raise a plain ``InterpretError``; the difftest
    reads its kind from the message (``known.SIMULATED_MESSAGES``)."""
    report = _report(X, X, X)
    report.outcomes["schedule-0"] = Outcome("schedule-0", error=InterpretError(message))
    report.difference = first_difference(report, 0)
    found = classify(report)
    assert (found.kind, found.name) == ("kernel-bug", kind)
    assert found.detail.startswith("schedule-0: InterpretError: ")


@pytest.mark.parametrize(
    "error, message, where, name",
    [
        ("NotImplementedError", "Unsupported transform: SelectTransform(idx=...)", "",
         "interpret-select-ref"),
        ("NotImplementedError", "<class 'jax._src.state.types.SelectTransform'>", "",
         "interpret-select-ref"),
        ("NotImplementedError", "nan + semaphore", "get_uninitialized_value",
         "interpret-semaphore-output"),
        ("NotImplementedError", "nan + semaphore", "elsewhere", None),
    ],
)  # fmt: skip
def test_upstream_crashes_only_devices_show_are_recognized(error, message, where, name):
    """As the corpus's kernels raise them (minipallas/tools/corpora/multi_device: select_ref_*,
    no_barrier_semaphore), rebuilt from the worker's report of them."""
    crash = _rebuilt(error, message, [where])
    assert recognize_crash("eval", crash) == name
    assert type(crash).__name__ == error
