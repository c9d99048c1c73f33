"""Kernels that span devices compiled to XLA collectives (issue 47), run by
``test_device_compile.py`` in a process of its own with ``N`` CPU devices (the first argument:
jax sees several CPU devices only when ``XLA_FLAGS`` says so before it starts). Each case is
run by the simulator (``collectives="simulate"``) and by ``jax.jit(mp.on_devices(f))``, and
prints one JSON line: whether the compiled bits are the simulator's and numpy's, what the
compiled HLO holds, and the seconds each took (measured, not asserted); or the error.

Run as ``python tests/kernels/device_compile_cases.py 8``. Imported (by
``device_process_worker.py``, whose jax is set up already), its kernels span 4 devices.
"""

import os
import sys

N = int(sys.argv[1]) if __name__ == "__main__" and len(sys.argv) > 1 else 4
if __name__ == "__main__":
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={N}"
    os.environ["JAX_PLATFORMS"] = "cpu"

import functools  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.experimental import pallas as pl  # noqa: E402
from jax.experimental.pallas import tpu as pltpu  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import minipallas as mp  # noqa: E402
from minipallas.tools.corpora.multi_device import compute  # noqa: E402
from minipallas.tools.corpora.multi_device.own import _attention as own_attention  # noqa: E402
from minipallas.tools.corpora.multi_device.own import (  # noqa: E402
    _attention_inputs as own_attention_inputs,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: device_cases
import device_cases  # noqa: E402
from device_cases import mesh_of, on_mesh, permute_along_y, remote_copy  # noqa: E402

warnings.simplefilter("ignore", DeprecationWarning)
MESH = pl.DeviceIdType.MESH
DMA, REGULAR = pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.REGULAR
F32 = jnp.float32
SHARD = (8, 128)
right_permute = device_cases.right_permute(N)
shift_two_logical = device_cases.shift_two_logical(N)


def ring_all_gather(x_ref, o_ref, send_sem, recv_sems):
    """A ring all-gather in a loop: at step s each device passes on the block it got last, its
    copy counted on a receive semaphore of the step's own (one shared by every step would let
    a wait be satisfied by the next step's copy: the simulator names that race)."""
    me = lax.axis_index("x")
    right = (lax.rem(me + 1, N),)
    o_ref[me] = x_ref[...]

    def step(s, carry):
        slot = lax.rem(me + N - s, N)
        copy = remote_copy(o_ref.at[slot], o_ref.at[slot], send_sem, recv_sems.at[s], right)
        copy.start()
        copy.wait()
        return carry

    lax.fori_loop(0, N - 1, step, 0)


def ring_all_reduce(x_ref, o_ref, buf_ref, send_sem, recv_sem, ready_sem):
    """A double-buffered ring all-reduce: at step s each device sends ``buf[s % 2]`` right,
    into the right neighbour's ``buf[1 - s % 2]``, and adds what it got from the left. Before
    sending, a device waits until its right neighbour says (``ready_sem``) that it has begun
    the step, so the buffer written there is no longer being read or sent."""
    me = lax.axis_index("x")
    right, left = (lax.rem(me + 1, N),), (lax.rem(me + N - 1, N),)
    o_ref[...] = x_ref[...]
    buf_ref[0] = x_ref[...]

    def step(s, carry):
        slot = lax.rem(s, 2)
        pl.semaphore_signal(ready_sem, 1, device_id=left, device_id_type=MESH)
        pl.semaphore_wait(ready_sem, 1)
        copy = remote_copy(buf_ref.at[slot], buf_ref.at[1 - slot], send_sem, recv_sem, right)
        copy.start()
        copy.wait()
        o_ref[...] += buf_ref[1 - slot]
        return carry

    lax.fori_loop(0, N - 1, step, 0)


def all_to_all(x_ref, o_ref, send_sems, recv_sems):
    """Block ``j`` of each device goes to device ``j``: the target is computed from the loop
    index (an all_gather and a select on the receiver, compiled)."""
    me = lax.axis_index("x")
    o_ref[me] = x_ref[me]

    def copy(s):
        to = lax.rem(me + s, N)
        return remote_copy(x_ref.at[to], o_ref.at[me], send_sems.at[s], recv_sems.at[s], (to,))

    lax.fori_loop(1, N, lambda s, c: (copy(s).start(), c)[1], 0)
    lax.fori_loop(1, N, lambda s, c: (copy(s).wait(), c)[1], 0)


def all_to_all_2d(x_ref, o_ref, send_sems, recv_sems):
    """``all_to_all`` over a (N/2, 2) mesh, the target a MESH id on both axes computed from the
    loop index (an all_gather over both axes, compiled)."""
    me = lax.axis_index("x") * 2 + lax.axis_index("y")
    o_ref[me] = x_ref[me]

    def copy(s):
        to = lax.rem(me + s, N)
        return remote_copy(x_ref.at[to], o_ref.at[me], send_sems.at[s], recv_sems.at[s],
                     (to // 2, lax.rem(to, 2)))  # fmt: skip

    lax.fori_loop(1, N, lambda s, c: (copy(s).start(), c)[1], 0)
    lax.fori_loop(1, N, lambda s, c: (copy(s).wait(), c)[1], 0)


def chunked_permute(x_ref, o_ref, send_sem, recv_sem):
    """A kernel with a grid: grid step ``c`` sends rows ``4c:4c+4`` to the right neighbour."""
    rows = pl.ds(pl.program_id(0) * 4, 4)
    copy = remote_copy(x_ref.at[rows], o_ref.at[rows], send_sem, recv_sem,
                 (lax.rem(lax.axis_index("x") + 1, N),))  # fmt: skip
    copy.start()
    copy.wait()


def first_step_sends(x_ref, o_ref, send_sem, recv_sem):
    """A grid's first step sends rows 0:4 right and writes rows 4:8, its second adds to them:
    every device takes each ``pl.when`` on the step alike, so the copy stays in its branch."""
    step = pl.program_id(0)

    @pl.when(step == 0)
    def _():
        o_ref[4:8] = x_ref[4:8] * 2.0
        copy = remote_copy(x_ref.at[0:4], o_ref.at[0:4], send_sem, recv_sem,
                           (lax.rem(lax.axis_index("x") + 1, N),))  # fmt: skip
        copy.start()
        copy.wait()

    @pl.when(step == 1)
    def _():
        o_ref[4:8] += 1.0


def lax_around(call):
    """lax collectives in the shard_map's body around the kernel (a right permute)."""
    return lambda a: (
        call(lax.psum(a, "x") + lax.axis_index("x").astype(F32)) * 2.0 + lax.pmax(a, "x")
    )


def target_from_data(x_ref, o_ref, send_sem, recv_sem):
    """The target is read from the input (to the right: each shard's first element is a
    multiple of N): refused by the compiler, run by the simulator."""
    to = lax.rem(lax.axis_index("x") + 1 + x_ref[0, 0].astype(jnp.int32), N)
    copy = remote_copy(x_ref, o_ref, send_sem, recv_sem, (to,))
    copy.start()
    copy.wait()


def trips_from_data(x_ref, o_ref, send_sem, recv_sem):
    """A right permute repeated a number of times read from the input (once: each shard's
    first element is a multiple of N): the trip count is computed, so the compiler refuses."""
    copy = remote_copy(x_ref, o_ref, send_sem, recv_sem, (lax.rem(lax.axis_index("x") + 1, N),))
    trips = lax.rem(x_ref[0, 0].astype(jnp.int32), 2) + 1

    def step(s, carry):
        copy.start()
        copy.wait()
        return carry

    lax.fori_loop(0, trips, step, 0)


def _device_zero_sends(writes_too: bool):
    """Remote copies under a condition on the device (``pl.when(me == 0)``): compiled as a
    collective every device takes part in, sent by device 0 only. ``writes_too`` adds a write
    in device 0's branch before the copy: it stays under the condition."""

    def kernel(x_ref, o_ref, send_sem, recv_sem):
        me = lax.axis_index("x")
        o_ref[0] = x_ref[...]
        copy = remote_copy(x_ref, o_ref.at[1], send_sem, recv_sem, (1,))

        @pl.when(me != 1)
        def _():
            o_ref[1] = jnp.full(SHARD, -1.0, F32)

        @pl.when(me == 0)
        def _():
            if writes_too:
                o_ref[0, 0, 0] = 0.0
            copy.start()
            copy.wait_send()

        @pl.when(me == 1)
        def _():
            copy.wait_recv()

    return kernel


def late_handoff(x_ref, o_ref, send_sem, recv_sem, ready):
    """Device 0 copies into device 1's ``o[1]`` only after device 1 says it has written it
    (a handshake only device 0 waits on). Race-free, and device 1 keeps device 0's shard; a
    copy compiled to land where device 1 reaches the copy would land before the write, so the
    compiler refuses."""
    me = lax.axis_index("x")
    copy = remote_copy(x_ref, o_ref.at[1], send_sem, recv_sem, (1,))
    o_ref[0] = x_ref[...]

    @pl.when(me == 0)
    def _():
        pl.semaphore_wait(ready, 1)
        copy.start()
        copy.wait_send()

    @pl.when(me != 0)
    def _():
        o_ref[1] = jnp.full(SHARD, -1.0, F32)

    @pl.when(me == 1)
    def _():
        pl.semaphore_signal(ready, 1, device_id=(0,), device_id_type=MESH)
        copy.wait_recv()


def when_from_data(x_ref, o_ref, send_sem, recv_sem):
    """A remote copy under a condition read from the input: refused by the compiler."""
    copy = remote_copy(x_ref, o_ref, send_sem, recv_sem, (lax.rem(lax.axis_index("x") + 1, N),))

    @pl.when(x_ref[0, 0] >= 0)
    def _():
        copy.start()
        copy.wait()


def cases():
    """(name, f, x, numpy's result or None)."""
    x = np.arange(N * 8 * 128, dtype=np.float32).reshape(N * 8, 128)
    blocks = x.reshape(N, *SHARD)
    two = [DMA, DMA]
    yield ("right_permute", on_mesh(right_permute, SHARD, two), x,
           np.roll(blocks, 1, axis=0).reshape(x.shape))  # fmt: skip
    yield ("shift_two_logical", on_mesh(shift_two_logical, SHARD, two, collective_id=0), x,
           np.roll(blocks, 2, axis=0).reshape(x.shape))  # fmt: skip
    gather = on_mesh(ring_all_gather, (N, *SHARD), [DMA, DMA((N,))], space=None)
    yield "ring_all_gather", gather, x, np.tile(blocks, (N, 1, 1))
    y = np.arange(N * 8 * 128, dtype=np.float32).reshape(N // 2 * 8, 2 * 128)
    along = on_mesh(permute_along_y, SHARD, two, mesh=mesh_of((N // 2, 2), ("x", "y")),
                    spec=P("x", "y"))  # fmt: skip
    yield ("permute_along_y", along, y,
           y.reshape(N // 2, 8, 2, 128)[:, :, ::-1, :].reshape(y.shape))  # fmt: skip
    r = np.random.default_rng(0).standard_normal((N * 8, 128)).astype(np.float32)
    scratch = [pltpu.VMEM((2, *SHARD), F32), DMA, DMA, REGULAR]
    reduce = on_mesh(ring_all_reduce, SHARD, scratch, space=None)
    yield "ring_all_reduce", reduce, r, _ring_sums(r.reshape(N, *SHARD)).reshape(r.shape)
    a2a = on_mesh(all_to_all, (N, *SHARD), [pltpu.SemaphoreType.DMA((N,))] * 2, space=None)
    z = np.arange(N * N * 8 * 128, dtype=np.float32).reshape(N * N, *SHARD)
    yield ("all_to_all", a2a, z,
           z.reshape(N, N, *SHARD).transpose(1, 0, 2, 3).reshape(z.shape))  # fmt: skip
    sems = [pltpu.SemaphoreType.DMA((N,))] * 2
    a2a_2d = on_mesh(all_to_all_2d, (N, *SHARD), sems, space=None,
                     mesh=mesh_of((N // 2, 2), ("x", "y")), spec=P(("x", "y")))  # fmt: skip
    yield ("all_to_all_2d", a2a_2d, z,
           z.reshape(N, N, *SHARD).transpose(1, 0, 2, 3).reshape(z.shape))  # fmt: skip
    around = on_mesh(right_permute, SHARD, two, body=lax_around)
    b = blocks.sum(0) + np.arange(N, dtype=np.float32)[:, None, None]  # exact: small integers
    yield ("lax_around", around, x,
           (np.roll(b, 1, axis=0) * 2.0 + blocks.max(0)).reshape(x.shape))  # fmt: skip
    plain = jax.shard_map(lambda a: lax.ppermute(a, "x", [(d, (d + 1) % N) for d in range(N)]),
                          mesh=mesh_of((N,)),
                          in_specs=P("x"), out_specs=P("x"))  # fmt: skip
    yield "plain_ppermute", plain, x, np.roll(blocks, 1, axis=0).reshape(x.shape)
    chunked = on_mesh(chunked_permute, SHARD, two, grid=(2,))
    yield "chunked_permute", chunked, x, np.roll(blocks, 1, axis=0).reshape(x.shape)
    stepped = np.roll(blocks, 1, axis=0)
    stepped[:, 4:8] = blocks[:, 4:8] * 2.0 + 1.0
    first = on_mesh(first_step_sends, SHARD, two, grid=(2,))
    yield "first_step_sends", first, x, stepped.reshape(x.shape)
    wide = np.arange(N * 16 * 128, dtype=np.float32).reshape(N * 16, 128)
    yield "upstream_all_gather", _upstream_all_gather(), wide, wide
    yield ("target_from_data", on_mesh(target_from_data, SHARD, two, space=None), x,
           np.roll(blocks, 1, axis=0).reshape(x.shape))  # fmt: skip
    yield ("trips_from_data", on_mesh(trips_from_data, SHARD, two, space=None), x,
           np.roll(blocks, 1, axis=0).reshape(x.shape))  # fmt: skip
    zero = on_mesh(_device_zero_sends(False), (2, *SHARD), two, space=None)
    second = np.full((N, *SHARD), -1.0, np.float32)
    second[1] = blocks[0]
    yield ("only_device_zero_sends", zero, x,
           np.stack([blocks, second], axis=1).reshape(N * 2, *SHARD))  # fmt: skip
    late = on_mesh(late_handoff, (2, *SHARD), [DMA, DMA, REGULAR], space=None)
    yield "late_handoff", late, x, None
    yield ("when_from_data", on_mesh(when_from_data, SHARD, two, space=None), x,
           np.roll(blocks, 1, axis=0).reshape(x.shape))  # fmt: skip
    written = np.stack([blocks, second], axis=1)
    written[0, 0, 0, 0] = 0.0
    writes = on_mesh(_device_zero_sends(True), (2, *SHARD), two, space=None)
    yield "when_on_device_writes", writes, x, written.reshape(N * 2, *SHARD)
    # the device corpus's ring attention (exp, an online softmax, a division): q @ k.T exact
    # (multiples of 1/8), the rest rounded as XLA rounds it; numpy's result within 1e-5
    q, k, v = own_attention_inputs(72, N)
    yield "ring_attention", compute.ring_attention(N)(), (q, k, v), own_attention(q, k, v)


def _upstream_all_gather():
    """Upstream's shipped ops/tpu/all_gather.py, as its own test calls it (jit over the mesh;
    a reshape after the kernel, out_specs=P(None))."""
    from jax.experimental.pallas.ops.tpu import all_gather

    return functools.partial(all_gather.all_gather, mesh=mesh_of((N,)), axis_name="x")


def _ring_sums(blocks: np.ndarray) -> np.ndarray:
    """Device ``d`` adds, in ring order, its own block, then its left neighbour's, ..."""
    out = blocks.copy()
    for d in range(N):
        for s in range(1, N):
            out[d] = out[d] + blocks[(d - s) % N]
    return out


def simulate(f, *xs):
    imported = mp.from_jaxpr(jax.make_jaxpr(f)(*xs))
    (out,) = mp.interpret(imported, *xs, collectives="simulate")
    return out


def compiled(f, *xs):
    g = jax.jit(mp.on_devices(f))
    hlo = g.lower(*xs).compile().as_text()
    out = np.asarray(g(*xs))
    start = time.perf_counter()
    np.asarray(g(*xs))
    return out, hlo, time.perf_counter() - start


def verdict(name, f, x, want, n: int) -> dict:
    """One case's verdict (module doc) on ``n`` devices: the simulator's and the compiled
    result, the bits compared, what the compiled HLO holds; or the error."""
    out: dict = {"case": name, "devices": n}
    xs = x if isinstance(x, tuple) else (x,)
    sim = None
    try:
        start = time.perf_counter()
        sim = simulate(f, *xs)
        out["simulate_s"] = time.perf_counter() - start
        out["simulated_numpy"] = want is not None and bool(np.array_equal(sim, want))
    except mp.MiniPallasError as e:  # a race or deadlock the simulator names
        out.update(simulate_error=type(e).__name__, simulate_text=str(e))
    try:
        got, hlo, seconds = compiled(f, *xs)
        bits = None if sim is None else np.array_equal(got.view(np.uint32), sim.view(np.uint32))
        out.update(
            compiled_s=seconds,
            same_bits=bits,
            differing=None if sim is None else int((got != sim).sum()),
            numpy=want is not None and bool(np.array_equal(got, want)),
            numpy_abs=None if want is None else float(np.abs(got - want).max()),
            permute="collective-permute(" in hlo,
            all_gather="all-gather(" in hlo,
            loops=hlo.count(" while("),
            partitions=f"num_partitions={n}" in hlo,
        )
    except mp.MiniPallasError as e:
        out.update(error=type(e).__name__, text=str(e))
    return out


def main() -> None:
    for name, f, x, want in cases():
        print(json.dumps(verdict(name, f, x, want, N)), flush=True)


if __name__ == "__main__":
    main()
