"""The corpus of kernels that span devices (``minipallas.tools.corpora.multi_device``, issue 47),
each run in upstream's TPU interpret mode and in minipallas's simulator.

jax sees 8 CPU devices only when ``XLA_FLAGS`` says so before it starts, so every case runs in
one process of its own (``device_corpus_run.py``), once for the module; it prints a verdict a
case as a JSON line. The checks:

- upstream's interpret mode gives every correct case's numpy reference (a case upstream gets
  wrong is skipped with what upstream does), and does with every case what the case records;
- minipallas (``mp.from_jaxpr`` of the jitted function, ``mp.interpret(...,
  collectives="simulate")`` under two schedules) gives the reference, or names the planted
  bug: ``RaceError`` naming both accesses' lines and their devices (under at least one
  schedule: the other may run the racing accesses apart), ``DeadlockError`` naming every
  device, a ``MiniPallasError`` about a semaphore for a wrong count. What it cannot
  import or run yet is ``NOT_YET``, a strict xfail: it turns into a failure the day it works;
- ``jax.jit(mp.on_devices(f))`` (remote copies as XLA collectives) gives every correct
  data-independent case's reference, and refuses a data-dependent one with a
  ``MiniPallasError``; what it cannot compile yet is ``NOT_COMPILED``, a strict xfail too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from minipallas.tools.corpora.multi_device import CASES, Case

RUNNER = Path(__file__).with_name("device_corpus_run.py")
BY_NAME = {c.name: c for c in CASES}

# What minipallas cannot do yet, with the first line of what it says (its location left off).
NOT_YET: dict[str, str] = {}  # every case runs (issue 47); a case minipallas cannot run goes here
# What on_devices cannot compile yet (the first line of what it says, its location left off).
NOT_COMPILED: dict[str, str] = {}  # every correct case compiles (issue 47); one that does not
# goes here


@pytest.fixture(scope="module")
def verdicts() -> dict[str, dict]:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    run = subprocess.run(
        [sys.executable, str(RUNNER)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    lines = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    return {v["case"]: v for v in lines}


def _ids(cases: list[Case]) -> list[str]:
    return [c.name for c in cases]


CORRECT = [c for c in CASES if c.expect == "ok"]


@pytest.mark.parametrize("case", CORRECT, ids=_ids(CORRECT))
def test_upstream_interpret_mode_gives_each_correct_kernels_reference(verdicts, case):
    if case.upstream_kinds != ("ok",):
        pytest.skip(f"upstream: {case.upstream}")
    assert verdicts[case.name]["upstream"]["kind"] == "ok", verdicts[case.name]["upstream"]


@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_upstream_interpret_mode_does_what_each_case_records(verdicts, case):
    got = verdicts[case.name]["upstream"]
    assert got["kind"] in case.upstream_kinds, (case.upstream, got)


def _programs(text: str) -> set[str]:
    return set(re.findall(r"program (\([\d, ]+\))", text))


def _positions(case: Case) -> list[str]:
    """How the simulator names each device: its mesh position, ``(1,)`` or ``(0, 1)``."""
    return [str(tuple(int(i) for i in p)) for p in np.ndindex(*case.mesh)]


def _params(cases: list[Case], known: dict[str, str]) -> list:
    """The cases, those in ``known`` as strict xfails with its reason."""
    xfail = {name: pytest.mark.xfail(strict=True, reason=why) for name, why in known.items()}
    return [
        pytest.param(c, marks=[xfail[c.name]] if c.name in xfail else [], id=c.name) for c in cases
    ]


@pytest.mark.parametrize("case", _params(list(CASES), NOT_YET))
def test_minipallas_gives_the_reference_or_names_the_planted_bug(verdicts, case):
    runs = verdicts[case.name]["minipallas"]
    assert len(runs) == 2
    for v in runs:
        if case.expect == "wrong-count":  # no error kind of its own yet: one about a semaphore
            assert v["kind"] == "error" and "semaphore" in v["text"], v
            continue
        if case.expect == "race" and v["kind"] == "ok":
            continue  # a schedule that ran the racing accesses apart: its values are right
        assert v["kind"] == case.expect, v
        if case.expect == "race":  # both accesses' lines, and the device(s) that made them
            assert _programs(v["text"]) and v["text"].count(".py:") >= 2, v["text"]
        if case.expect == "deadlock":  # every blocked device
            assert all(p in v["text"] for p in _positions(case)), v["text"]
    if case.expect == "race":
        assert any(v["kind"] == "race" for v in runs), runs


@pytest.mark.parametrize("case", _params(CORRECT, NOT_COMPILED))
def test_on_devices_compiles_each_data_independent_kernel_to_the_reference(verdicts, case):
    got = verdicts[case.name]["compiled"]
    assert got["kind"] == ("ok" if case.compilable else "refused"), got


def test_the_corpus_holds_what_issue_47_asks():
    own = [c for c in CASES if c.source.startswith("own:")]
    assert len(own) >= 10
    assert {c.expect for c in CASES} == {"ok", "race", "deadlock", "wrong-count"}
    assert {len(c.mesh) for c in CASES} == {1, 2} and {4, 8} <= {c.devices for c in CASES}
    assert sum(c.source.startswith("upstream") for c in CASES) >= 15
    assert len(BY_NAME) == len(CASES)
