"""The verdicts of ``tests/kernels/device_wait_cases.py`` (kernels run in a process of their own
with 4 CPU devices), run once for the test files that read them."""

from pathlib import Path

import pytest
from device_cases import by_case, run_cases

WAIT_CASES = Path(__file__).parents[2] / "kernels" / "device_wait_cases.py"


@pytest.fixture(scope="session")
def wait_verdicts() -> dict:
    return by_case(run_cases(WAIT_CASES))
