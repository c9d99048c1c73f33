"""What ``semaphore_read`` of a DMA semaphore gives (issue 47), against what upstream does:

- upstream's ``interpret=True`` counts a copy's elements (its ``test_interpret_local_dma``: the
  read between start and wait is the copy's size), and the interpreter alone does too
  (``tests/kernels/test_dma_kernels.py``'s ``SEM_COUNT`` compares them bit for bit);
- upstream's TPU interpret mode counts bytes in its semaphores but has no rule for
  ``semaphore_read`` at all (checked here, so the day it gets one this test says so);
- on the chip the count grows as a copy's pieces land: only the 0 after the waits is defined
  (upstream's ``test_can_read_dma_semaphore`` reads it after the wait).

So a read of a DMA semaphore holding a count is an ``InterpretError`` wherever minipallas checks
what the chip leaves undefined (``checks=True``, the simulator of kernels that span devices),
and after the waits every way gives 0. The device kernels run in a process of their own with
4 CPU devices (``tests/kernels/device_wait_cases.py``).
"""

from pathlib import Path

import numpy as np
import pytest
from device_cases import verdicts_of

import minipallas as mp

CASES = Path(__file__).parents[2] / "kernels" / "device_wait_cases.py"


@pytest.fixture(scope="module")
def verdicts() -> dict:
    return verdicts_of(CASES)


# a copy of 2x8 elements, its DMA semaphore read between its start and its wait, then after
SIGNATURE = (
    "func @copy(%0: Ref{f32[4,8]}, %1: Ref{f32[2,8], tpu.vmem}, %2: Ref{i32[], dma_semaphore}) "
    "-> (i32[], i32[]) effects {read 0, write 1, read 2, accum 2} {"
)
TEXT = (
    SIGNATURE
    + """
  %3 = ref.at %0[1:3, :] : Ref{f32[2,8]}
  dma_start %3, %1, %2
  %4 = semaphore_read %2[] : i32[]
  dma_wait %3, %1, %2
  %5 = semaphore_read %2[] : i32[]
  return %4, %5
}"""
)


def _args():
    return (
        np.arange(32, dtype=np.float32).reshape(4, 8),
        np.zeros((2, 8), np.float32),
        np.zeros((), np.int32),
    )


def test_alone_the_read_in_flight_counts_elements_as_upstreams_interpret_true():
    during, after = mp.interpret(mp.parse(TEXT), *_args())
    assert (int(during), int(after)) == (16, 0)


def test_under_checks_the_read_in_flight_is_an_error_at_its_line():
    with pytest.raises(mp.InterpretError) as e:
        mp.interpret(mp.parse(TEXT), *_args(), checks=True)
    assert e.value.op == "semaphore_read" and e.value.loc.line == 4
    assert "holds 16 (elements of copies not yet waited for)" in str(e.value)
    assert "only after the waits" in e.value.fix


def test_among_devices_the_read_after_the_waits_is_0_under_every_schedule(verdicts):
    runs = verdicts["semaphore_read_after_waits"]
    assert len(runs) == 3 and all(v.get("ok") is True for v in runs), runs


def test_among_devices_the_read_in_flight_is_an_error_naming_its_bytes(verdicts):
    line = next(
        i
        for i, text in enumerate(CASES.read_text().splitlines(), 1)
        if "# the read in flight" in text
    )
    for v in verdicts["semaphore_read_in_flight"]:
        assert v["error"] == "InterpretError", v
        assert f"device_wait_cases.py:{line}: 'semaphore_read'" in v["text"]
        assert "holds 1024 (bytes of copies not yet waited for)" in v["text"]


def test_upstreams_tpu_interpret_mode_has_no_rule_for_semaphore_read(verdicts):
    (run,) = verdicts["semaphore_read_upstream"]
    assert run["raised"].startswith("NotImplementedError: MLIR translation rule for primitive "
                                    "'semaphore_read' not found"), run  # fmt: skip


def test_on_devices_refuses_a_read_of_a_semaphore_copies_count_on(verdicts):
    """The compiled program lands copies as collectives and drops their counts, so a read of
    a copy's semaphore would not be the kernel's (it gave -1024 after the waits): refused,
    with the simulator as the fix."""
    (run,) = verdicts["semaphore_read_compiled"]
    assert run["raised"].startswith("MiniPallasError"), run
    assert "semaphore_read" in run["raised"] and "copies or other devices count on" in run["raised"]
