"""Kernels that span devices that the compiler used to refuse (issue 47), run by
``test_device_compile_cores_branches.py`` in a process of its own with ``N`` CPU devices (the
first argument): mesh kernels of cores inside the shard_map (each device's cores run in turn,
``kernels/devices/cores.py``), and remote copies under a condition that may differ by device
whose branches also read or write memory (``kernels/devices/masked.py``). Each case prints
``device_compile_cases.verdict``'s JSON line: the simulator's result against numpy's, the
compiled bits against the simulator's, what the HLO holds; or the error.

Run as ``python tests/kernels/device_cores_branches_cases.py 8``.
"""

import os
import sys

N = int(sys.argv[1]) if __name__ == "__main__" and len(sys.argv) > 1 else 4
if __name__ == "__main__":
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={N}"
    os.environ["JAX_PLATFORMS"] = "cpu"

import json  # noqa: E402
import warnings  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from device_cases import mesh_of, on_mesh, remote_copy, right_permute, whole_call  # noqa: E402
from device_compile_cases import verdict  # noqa: E402
from device_core_cases import doubled_halves  # noqa: E402
from jax import lax  # noqa: E402
from jax.experimental import pallas as pl  # noqa: E402
from jax.experimental.pallas import tpu as pltpu  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from minipallas.interop.importer.rules.devices_cores import equations  # noqa: E402
from minipallas.ir.verifier import verify  # noqa: E402
from minipallas.platforms.devices_xla import device_function  # noqa: E402

warnings.simplefilter("ignore", DeprecationWarning)
DMA = pltpu.SemaphoreType.DMA
F32 = jnp.float32
SHARD = (8, 128)
CORES = pltpu.create_tensorcore_mesh("core", num_cores=2)


def _right():
    return (lax.rem(lax.axis_index("x") + 1, N),)


def _halves():
    core = lax.axis_index("core")
    return pl.ds(core * 4, 4), pl.ds((1 - core) * 4, 4)


# --- mesh kernels of cores in the shard_map ---------------------------------------------------


def core_rows_right(x_ref, o_ref, send, recv):
    """Each core of each device sends its half of the shard to the next device's same core."""
    half, _ = _halves()
    copy = remote_copy(x_ref.at[half], o_ref.at[half], send, recv, _right())
    copy.start()
    copy.wait()


def core_ring_gather(x_ref, o_ref, local, send, recvs):
    """A ring all-gather by each core for its half: a loop of N - 1 steps of remote copies,
    each step's copy counted on a receive semaphore of its own."""
    half, _ = _halves()
    me = lax.axis_index("x")
    pltpu.async_copy(x_ref.at[half], o_ref.at[me, half], local).wait()

    def step(s, carry):
        slot = lax.rem(me + N - s, N)
        copy = remote_copy(o_ref.at[slot, half], o_ref.at[slot, half], send, recvs.at[s],
                           _right())  # fmt: skip
        copy.start()
        copy.wait()
        return carry

    lax.fori_loop(0, N - 1, step, 0)


def core_meeting_swap(x_ref, o_ref, shared, local, send, recv, sync):
    """Each core puts its half into the device's VMEM_SHARED, the cores meet by semaphores
    (each signals both, then waits for two), and each sends the other core's half to the next
    device's same half."""
    half, other = _halves()
    pltpu.async_copy(x_ref.at[half], shared.at[half], local).wait()
    for i in range(2):
        pl.semaphore_signal(sync, 1, core_index=i)
    pl.semaphore_wait(sync, 2)
    copy = remote_copy(shared.at[other], o_ref.at[half], send, recv, _right())
    copy.start()
    copy.wait()


def core_handoff(x_ref, o_ref, shared, local, sync):
    """Core 0 puts the shard into VMEM_SHARED and signals core 1, which waits and copies it
    out: a handoff between cores (refused by the compiler, run by the simulator)."""
    core = lax.axis_index("core")

    @pl.when(core == 0)
    def _():
        pltpu.async_copy(x_ref, shared, local).wait()
        pl.semaphore_signal(sync, 1, core_index=1)

    @pl.when(core == 1)
    def _():
        pl.semaphore_wait(sync, 1)
        pltpu.async_copy(shared, o_ref, local).wait()


def core_to_other_core(x_ref, o_ref, send, recv):
    """Each core sends its half of the shard into the next device's other half, counted on
    the other core's receive semaphore there (a device_id dict naming the core), and waits
    for what the other core of the left device sent it: refused, run by the simulator."""
    half, other = _halves()
    core = lax.axis_index("core")
    to = {"x": _right()[0], "core": 1 - core}
    out = remote_copy(x_ref.at[half], o_ref.at[other], send, recv, to)
    out.start()
    remote_copy(x_ref.at[other], o_ref.at[half], send, recv, to).wait_recv()
    out.wait_send()


