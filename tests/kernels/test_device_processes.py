"""A kernel that spans devices, compiled (``mp.on_devices``), across two processes (issue 47):
two processes on this machine join jax's distributed runtime
(``jax.distributed.initialize``, a coordinator on a free local port), 2 CPU devices each, with
JAX's CPU collectives over gloo, and run compiled kernels over the 4 global devices (a ring
all-reduce and all-gather: collective-permutes; an all-to-all and lax collectives around a
kernel: all-gathers); each process checks the shards it holds against numpy, bit for bit
(``device_process_worker.py``). A process that hangs is killed at its timeout, which fails the
test.
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

WORKER = Path(__file__).with_name("device_process_worker.py")
TIMEOUT_S = 120


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def test_a_compiled_ring_kernel_runs_across_two_processes_with_numpys_bits():
    port = str(_free_port())
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}  # the worker imports the cases beside it
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(i), port],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )  # fmt: skip
        for i in range(2)
    ]
    outputs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=TIMEOUT_S)
            assert p.returncode == 0, err[-3000:]
            outputs.append(out)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    shards = [json.loads(line) for out in outputs for line in out.splitlines()
              if line.startswith("{")]  # fmt: skip
    for case in ("ring_all_reduce", "ring_all_gather", "all_to_all", "lax_around"):
        mine = [s for s in shards if s["case"] == case]
        assert sorted((s["process"], s["device"]) for s in mine) == [
            (0, 0),
            (0, 1),
            (1, 2048),
            (1, 2049),
        ], mine  # each process holds its own two devices' shards
        assert all(s["ok"] for s in mine), mine
