"""What the simulator names in kernels that span devices (issue 47, item 2): a write to a copy's
source before its send wait, two copies on one receive semaphore where a wait may be satisfied
by the wrong one, waits that count bytes as upstream's TPU interpret mode does, deadlocks where
some devices finished, and results that depend on the schedule with nothing named.

The kernels are upstream Pallas in ``jax.shard_map`` over 4 CPU devices, which jax sees only
when ``XLA_FLAGS`` says so before it starts: they run in a process of their own
(``tests/kernels/device_race_cases.py``), once for the module, each printing a JSON verdict.
"""

import re
from pathlib import Path

import numpy as np
import pytest
from device_cases import by_case, line_of, run_cases

import minipallas as mp

CASES = Path(__file__).parents[2] / "kernels" / "device_race_cases.py"
LINE = re.compile(r"device_race_cases\.py:(\d+)")


@pytest.fixture(scope="module")
def verdicts() -> dict:
    return by_case(run_cases(CASES))


def _programs(text: str) -> set[str]:
    return set(re.findall(r"program (\(\d,\))", text))


def _line_of(source: str) -> int:
    """The line of ``device_race_cases.py`` that holds ``source``."""
    return line_of(CASES, source)


def test_a_write_to_a_source_before_its_send_wait_names_the_copy_the_write_and_both_devices(
    verdicts,
):
    runs = verdicts["write_source_before_send_wait"]
    assert len(runs) == 3
    start, write = _line_of("# item 1: the copy"), _line_of("# the race: before wait_send")
    for v in runs:
        assert v["error"] == "RaceError", v
        sender, target = re.search(r"program (\(\d,\)) started at .* to program (\(\d,\))",
                                   v["text"]).groups()  # fmt: skip
        assert int(target[1]) == (int(sender[1]) + 1) % 4  # its right neighbour
        assert {int(n) for n in LINE.findall(v["text"])} == {start, write}
        assert "writes" in v["text"] and "the source" in v["text"] and "wait_send" in v["text"]


def test_reading_a_source_before_its_send_wait_is_fine_under_every_schedule(verdicts):
    """The send side holds the source for writes only, even where the target's receive wait
    ran between the copy's start and its send side's."""
    runs = verdicts["read_source_before_send_wait"]
    assert len(runs) == 5 and all(v.get("ok") is True for v in runs), runs


def test_a_dma_semaphore_counts_bytes_as_upstream_interpret_mode_does(verdicts):
    """A receive wait written with a bf16[16, 128] descriptor (2048 elements, 4096 bytes) after
    an f32[8, 128] copy (1024 elements, 4096 bytes): by bytes it is satisfied, by elements it
    would deadlock. Upstream's TPU interpret mode gives the same result."""
    for v in verdicts["wait_with_another_dtype"] + verdicts["wait_with_another_dtype_upstream"]:
        assert v.get("ok") is True, v


def test_a_wait_two_copies_on_one_receive_semaphore_may_satisfy_is_a_race_naming_both(verdicts):
    runs = verdicts["two_copies_one_receive_semaphore"]
    assert len(runs) == 3
    marks = ["to_right.start()", "to_left.start()", "# meant for the copy", "# the race when both"]
    lines = {_line_of(m) for m in marks}
    for v in runs:
        assert v["error"] == "RaceError", v
        reader = int(re.search(r"program \((\d),\) reads", v["text"]).group(1))
        starters = {int(d) for d in re.findall(r"copy program \((\d),\) started", v["text"])}
        assert starters == {(reader - 1) % 4, (reader + 1) % 4}  # both neighbours' copies
        assert {int(n) for n in LINE.findall(v["text"])} == lines
        assert "took 4096 from its semaphore while 8192 were in flight" in v["text"]


def test_the_same_kernel_with_a_receive_semaphore_per_copy_gives_numpys_result(verdicts):
    runs = verdicts["two_copies_two_receive_semaphores"]
    assert len(runs) == 3 and all(v.get("ok") is True for v in runs), runs