def on_cores(kernel, scratch, out=SHARD):
    """A 2-core ``pl.kernel`` of ``kernel`` on each device of a shard_map over all devices."""
    call = pl.kernel(kernel, out_type=jax.ShapeDtypeStruct(out, F32), mesh=CORES,
                     scratch_types=scratch)  # fmt: skip
    return jax.shard_map(call, mesh=mesh_of(), in_specs=P("x"), out_specs=P("x"),
                         check_vma=False)  # fmt: skip


def around_core_kernel(x):
    """A pallas_call of remote copies (a right permute, run by each device's first core)
    before and after a 2-core kernel that doubles each core's half and adds its number."""
    permute = whole_call(right_permute(N))
    scratch = [pltpu.VMEM((4, 128), F32), DMA]
    z = pl.kernel(doubled_halves, out_type=jax.ShapeDtypeStruct(SHARD, F32), mesh=CORES,
                  scratch_types=scratch)(permute(x + 1.0))  # fmt: skip
    return permute(z)


# --- a condition that may differ by device, whose branches touch memory ----------------------


def cond_neighbours(x_ref, o_ref, send, recv):
    """``lax.cond`` on the device's parity: an even device writes ``2x`` into ``o[1]`` and
    sends its shard right, an odd one writes ``x + 1`` and sends it left; every device
    receives one shard into ``o[0]`` (after the cond)."""
    me = lax.axis_index("x")

    def branch(to, value):
        def run():
            o_ref[1] = value(x_ref[...])
            copy = remote_copy(x_ref, o_ref.at[0], send, recv, (to,))
            copy.start()
            copy.wait_send()

        return run

    lax.cond(lax.rem(me, 2) == 0, branch(lax.rem(me + 1, N), lambda v: v * 2.0),
             branch(lax.rem(me + N - 1, N), lambda v: v + 1.0))  # fmt: skip
    remote_copy(x_ref, o_ref.at[0], send, recv, (me,)).wait_recv()


def zero_broadcasts(x_ref, o_ref, scratch, local, send, recv):
    """Device 0 copies its shard into VMEM (a local copy), triples it there and writes it to
    its output, then sends it to every other device, all under ``pl.when(me == 0)``."""
    me = lax.axis_index("x")

    @pl.when(me == 0)
    def _():
        pltpu.async_copy(x_ref, scratch, local).wait()
        scratch[...] = scratch[...] * 3.0
        o_ref[...] = scratch[...]
        copies = [remote_copy(scratch, o_ref, send, recv, (t,)) for t in range(1, N)]
        for c in copies:
            c.start()
        for c in copies:
            c.wait_send()

    @pl.when(me != 0)
    def _():
        remote_copy(scratch, o_ref, send, recv, (0,)).wait_recv()


