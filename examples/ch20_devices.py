"""Chapter 20: a kernel across devices: its race found and fixed, compiled to XLA, timed.

When one chip is not enough, a Pallas TPU kernel runs on every device of a mesh inside
``jax.shard_map`` and talks to its neighbours itself: ``pltpu.make_async_remote_copy(src, dst,
send_sem, recv_sem, device_id=...)`` copies into another device's buffer, semaphores say when a
copy has left or arrived, and ``pltpu.get_barrier_semaphore()`` (with ``collective_id``) lets
the devices meet first. Such a kernel is easy to get wrong, and upstream off a TPU has only its
TPU interpret mode, which runs it (slowly), may miss a race, and hangs on a deadlock.

minipallas imports the ``shard_map`` as one program per device (a ``mesh_call`` whose buffers
have a row per device, chapter 18's model with devices for cores). Under
``collectives="simulate"`` the devices run together, every copy in flight from its start to its
waits, and a race or a deadlock is an error naming both devices and both lines. A race-free
kernel whose communication does not depend on data then compiles: ``mp.on_devices(f)`` turns
each remote copy into an XLA collective (``collective-permute``) in a ``jax.shard_map``, with
the simulator's bits, at XLA's speed.

The kernel: a ring all-reduce over 4 devices through a double buffer. At step ``s`` each device
sends the block it received last step on to its right neighbour and adds what arrives from its
left. Written first without the handshake that keeps a fast device from overwriting its
neighbour's buffer before the neighbour has passed it on.

Run: ``.venv/bin/python examples/ch20_devices.py`` (it asks XLA for 4 CPU devices).
"""

import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"  # before jax starts
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import time  # noqa: E402
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
MESH = pl.DeviceIdType.MESH


def all_reduce(handshake: bool):
    """The ring all-reduce (module doc); ``handshake`` adds the capacity semaphore."""

    def kernel(x_ref, o_ref, buf, send_sem, recv_sems, free):
        me = lax.axis_index("x")
        left, right = lax.rem(me + N - 1, N), lax.rem(me + 1, N)
        barrier = pltpu.get_barrier_semaphore()  # meet both neighbours before any copy
        for neighbour in (left, right):
            pl.semaphore_signal(barrier, 1, device_id=(neighbour,), device_id_type=MESH)
        pl.semaphore_wait(barrier, 2)
        buf[0] = x_ref[...]
        o_ref[...] = x_ref[...]
        for s in range(N - 1):
            send, recv = s % 2, (s + 1) % 2
            if handshake and s > 0:
                pl.semaphore_wait(free, 1)  # the right neighbour has passed its buf[recv] on
            copy = pltpu.make_async_remote_copy(
                buf.at[send], buf.at[recv], send_sem, recv_sems.at[recv],
                device_id=(right,), device_id_type=MESH,
            )  # fmt: skip
            copy.start()
            copy.wait_recv()
            o_ref[...] += buf[recv]
            copy.wait_send()
            if handshake and s < N - 2:  # my buf[send] may take the left neighbour's next block
                pl.semaphore_signal(free, 1, device_id=(left,), device_id_type=MESH)

    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        scratch_shapes=[
            pltpu.VMEM((2, 8, 128), jnp.float32),
            pltpu.SemaphoreType.DMA,
            pltpu.SemaphoreType.DMA((2,)),
            pltpu.SemaphoreType.REGULAR,
        ],
        compiler_params=pltpu.CompilerParams(collective_id=0),
    )
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:N]), ("x",))
    return jax.shard_map(call, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)


x = np.random.default_rng(0).integers(-8, 8, (N * 8, 128)).astype(np.float32)
want = np.tile(x.reshape(N, 8, 128).sum(axis=0), (N, 1))  # small integers: exact in any order

print("== 1. Written without the handshake, simulated")
racy = mp.from_jaxpr(jax.make_jaxpr(jax.jit(all_reduce(handshake=False)))(x))
text = str(racy)
print("imported as one program per device, run over the mesh:")
print("  " + next(line.strip() for line in text.splitlines() if "mesh_call" in line))
lines = text.splitlines()
at = next(k for k, line in enumerate(lines) if "dma_start" in line)
print("its first remote copy: from its own row of buf (program_id %12) into the right")
print("neighbour's (%19), counted there; then the send side, on its own send semaphore:")
print("\n".join("  " + line.strip() for line in lines[at - 5 : at + 3]))
try:
    mp.interpret(racy, x, collectives="simulate")
except mp.RaceError as e:
    print("the simulator names the race:")
    print("\n".join("   " + line for line in str(e).splitlines()[:6]))

print("\n== 2. Fixed: a capacity semaphore, signalled by the right neighbour when its slot is free")
fixed_f = all_reduce(handshake=True)
fixed = mp.from_jaxpr(jax.make_jaxpr(jax.jit(fixed_f))(x))
for schedule in ("lockstep", 0, 1, 2):
    (out,) = mp.interpret(fixed, x, collectives="simulate", schedule=schedule)
    print(f"schedule {schedule!s:>8}: every device holds the sum of all shards: "
          f"{np.array_equal(out, want)}")  # fmt: skip
simulated = out

print("\n== 3. Compiled: each remote copy an XLA collective in a shard_map")
compiled = jax.jit(mp.on_devices(fixed_f))
hlo = compiled.lower(x).compile().as_text()
print(f"collective-permutes in XLA's program: {hlo.count('collective-permute(')}")
got = np.asarray(compiled(x))
print(f"the compiled kernel gives the simulator's bits: {np.array_equal(got, simulated)}")


def best_ms(call, repeat=5):
    jax.block_until_ready(call())  # warm-up: tracing and compiling
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        jax.block_until_ready(call())
        times.append(time.perf_counter() - start)
    return min(times) * 1e3


print("\n== 4. Timed (ms per call, best of 5 after a warm-up, 4 CPU devices)")
with pltpu.force_tpu_interpret_mode():
    upstream = jax.jit(all_reduce(handshake=True))
    up_ms = best_ms(lambda: upstream(x))
    print(
        f"upstream's TPU interpret mode gives numpy's result: {np.array_equal(upstream(x), want)}"
    )
sim_ms = best_ms(lambda: mp.interpret(fixed, x, collectives="simulate"))
comp_ms = best_ms(lambda: compiled(x))
print(f"upstream interpret {up_ms:8.2f}")
print(f"minipallas simulate {sim_ms:7.2f}")
print(f"minipallas compiled {comp_ms:7.2f}")
print(f"upstream/compiled {up_ms / comp_ms:.0f}x, upstream/simulate {up_ms / sim_ms:.1f}x")