def test_a_ring_all_gather_on_one_receive_semaphore_races_under_every_schedule(verdicts):
    """The left neighbour's next copy may land first and satisfy the wait (upstream's TPU
    interpret mode gives NaNs here, run to run). Seeds that let the sender run a step ahead find
    both copies in flight at the wait; lockstep, where it does not, finds the next copy started
    with nothing ordering it after the wait. A semaphore per step gives numpy's result under
    every schedule, and upstream's interpret mode agrees."""
    runs = verdicts["ring_all_gather_one_receive_semaphore"]
    copy, wait = _line_of("# the ring's copy"), _line_of("# the ring's wait")
    assert len(runs) == 3
    for v in runs:
        assert v["error"] == "RaceError", v
        reader = int(re.search(r"program \((\d),\) reads", v["text"]).group(1))
        assert {int(d) for d in re.findall(r"copy program \((\d),\) started", v["text"])} == {
            (reader - 1) % 4
        }
        assert {int(n) for n in LINE.findall(v["text"])} == {copy, wait}
    assert "could have arrived first and satisfied it" in runs[0]["text"]  # lockstep: predicted
    for v in verdicts["ring_all_gather_per_step"] + verdicts["ring_all_gather_per_step_upstream"]:
        assert v.get("ok") is True, v


def test_a_deadlock_where_some_devices_finished_names_every_blocked_device_and_its_wait(
    verdicts,
):
    wait = _line_of("# the even ones wait forever")
    for v in verdicts["odd_ones_receive"]:
        assert v["error"] == "DeadlockError", v
        text = v["text"]
        assert "program (0,) waits for 4096 bytes" in text
        assert f"(2,) waits at dma_wait at {CASES}:{wait} for 4096 bytes" in text
        assert "(1,) finished" in text and "(3,) finished" in text


def test_a_wait_no_device_ever_signals_is_a_deadlock_naming_it(verdicts):
    wait = _line_of("pl.semaphore_wait(sem, 1)")
    for v in verdicts["never_signalled"]:
        assert v["error"] == "DeadlockError", v
        assert v["text"].startswith(f"{CASES}:{wait}: 'semaphore_wait': deadlock: program (2,)")
        assert all(f"({d},) finished" in v["text"] for d in (0, 1, 3))


def test_a_copy_the_kernel_ends_with_in_flight_is_an_error_at_its_start(verdicts):
    start = _line_of("# never received")
    for v in verdicts["receive_never_waited"]:
        assert v["error"] == "InterpretError", v
        assert v["text"].startswith(f"{CASES}:{start}: 'dma_start': program (")
        sender, target = re.search(r"program \((\d),\) starts .* into program \((\d),\)'s row",
                                   v["text"]).groups()  # fmt: skip
        assert int(target) == (int(sender) + 1) % 4 and "never waited for" in v["text"]
        assert "copy.wait_recv()" in v["text"]


def test_a_semaphore_left_above_zero_when_every_device_finished_is_an_error(verdicts):
    signal = _line_of("# the extra one")
    for v in verdicts["token_left_over"]:
        assert v["error"] == "InterpretError", v
        assert v["text"].startswith(f"{CASES}:{signal}: 'semaphore_signal': the semaphore at [1]")
        assert "holds 1 when every program has finished" in v["text"]
        assert "by program (0,)" in v["text"]


def test_results_that_depend_on_the_schedule_are_named_with_two_schedules_and_an_element(
    verdicts,
):
    (v,) = verdicts["arrivals_counted"]
    assert v["error"] == "ScheduleDependentError", v
    a, b, where = re.search(r"schedules (\d) and (\d) differ at (result 0, element \[0, 0\])",
                            v["text"]).groups()  # fmt: skip
    assert a != b and "no race or deadlock named" in v["text"]
    (same,) = verdicts["arrivals_counted_one_schedule"]  # one schedule twice: the same bits
    assert "error" not in same, same


def test_a_list_of_schedules_returns_the_common_results_and_writes_the_refs():
    fn = mp.parse(
        "func @f(%0: Ref{f32[4]}) -> (f32[4]) {\n"
        "  %1 = get %0[:] : f32[4]\n"
        "  %2 = add %1, %1 : f32[4]\n"
        "  %3 = swap %0[:], %2 : f32[4]\n"
        "  return %2\n"
        "}"
    )
    x = np.arange(4, dtype=np.float32)
    (out,) = mp.interpret(fn, x, schedule=["lockstep", 0, 1])
    assert out.tolist() == [0, 2, 4, 6] and x.tolist() == [0, 2, 4, 6]  # written once


@pytest.mark.parametrize("schedule", [[], ["steps"], [True], {"a": 1}])
def test_a_bad_list_of_schedules_is_refused_with_a_fix(schedule):
    fn = mp.parse("func @f(%0: f32[4]) -> (f32[4]) {\n  return %0\n}")
    with pytest.raises(mp.InterpretError, match="schedule must be") as e:
        mp.interpret(fn, np.zeros(4, np.float32), schedule=schedule)
    assert "schedule=['lockstep', 0, 1, 2]" in e.value.fix
