"""A semaphore one kernel returns and the next signals and waits on (upstream's
``test_no_barrier_semaphore``; upstream compiles it for the chip, and both its interpret modes
fail on it): allocated around the device's program with a row per device, its count lives
across the two kernels, so a wrong count is named as in one kernel. The kernels run in a
process of their own with 4 CPU devices (``tests/kernels/device_wait_cases.py``).
"""

import re
from pathlib import Path

import pytest
from device_cases import line_of, verdicts_of

CASES = Path(__file__).parents[2] / "kernels" / "device_wait_cases.py"


@pytest.fixture(scope="module")
def verdicts() -> dict:
    return verdicts_of(CASES)


def _line_of(source: str) -> int:
    return line_of(CASES, source)


def test_the_right_count_gives_numpys_values_under_every_schedule(verdicts):
    runs = verdicts["semaphore_between_kernels_right_count"]
    assert len(runs) == 3 and all(v.get("ok") is True for v in runs), runs


def test_one_wait_too_many_is_a_deadlock_of_every_device_at_the_wait(verdicts):
    line = _line_of("# the wait on the semaphore made before")
    for v in verdicts["semaphore_between_kernels_one_wait_too_many"]:
        assert v["error"] == "DeadlockError", v
        assert {"(0,)", "(1,)", "(2,)", "(3,)"} <= set(re.findall(r"\(\d,\)", v["text"]))
        assert f"device_wait_cases.py:{line}: 'semaphore_wait'" in v["text"]
        assert "waits for 5 on a semaphore that holds 4" in v["text"]


def test_a_count_left_over_is_named_at_the_last_signal(verdicts):
    for v in verdicts["semaphore_between_kernels_left_over"]:
        assert v["error"] == "InterpretError", v
        assert "holds 1 when every program has finished" in v["text"]
        assert "'semaphore_signal'" in v["text"]
