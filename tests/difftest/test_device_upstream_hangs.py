"""``upstream-hangs`` end to end (issue 47 item 4): a correct kernel that spans devices on which
upstream's TPU interpret mode never finishes, run by ``minipallas-difftest`` with its time box.

The kernel (the device corpus's ``local_kernel_by_position``) talks to no other device and runs
in a loop of the ``shard_map`` body as many times as the device's position. Upstream's TPU
interpret mode puts a barrier over every device before each kernel without a ``collective_id``,
which the devices reach 0, 1, 2 and 3 times: it waits forever (checked here, in the worker the
difftest kills after its time box). minipallas's simulator, under three schedules, and
``on_devices`` give numpy's result, so the finding is upstream's hang, not a deadlock of the
kernel. The corpus's file builds meshes of 8 devices, so the difftest is given 8.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

CASES = Path(__file__).with_name("device_corpus_cases.py")
SECONDS = 5


def test_a_kernel_upstreams_interpret_mode_never_finishes_is_upstream_hangs():
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    run = subprocess.run(
        [sys.executable, "-m", "minipallas.tools.difftest.cli", "--devices", "8",
         "--upstream-seconds", str(SECONDS), str(CASES), "-k", "local_kernel_by_position"],
        capture_output=True, text=True, timeout=300, env={**env, "JAX_PLATFORMS": "cpu"},
        check=False,
    )  # fmt: skip
    assert run.returncode == 0, (run.stdout, run.stderr[-3000:])  # the finding it expects
    row = re.search(r"local_kernel_by_position +upstream-hangs +yes +- +(\d+) .*", run.stdout)
    assert row, run.stdout
    timings = row.group(0).split()[4:]  # interpret, discharge, compile, schedules, on-devices
    assert timings[0].isdigit() and timings[3].isdigit() and timings[5].isdigit(), row.group(0)
    assert "1 cases, 0 not as expected" in run.stdout
