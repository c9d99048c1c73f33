"""Kernels that span devices (issue 47): a ``jax.shard_map`` over 4 CPU devices whose body is a
``pallas_call`` with remote copies, remote signals and the barrier semaphore, imported
(``interop/importer/devices.py``) and run with ``collectives="simulate"`` under three schedules.

jax sees several CPU devices only when ``XLA_FLAGS`` says so before it starts, so the kernels
(``device_mesh_cases.py``) run in a process of their own, once for the module; each case prints
its verdict as a JSON line.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P

from minipallas.interop.importer import JaxprImportError, from_jaxpr

CASES = Path(__file__).with_name("device_mesh_cases.py")


@pytest.fixture(scope="module")
def verdicts() -> dict:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    run = subprocess.run([sys.executable, str(CASES)], capture_output=True, text=True,
                         timeout=300, env=env, check=False)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    out: dict = {}
    for line in run.stdout.splitlines():
        if line.startswith("{"):
            v = json.loads(line)
            out.setdefault(v["case"], []).append(v)
    return out


@pytest.mark.parametrize(
    "case",
    [
        "right_permute",
        "right_permute_check_vma",
        "shift_two_logical",
        "ring_all_gather",
        "permute_along_y",
    ],
)
def test_correct_kernels_give_numpys_result_under_every_schedule(verdicts, case):
    runs = verdicts[case]
    assert len(runs) == 3
    for v in runs:
        assert v.get("ok") is True, v


def _programs(text: str) -> set[str]:
    return set(re.findall(r"program (\(\d+,\))", text))


def test_a_read_of_a_destination_before_its_receive_wait_is_a_race_naming_both_devices(
    verdicts,
):
    for v in verdicts["all_gather_without_wait_recv"]:
        assert v["error"] == "RaceError", v
        assert len(_programs(v["text"])) == 2, v["text"]
        assert v["text"].count("device_mesh_cases.py:") == 2  # both accesses' lines
        assert "reads" in v["text"] and "writes" in v["text"]


def test_overlapping_remote_writes_are_a_race(verdicts):
    for v in verdicts["all_to_device_zero"]:
        assert v["error"] == "RaceError", v
        assert "(0,)" in v["text"] and len(_programs(v["text"])) == 2


def test_a_token_ring_that_waits_first_is_a_deadlock_naming_every_device(verdicts):
    for v in verdicts["token_ring"]:
        assert v["error"] == "DeadlockError", v
        assert _programs(v["text"]) == {"(0,)"}  # the reporter; the others listed after
        for d in range(4):
            assert f"({d},)" in v["text"]
        assert v["text"].count("semaphore_wait at") == 3


def _kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def test_a_shard_map_over_devices_with_ops_around_its_kernel_is_refused_with_a_fix():
    mesh = jax.sharding.AbstractMesh((2,), ("x",))
    call = pl.pallas_call(_kernel, out_shape=jax.ShapeDtypeStruct((8, 128), np.float32))
    f = jax.shard_map(lambda x: call(x) * 2.0, mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                      check_vma=False)  # fmt: skip
    with pytest.raises(JaxprImportError, match="whose body is one pallas_call") as e:
        from_jaxpr(jax.make_jaxpr(f)(np.zeros((16, 128), np.float32)))
    assert e.value.fix and "test_device_mesh.py" in str(e.value)


def test_a_barrier_semaphore_outside_a_kernel_that_spans_devices_is_refused():
    def kernel(x_ref, o_ref):
        pl.semaphore_signal(pltpu.get_barrier_semaphore(), 1)
        o_ref[...] = x_ref[...]

    call = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), np.float32))
    with pytest.raises(JaxprImportError, match="get_barrier_semaphore") as e:
        from_jaxpr(jax.make_jaxpr(call)(np.zeros((8, 128), np.float32)))
    assert "shard_map" in e.value.fix
