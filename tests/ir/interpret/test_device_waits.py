"""Waits of dynamic size (issue 47): ``copy.wait_recv()`` on a descriptor over
``pl.ds(0, k * n)`` with ``n`` known only at run time, as upstream's race-detection test waits for
every copy a device receives at once. They import as a loop of waits for one piece each
(``interop/importer/rules/dma.py``); the simulator then gives numpy's and upstream's values, names a
wait for one piece too many as a deadlock of every device, and one piece too few as a copy never
waited for. The kernels run in a process of their own with 4 CPU devices
(``tests/kernels/device_wait_cases.py``).
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


def test_one_wait_for_every_arrival_gives_numpys_values_under_every_schedule(verdicts):
    runs = verdicts["all_to_all_one_wait"]
    assert len(runs) == 3 and all(v.get("ok") is True for v in runs), runs


def test_upstreams_tpu_interpret_mode_gives_the_same_values(verdicts):
    (run,) = verdicts["all_to_all_one_wait_upstream"]
    assert run.get("ok") is True, run


def test_on_devices_compiles_it_to_the_same_values(verdicts):
    """Its size comes from the device's position alone: no data decides the communication."""
    (run,) = verdicts["all_to_all_one_wait_compiled"]
    assert run.get("ok") is True, run


def test_a_wait_for_one_piece_too_many_is_a_deadlock_naming_every_device(verdicts):
    line = _line_of("# the dynamic wait")
    for v in verdicts["wait_one_piece_too_many"]:
        assert v["error"] == "DeadlockError", v
        assert {"(0,)", "(1,)", "(2,)", "(3,)"} <= set(re.findall(r"\(\d,\)", v["text"]))
        assert f"device_wait_cases.py:{line}" in v["text"]


def test_a_wait_for_one_piece_too_few_leaves_a_copy_never_waited_for(verdicts):
    line = _line_of("copy.start()")
    for v in verdicts["wait_one_piece_too_few"]:
        assert v["error"] == "InterpretError", v
        assert "never waited for" in v["text"] and f"device_wait_cases.py:{line}" in v["text"]


def test_a_local_wait_of_dynamic_size_counts_elements_alone_and_matches_upstream(verdicts):
    alone, upstream = verdicts["local_wait_of_8_rows"]
    assert alone.get("ok") is True and upstream.get("ok") is True, (alone, upstream)


def test_a_local_wait_for_half_leaves_the_other_copy_in_flight_under_checks(verdicts):
    alone, _ = verdicts["local_wait_of_4_rows"]  # upstream's result is undefined there
    assert alone["error"] == "InterpretError", alone
    assert "still in flight" in alone["text"], alone


def test_the_wait_imports_as_a_loop_of_one_piece_waits_that_prints_back(verdicts):
    (v,) = verdicts["imported_text"]
    assert v["roundtrip"] is True
    loop = re.search(r"for %\d+ to %\d+ \((%\d+), \1, %\d+\) \{\n.*\n\s+dma_wait ", v["text"])
    assert loop, v["text"]
    assert re.search(r"ref\.at %\d+\[0:1, :\] : Ref\{f32\[1,128\]\}", v["text"])


def test_a_wait_on_a_descriptor_whose_windows_differ_in_size_is_refused(verdicts):
    """Upstream's TPU interpret mode counts such a wait by its source (one copy's rows here:
    it returns NaNs where the other copies never land), minipallas by its destination."""
    (v,) = verdicts["wait_descriptor_of_two_sizes"]
    assert v["error"] == "JaxprImportError", v
    assert (
        "'dma_wait': waits on a descriptor whose windows differ in size (1024 and 512" in v["text"]
    )
