"""Shared by the tests of kernels that span devices (issue 47). jax sees several CPU devices only
when ``XLA_FLAGS`` says so before it starts, so a test module runs its cases script in a process
of its own (``run_cases``) and reads one JSON line per verdict; the scripts build their
``jax.shard_map`` of a whole-shard ``pallas_call`` with ``on_mesh`` and share the plain kernels
here.
"""

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P

import minipallas as mp

MESH, LOGICAL = pl.DeviceIdType.MESH, pl.DeviceIdType.LOGICAL
DMA = pltpu.SemaphoreType.DMA


TESTS = Path(__file__).parent


def run_cases(script: Path, *args: str, devices: int = 4) -> list[dict]:
    """The JSON lines ``python script args...`` prints, run with ``tests/`` on its path on
    ``devices`` CPU devices (set here: jax reads ``XLA_FLAGS`` as it starts); fails with its
    stderr's tail."""
    # the checkout first: its packages, not tests/' folders of the same names (tests/minipallas)
    path = [str(TESTS.parent), str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": os.pathsep.join(path),
           "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}  # fmt: skip
    run = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True,
                         timeout=300, env=env, check=False)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]


def line_of(script: Path, source: str) -> int:
    """The first line of ``script`` that holds ``source`` (a case's marked line)."""
    lines = script.read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if source in line)


@functools.cache
def verdicts_of(script: Path) -> dict[str, list[dict]]:
    """``by_case(run_cases(script))``, run once per test process for the files that read the
    same script's verdicts."""
    return by_case(run_cases(script))


def by_case(lines: list[dict]) -> dict[str, list[dict]]:
    """The verdicts of each case, in the order printed (one per schedule)."""
    out: dict[str, list[dict]] = {}
    for v in lines:
        out.setdefault(v["case"], []).append(v)
    return out


def print_verdicts(cases, judge) -> None:
    """Runs each ``(name, schedules, case)`` under each schedule and prints one JSON line:
    ``judge(*case(schedule))``'s fields (``case`` gives what it got and what it wants), or the
    kind and text of the ``MiniPallasError`` it raised."""
    for name, schedules, case in cases:
        for schedule in schedules:
            try:
                verdict = judge(*case(schedule))
            except mp.MiniPallasError as e:
                verdict = {"error": type(e).__name__, "text": str(e)}
            print(json.dumps({"case": name, "schedule": schedule, **verdict}), flush=True)


def whole_call(kernel, shard_out=(8, 128), scratch=(DMA, DMA), *, space=pl.ANY,
               collective_id=None, varying=(), grid=(), interpret=False):  # fmt: skip
    """A ``pallas_call`` of ``kernel`` over whole shards in ``space``. Under ``check_vma=True``
    upstream asks how the result varies: along the mesh axes ``varying``."""
    vma = jax.sharding.ManualAxisType(varying=frozenset(varying)) if varying else None
    params = None if collective_id is None else pltpu.CompilerParams(collective_id=collective_id)
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(shard_out, jnp.float32, manual_axis_type=vma),
        in_specs=[pl.BlockSpec(memory_space=space)],
        out_specs=pl.BlockSpec(memory_space=space),
        scratch_shapes=list(scratch),
        compiler_params=params,
        grid=grid,
        interpret=pltpu.InterpretParams() if interpret else False,
    )


def mesh_of(shape=None, names=("x",)) -> jax.sharding.Mesh:
    """The first devices (all of them by default) as a mesh of ``shape`` along ``names``."""
    shape = (len(jax.devices()),) if shape is None else shape
    devices = np.array(jax.devices()[: int(np.prod(shape))]).reshape(shape)
    return jax.sharding.Mesh(devices, names)


def on_mesh(kernel, shard_out=(8, 128), scratch=(DMA, DMA), *, mesh=None, spec=None,
            check_vma=False, body=None, **call):  # fmt: skip
    """``jax.shard_map`` over ``mesh`` (default ``mesh_of()``) of ``whole_call(kernel, ...)``, or
    of ``body(call)``: the call with ops around it; split along the first axis (``spec``)."""
    mesh = mesh_of() if mesh is None else mesh
    varying = mesh.axis_names if check_vma else ()
    c = whole_call(kernel, shard_out, scratch, varying=varying, **call)
    spec = P(mesh.axis_names[0]) if spec is None else spec
    return jax.shard_map(c if body is None else body(c), mesh=mesh, in_specs=spec,
                         out_specs=spec, check_vma=check_vma)  # fmt: skip


def remote_copy(src, dst, send_sem, recv_sem, to, id_type=MESH):
    return pltpu.make_async_remote_copy(src, dst, send_sem, recv_sem, device_id=to,
                                        device_id_type=id_type)  # fmt: skip


def right_permute(n: int):
    """Upstream's guide: each of ``n`` devices sends its shard to its right neighbour."""

    def kernel(x_ref, o_ref, send_sem, recv_sem):
        copy = remote_copy(x_ref, o_ref, send_sem, recv_sem, (lax.rem(lax.axis_index("x") + 1, n),))
        copy.start()
        copy.wait()

    return kernel


def shift_two_logical(n: int):
    """A shift by two with LOGICAL ids, behind a barrier-semaphore handshake."""

    def kernel(x_ref, o_ref, send_sem, recv_sem):
        me = lax.axis_index("x")
        to, frm = lax.rem(me + 2, n), lax.rem(me + n - 2, n)
        barrier = pltpu.get_barrier_semaphore()
        pl.semaphore_signal(barrier, 1, device_id=to, device_id_type=LOGICAL)
        pl.semaphore_signal(barrier, 1, device_id=frm, device_id_type=LOGICAL)
        pl.semaphore_wait(barrier, 2)
        copy = remote_copy(x_ref, o_ref, send_sem, recv_sem, to, LOGICAL)
        copy.start()
        copy.wait()

    return kernel


def permute_along_y(x_ref, o_ref, send_sem, recv_sem):
    """A (2, 2) mesh: each device sends to its neighbour along "y" (a dict device_id)."""
    copy = remote_copy(x_ref, o_ref, send_sem, recv_sem, {"y": 1 - lax.axis_index("y")})
    copy.start()
    copy.wait()
