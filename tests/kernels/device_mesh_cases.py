"""Kernels that span devices (issue 47), run by ``test_device_mesh.py`` in a process of its own:
jax must see several CPU devices (``--xla_force_host_platform_device_count``), set before it
starts. Each case prints one JSON line: its name, and ``ok`` or the error's kind and text.

Run as ``python tests/kernels/device_mesh_cases.py``.
"""

import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
os.environ["JAX_PLATFORMS"] = "cpu"

import json  # noqa: E402
import sys  # noqa: E402
import warnings  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.experimental import pallas as pl  # noqa: E402
from jax.experimental.pallas import tpu as pltpu  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import minipallas as mp  # noqa: E402

warnings.simplefilter("ignore", DeprecationWarning)
N = 4
MESH, LOGICAL = pl.DeviceIdType.MESH, pl.DeviceIdType.LOGICAL
DMA, REGULAR = pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.REGULAR
F32 = jnp.float32


def _mesh(shape=(N,), names=("x",)):
    devices = np.array(jax.devices()[: int(np.prod(shape))]).reshape(shape)
    return jax.sharding.Mesh(devices, names)


def _on_devices(kernel, shard_out, scratch, *, space=pl.ANY, spec=None, mesh=None,
                collective_id=None, check_vma=False):  # fmt: skip
    spec = P("x") if spec is None else spec
    mesh = mesh or _mesh()
    # with check_vma=True, upstream asks how the kernel's result varies: along every axis
    varying = jax.sharding.ManualAxisType(varying=frozenset(mesh.axis_names)) if check_vma else None
    params = None if collective_id is None else pltpu.CompilerParams(collective_id=collective_id)
    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(shard_out, F32, manual_axis_type=varying),
        in_specs=[pl.BlockSpec(memory_space=space)],
        out_specs=pl.BlockSpec(memory_space=space),
        scratch_shapes=scratch,
        compiler_params=params,
    )
    return jax.shard_map(call, mesh=mesh, in_specs=spec, out_specs=spec,
                         check_vma=check_vma)  # fmt: skip


def right_permute(x_ref, o_ref, send_sem, recv_sem):
    """Upstream's guide: each device sends its shard to its right neighbour."""
    right = lax.rem(lax.axis_index("x") + 1, N)
    copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id=(right,),
                                        device_id_type=MESH)  # fmt: skip
    copy.start()
    copy.wait()


def shift_two_logical(x_ref, o_ref, send_sem, recv_sem):
    """A shift by two with LOGICAL ids, behind a barrier-semaphore handshake."""
    me = lax.axis_index("x")
    to, frm = lax.rem(me + 2, N), lax.rem(me + N - 2, N)
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=to, device_id_type=LOGICAL)
    pl.semaphore_signal(barrier, 1, device_id=frm, device_id_type=LOGICAL)
    pl.semaphore_wait(barrier, 2)
    copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id=to,
                                        device_id_type=LOGICAL)  # fmt: skip
    copy.start()
    copy.wait()


def _ring_all_gather(wait_recv: bool):
    def kernel(x_ref, o_ref, send_sem, recv_sem):
        me = lax.axis_index("x")
        right = lax.rem(me + 1, N)
        o_ref[me] = x_ref[...]
        for step in range(N - 1):
            slot = lax.rem(me + N - step, N)
            copy = pltpu.make_async_remote_copy(o_ref.at[slot], o_ref.at[slot], send_sem,
                                                recv_sem, device_id=(right,),
                                                device_id_type=MESH)  # fmt: skip
            copy.start()
            copy.wait_send()
            if wait_recv:
                copy.wait_recv()

    return kernel


def token_ring(x_ref, o_ref, sem):
    """Every device waits for its left neighbour's token before passing its own: a deadlock."""
    right = lax.rem(lax.axis_index("x") + 1, N)
    pl.semaphore_wait(sem, 1)
    pl.semaphore_signal(sem, 1, device_id=(right,), device_id_type=MESH)
    o_ref[...] = x_ref[...]


def all_to_device_zero(x_ref, o_ref, send_sem, recv_sem):
    """Every device copies its shard into device 0's output: overlapping writes (a race)."""
    copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id=(0,),
                                        device_id_type=MESH)  # fmt: skip
    copy.start()
    copy.wait_send()


def permute_along_y(x_ref, o_ref, send_sem, recv_sem):
    """A (2, 2) mesh: each device sends to its neighbour along "y" (a dict device_id)."""
    other = 1 - lax.axis_index("y")
    copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem,
                                        device_id={"y": other}, device_id_type=MESH)  # fmt: skip
    copy.start()
    copy.wait()


def _run(fn, x, schedule="lockstep"):
    imported = mp.from_jaxpr(jax.make_jaxpr(jax.jit(fn))(x))
    (out,) = mp.interpret(imported, x, collectives="simulate", schedule=schedule)
    return out


def cases():
    x = np.arange(N * 8 * 128, dtype=np.float32).reshape(N * 8, 128)
    shards = x.reshape(N, 8, 128)
    two = [DMA, DMA]
    permute = _on_devices(right_permute, (8, 128), two)
    yield "right_permute", lambda s: (_run(permute, x, s),
                                      np.roll(shards, 1, axis=0).reshape(x.shape))  # fmt: skip
    shift = _on_devices(shift_two_logical, (8, 128), two, collective_id=0)
    yield "shift_two_logical", lambda s: (_run(shift, x, s),
                                          np.roll(shards, 2, axis=0).reshape(x.shape))  # fmt: skip
    gather = _on_devices(_ring_all_gather(True), (N, 8, 128), two, space=None)
    yield "ring_all_gather", lambda s: (_run(gather, x, s), np.tile(shards, (N, 1, 1)))
    racy = _on_devices(_ring_all_gather(False), (N, 8, 128), two, space=None)
    yield "all_gather_without_wait_recv", lambda s: (_run(racy, x, s), None)
    checked = _on_devices(right_permute, (8, 128), two, check_vma=True)
    rolled = np.roll(shards, 1, axis=0).reshape(x.shape)
    yield "right_permute_check_vma", lambda s: (_run(checked, x, s), rolled)
    ring = _on_devices(token_ring, (8, 128), [REGULAR], space=None)
    yield "token_ring", lambda s: (_run(ring, x, s), None)
    zero = _on_devices(all_to_device_zero, (8, 128), two)
    yield "all_to_device_zero", lambda s: (_run(zero, x, s), None)
    y = np.arange(4 * 8 * 128, dtype=np.float32).reshape(2 * 8, 2 * 128)
    grid = _mesh((2, 2), ("x", "y"))
    along_y = _on_devices(permute_along_y, (8, 128), two, spec=P("x", "y"), mesh=grid)
    blocks = y.reshape(2, 8, 2, 128)
    yield "permute_along_y", lambda s: (_run(along_y, y, s),
                                        blocks[:, :, ::-1, :].reshape(y.shape))  # fmt: skip


def main() -> None:
    schedules = ["lockstep", 0, 1]
    for name, case in cases():
        for schedule in schedules:
            try:
                got, want = case(schedule)
                verdict = {"ok": want is not None and np.array_equal(got, want)}
            except mp.MiniPallasError as e:
                verdict = {"error": type(e).__name__, "text": str(e)}
            print(json.dumps({"case": name, "schedule": schedule, **verdict}), flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