def pick_source(x_ref, o_ref, a_ref, b_ref, send, recv):
    """The copy's source picked by a value read from the input (``pl.select_ref``: ``2x`` on
    even devices, ``x + 1`` on odd ones): data picks the payload, not the communication."""
    a_ref[...] = x_ref[...] * 2.0
    b_ref[...] = x_ref[...] + 1.0
    pick = lax.rem(x_ref[0, 0].astype(jnp.int32) // 1024, 2)  # the device's parity, as data
    copy = remote_copy(pl.select_ref(pick, a_ref, b_ref), o_ref, send, recv, _right())
    copy.start()
    copy.wait()


def data_picks_target(x_ref, o_ref, send, recv):
    """A condition read from the input picks the neighbour (right: the input is not negative):
    data decides the communication, so the compiler refuses, the simulator runs it."""
    me = lax.axis_index("x")

    def send_to(to):
        def run():
            copy = remote_copy(x_ref, o_ref, send, recv, (lax.rem(me + to, N),))
            copy.start()
            copy.wait_send()

        return run

    lax.cond(x_ref[0, 0] >= 0, send_to(1), send_to(N - 1))
    remote_copy(x_ref, o_ref, send, recv, (me,)).wait_recv()


def writes_after_start(x_ref, o_ref, send, recv):
    """Device 0 sends its shard to device 1's ``o[1]`` and writes its own ``o[0]`` after the
    copy's start, under ``pl.when(me == 0)``: refused (compiled, that write would move after
    every device's copies), run by the simulator."""
    me = lax.axis_index("x")
    o_ref[0] = x_ref[...]
    copy = remote_copy(x_ref, o_ref.at[1], send, recv, (1,))

    @pl.when(me != 1)
    def _():
        o_ref[1] = jnp.full(SHARD, -1.0, F32)

    @pl.when(me == 0)
    def _():
        copy.start()
        o_ref[0] = x_ref[...] + 1.0
        copy.wait_send()

    @pl.when(me == 1)
    def _():
        copy.wait_recv()


def loop_in_branch(x_ref, o_ref, send, recv):
    """Device 0 sends its shard to every other device from a loop inside ``pl.when(me == 0)``:
    the copy stays under the condition, so the compiler refuses it."""
    me = lax.axis_index("x")

    @pl.when(me == 0)
    def _():
        o_ref[...] = x_ref[...]

        def send_to(t, carry):
            copy = remote_copy(x_ref, o_ref, send, recv, (t,))
            copy.start()
            copy.wait_send()
            return carry

        lax.fori_loop(1, N, send_to, 0)

    @pl.when(me != 0)
    def _():
        remote_copy(x_ref, o_ref, send, recv, (0,)).wait_recv()


def cases():
    """(name, f, x, numpy's result or None)."""
    x = np.arange(N * 8 * 128, dtype=np.float32).reshape(N * 8, 128)
    blocks = x.reshape(N, *SHARD)
    rolled = np.roll(blocks, 1, axis=0)
    two = [DMA, DMA]
    yield "core_rows_right", on_cores(core_rows_right, two), x, rolled.reshape(x.shape)
    gather = on_cores(core_ring_gather, [DMA, DMA, DMA((N,))], out=(N, *SHARD))
    yield "core_ring_gather", gather, x, np.tile(blocks, (N, 1, 1))
    shared = [pltpu.VMEM_SHARED(SHARD, F32), DMA, DMA, DMA, pltpu.SemaphoreType.REGULAR]
    swapped = np.concatenate([rolled[:, 4:], rolled[:, :4]], axis=1).reshape(x.shape)
    yield "core_meeting_swap", on_cores(core_meeting_swap, shared), x, swapped
    around = jax.shard_map(around_core_kernel, mesh=mesh_of(), in_specs=P("x"), out_specs=P("x"),
                           check_vma=False)  # fmt: skip
    doubled = np.roll(blocks + 1.0, 1, axis=0) * 2.0 + np.repeat([0.0, 1.0], 4)[:, None]
    yield "around_core_kernel", around, x, np.roll(doubled, 1, axis=0).reshape(x.shape)
    handoff = [pltpu.VMEM_SHARED(SHARD, F32), DMA, pltpu.SemaphoreType.REGULAR]
    yield "core_handoff", on_cores(core_handoff, handoff), x, x
    yield "core_to_other_core", on_cores(core_to_other_core, two), x, swapped
    parity = np.arange(N) % 2 == 0
    got = np.where(parity[:, None, None], np.roll(blocks, -1, axis=0), rolled)
    mine = np.where(parity[:, None, None], blocks * 2.0, blocks + 1.0)
    neighbours = on_mesh(cond_neighbours, (2, *SHARD), two, space=None)
    yield ("cond_neighbours", neighbours, x,
           np.stack([got, mine], axis=1).reshape(N * 2, *SHARD))  # fmt: skip
    scratch = [pltpu.VMEM(SHARD, F32), DMA, DMA, DMA]
    yield ("zero_broadcasts", on_mesh(zero_broadcasts, SHARD, scratch, space=None), x,
           np.tile(blocks[0] * 3.0, (N, 1)))  # fmt: skip
    picks = [pltpu.VMEM(SHARD, F32), pltpu.VMEM(SHARD, F32), DMA, DMA]
    odd = (np.arange(N) % 2 == 1)[:, None, None]
    picked = np.roll(np.where(odd, blocks + 1.0, blocks * 2.0), 1, axis=0)
    yield ("pick_source", on_mesh(pick_source, SHARD, picks, space=None), x,
           picked.reshape(x.shape))  # fmt: skip
    yield ("data_picks_target", on_mesh(data_picks_target, SHARD, two, space=None), x,
           rolled.reshape(x.shape))  # fmt: skip
    after = np.full((N, 2, *SHARD), -1.0, np.float32)
    after[:, 0] = blocks
    after[0, 0] = blocks[0] + 1.0
    after[1, 1] = blocks[0]
    yield ("writes_after_start", on_mesh(writes_after_start, (2, *SHARD), two, space=None), x,
           after.reshape(N * 2, *SHARD))  # fmt: skip
    yield ("loop_in_branch", on_mesh(loop_in_branch, SHARD, two, space=None), x,
           np.tile(blocks[0], (N, 1)))  # fmt: skip


def verified(f, x) -> bool:
    """Whether each shard_map's device program (cores in turn, copies out of branches)
    passes the verifier."""
    for eqn in equations(jax.make_jaxpr(f)(x)):
        if eqn.primitive.name == "shard_map":
            verify(device_function(eqn))
    return True


def main() -> None:
    for name, f, x, want in cases():
        v = verdict(name, f, x, want, N)
        if "error" not in v:
            v["verified"] = verified(f, x)
        print(json.dumps(v), flush=True)


if __name__ == "__main__":
    main()
