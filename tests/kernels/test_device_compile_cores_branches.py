"""Kernels that span devices the compiler used to refuse (issue 47), compiled with
``jax.jit(mp.on_devices(f))`` on 4 and 8 CPU devices with the simulator's bits and numpy's
result (``device_cores_branches_cases.py``, a process of its own per device count):

- mesh kernels of cores inside the shard_map: each device's cores run in turn
  (``kernels/devices/cores.py``), their remote copies still ``collective-permute``s;
- remote copies under a condition that may differ by device whose branches also read or write
  memory: the copy leaves its branch as every device's collective, the rest stays under the
  condition (``kernels/devices/masked.py``).

What is not sound to compile so is still refused, with the reason, and runs in the simulator.
"""

from pathlib import Path

import pytest
from device_cases import run_cases

from minipallas.ir.errors import MiniPallasError
from minipallas.ir.parser import parse_module
from minipallas.ir.verifier import verify
from minipallas.kernels.devices import device_program

CASES = Path(__file__).with_name("device_cores_branches_cases.py")
CORES = ["core_rows_right", "core_ring_gather", "core_meeting_swap", "around_core_kernel"]
BRANCHES = ["cond_neighbours", "zero_broadcasts", "pick_source"]
REFUSED = {  # case -> what the refusal says (besides the line and the simulator as the fix)
    "core_handoff": "a semaphore another core signals, inside a loop or branch",
    "core_to_other_core": "signals a semaphore of another core of the target device",
    "writes_after_start": "reads or writes memory after a remote copy's start",
    "loop_in_branch": "on the device's position inside a loop or region of its branch",
    "data_picks_target": "copies to a device or window that a condition picks",
}


@pytest.fixture(scope="module", params=[4, 8], ids=["4-devices", "8-devices"])
def verdicts(request) -> dict:
    out = {}
    for v in run_cases(CASES, str(request.param), devices=request.param):
        assert v["devices"] == request.param
        out[v["case"]] = v
    return out


@pytest.mark.parametrize("case", [*CORES, *BRANCHES])
def test_compiled_with_the_simulators_bits_and_numpys_result(verdicts, case):
    v = verdicts[case]
    assert v.get("simulated_numpy") is True, v
    assert v["same_bits"] and v["numpy"] and v["differing"] == 0, v
    assert v["permute"] and not v["all_gather"] and v["partitions"], v
    assert v["verified"], v  # the device's program passes the verifier


def test_no_loop_over_cores_or_devices(verdicts):
    """The cores are unrolled in each device's program: only the ring's own loop remains, one
    per core."""
    assert {c: verdicts[c]["loops"] for c in CORES} == {
        "core_rows_right": 0,
        "core_ring_gather": 2,
        "core_meeting_swap": 0,
        "around_core_kernel": 0,
    }
    assert all(verdicts[c]["loops"] == 0 for c in BRANCHES)


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_what_is_not_sound_is_refused_with_why_and_simulated(verdicts, case):
    v = verdicts[case]
    assert v.get("simulated_numpy") is True, v  # the simulator runs it, numpy's result
    assert v.get("error") == "MiniPallasError", v
    assert REFUSED[case] in v["text"], v["text"]
    assert "device_cores_branches_cases.py:" in v["text"] and "collectives='simulate'" in v["text"]


# A device program over ("x", "core") as the importer gives it (rows per device, per core): each
# core signals the other core's semaphore, then waits on its own; ``{WAIT}`` where it waits.
MEETING = """func @k(%0: Ref{{f32[2,8]}}) -> () {{
  run_scoped(%0) collective_axes ("x", "core") {{
  ^(%1: Ref{{i32[2,2], semaphore}}, %2: Ref{{f32[2,8]}}):
    %3 = program_id axis 0 : i32[]
    %4 = program_id axis 1 : i32[]
    %5 = constant 1 : i32[]
    %6 = sub %5, %4 : i32[]
    %7 = ref.at %1[%3, %6] : Ref{{i32[], semaphore}}
    %8 = ref.at %1[%3, %4] : Ref{{i32[], semaphore}}
    {WAIT}
    semaphore_signal %7[], %5
    {AFTER}
    yield
  }}
  return
}}"""


def _meeting(wait: str, after: str):
    (fn,) = parse_module(MEETING.format(WAIT=wait, AFTER=after)).functions
    return device_program(fn, ("x", "core"), (2, 2), devices=1)


def test_cores_meeting_by_semaphores_run_in_turn_split_at_the_wait():
    program = _meeting("", "semaphore_wait %8[], %5")
    verify(program)
    text = str(program)
    assert (
        "semaphore_wait" in text and "program_id" not in text and 'axis_index ("core")' not in text
    )
    # both cores signal before either waits: the phases are (signal, signal), (wait, wait)
    ops = [line.split()[0] for line in text.splitlines() if line.strip().startswith("semaphore")]
    assert ops == ["semaphore_signal"] * 2 + ["semaphore_wait"] * 2, ops


def test_a_wait_before_the_other_cores_signal_is_refused_naming_it():
    with pytest.raises(MiniPallasError, match="for signals another core sends after it") as e:
        _meeting("semaphore_wait %8[], %5", "")
    assert e.value.op == "semaphore_wait" and "collectives='simulate'" in e.value.fix


def test_a_core_barrier_inside_a_loop_is_refused():
    loop = 'for %3 to %5 () {\n    ^(%9: i32[]):\n      barrier ("core")\n      yield\n    }'
    with pytest.raises(MiniPallasError, match="barrier of cores.*inside a loop or branch"):
        _meeting(loop, "semaphore_wait %8[], %5")
