"""Races, deadlocks and schedule dependence of kernels that span devices (issue 47, item 2), run
by ``tests/ir/interpret/test_device_races.py`` in a process of its own with 4 CPU devices
(``run_cases`` in ``tests/device_cases.py``: jax sees them only when ``XLA_FLAGS`` says so before
it starts). Each case prints one JSON line per schedule: its name, and ``ok`` (numpy's result)
or the error's kind and text.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
from device_cases import on_mesh, print_verdicts
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import minipallas as mp

warnings.simplefilter("ignore", DeprecationWarning)
N = 4
MESH = pl.DeviceIdType.MESH
DMA, REGULAR = pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.REGULAR
F32 = jnp.float32
SCHEDULES = ["lockstep", 0, 1]


def _copy(src, dst, send, recv, to):
    return pltpu.make_async_remote_copy(src, dst, send, recv, device_id=(to,), device_id_type=MESH)


def _right():
    return lax.rem(lax.axis_index("x") + 1, N)


def _left():
    return lax.rem(lax.axis_index("x") + N - 1, N)


def write_source_before_send_wait(x_ref, o_ref, send_sem, recv_sem):
    """Item 1: the source is written while its copy may still be reading it."""
    copy = _copy(x_ref, o_ref, send_sem, recv_sem, _right())
    copy.start()  # item 1: the copy
    x_ref[...] = jnp.zeros_like(x_ref)  # the race: before wait_send
    copy.wait_send()
    copy.wait_recv()


def read_source_before_send_wait(x_ref, o_ref, scratch, send_sem, recv_sem):
    """Reading a copy's source while it is sent is fine: only writing it races."""
    copy = _copy(x_ref, o_ref, send_sem, recv_sem, _right())
    copy.start()
    scratch[...] = x_ref[...] * 2.0
    copy.wait()
    o_ref[...] = o_ref[...] + scratch[...]


def wait_with_another_dtype(x_ref, o_ref, scratch, send_sem, recv_sem):
    """Item 2: the receive wait is written with a bf16[16, 128] descriptor, as many bytes as the
    f32[8, 128] copy that arrives but twice its elements: bytes satisfy it, as on the chip."""
    copy = _copy(x_ref, o_ref, send_sem, recv_sem, _right())
    copy.start()
    copy.wait_send()
    pltpu.make_async_copy(scratch, scratch, recv_sem).wait()


def _handshake():
    """Every device tells both neighbours it got here, and waits for both."""
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(_left(),), device_id_type=MESH)
    pl.semaphore_signal(barrier, 1, device_id=(_right(),), device_id_type=MESH)
    pl.semaphore_wait(barrier, 2)


def _both_ways(one_semaphore: bool):
    """Item 3: each device sends its shard to both neighbours, into slot 0 (from the left) and
    slot 1 (from the right); after a handshake both copies into a device are in flight."""

    def kernel(x_ref, o_ref, send_sem, recv_sem):
        to_right = _copy(x_ref, o_ref.at[0], send_sem.at[0], recv_sem.at[0], _right())
        slot = 0 if one_semaphore else 1
        to_left = _copy(x_ref, o_ref.at[1], send_sem.at[1], recv_sem.at[slot], _left())
        to_right.start()
        to_left.start()
        _handshake()
        to_right.wait_recv()  # meant for the copy from the left, into slot 0
        o_ref[2] = o_ref[0] + 1.0  # the race when both share one semaphore
        to_left.wait_recv()
        to_right.wait_send()
        to_left.wait_send()
        o_ref[3] = o_ref[1]

    return kernel


def _ring_all_gather(per_step: bool):
    """A ring all-gather: at step k each device forwards the slot it received at step k - 1.
    With one receive semaphore the left neighbour's copy of step k + 1 may arrive before the
    device's wait for step k, and satisfy it (item 3; upstream's TPU interpret mode returns
    NaNs in 4-6k of its 16k elements, varying run to run); a semaphore per step fixes it."""

    def kernel(x_ref, o_ref, send_sem, recv_sem):
        me = lax.axis_index("x")
        o_ref[me] = x_ref[...]
        for step in range(N - 1):
            slot = lax.rem(me + N - step, N)
            recv = recv_sem.at[step] if per_step else recv_sem
            copy = _copy(o_ref.at[slot], o_ref.at[slot], send_sem, recv, _right())
            copy.start()  # the ring's copy
            copy.wait_send()
            copy.wait_recv()  # the ring's wait

    return kernel


def arrivals_counted(x_ref, o_ref, sem):
    """Item 4: device 0 writes how many signals had arrived when it looked: no access races,
    yet the result depends on the order the devices ran in."""
    me = lax.axis_index("x")

    @pl.when(me != 0)
    def _():
        pl.semaphore_signal(sem, 1, device_id=(0,), device_id_type=MESH)

    o_ref[...] = x_ref[...] + pl.semaphore_read(sem).astype(F32)

    @pl.when(me == 0)
    def _():
        pl.semaphore_wait(sem, N - 1)


def odd_ones_receive(x_ref, o_ref, send_sem, recv_sem):
    """Item 5: even devices send right; every device waits to receive from its left, so the
    odd ones finish and the even ones wait forever."""
    copy = _copy(x_ref, o_ref, send_sem, recv_sem, _right())

    @pl.when(lax.rem(lax.axis_index("x"), 2) == 0)
    def _():
        copy.start()
        copy.wait_send()

    copy.wait_recv()  # the even ones wait forever


def never_signalled(x_ref, o_ref, sem):
    """Item 5: device 2 waits on a semaphore no device signals; the others finish."""
    o_ref[...] = x_ref[...]

    @pl.when(lax.axis_index("x") == 2)
    def _():
        pl.semaphore_wait(sem, 1)


def receive_never_waited(x_ref, o_ref, send_sem, recv_sem):
    """The kernel ends with each copy possibly still landing in its target's output."""
    copy = _copy(x_ref, o_ref, send_sem, recv_sem, _right())
    copy.start()  # never received
    copy.wait_send()


def token_left_over(x_ref, o_ref, sem):
    """Device 0 passes its right neighbour two tokens; one wait takes one of them."""
    me = lax.axis_index("x")
    pl.semaphore_signal(sem, 1, device_id=(_right(),), device_id_type=MESH)

    @pl.when(me == 0)
    def _():
        pl.semaphore_signal(sem, 1, device_id=(_right(),), device_id_type=MESH)  # the extra one

    pl.semaphore_wait(sem, 1)
    o_ref[...] = x_ref[...]


def _run(fn, x, schedule):
    imported = mp.from_jaxpr(jax.make_jaxpr(jax.jit(fn))(x))
    (out,) = mp.interpret(imported, x, collectives="simulate", schedule=schedule)
    return out


def cases():
    """(name, schedules, run(schedule) -> (got, want or None))."""
    x = np.arange(N * 8 * 128, dtype=np.float32).reshape(N * 8, 128)
    shards = x.reshape(N, 8, 128)
    rolled = np.roll(shards, 1, axis=0).reshape(x.shape)
    two = [DMA, DMA]
    f = on_mesh(write_source_before_send_wait, (8, 128), two)
    yield "write_source_before_send_wait", SCHEDULES, lambda s: (_run(f, x, s), None)
    r = on_mesh(read_source_before_send_wait, (8, 128), [pltpu.VMEM((8, 128), F32), *two])
    summed = (np.roll(shards, 1, axis=0) + 2.0 * shards).reshape(x.shape)
    yield "read_source_before_send_wait", [*SCHEDULES, 2, 3], lambda s: (_run(r, x, s), summed)
    g = on_mesh(wait_with_another_dtype, (8, 128), [pltpu.VMEM((16, 128), jnp.bfloat16), *two])
    yield "wait_with_another_dtype", SCHEDULES, lambda s: (_run(g, x, s), rolled)
    upstream = on_mesh(wait_with_another_dtype, (8, 128),
                           [pltpu.VMEM((16, 128), jnp.bfloat16), *two], interpret=True)  # fmt: skip
    yield "wait_with_another_dtype_upstream", ["upstream"], lambda s: (
        np.asarray(jax.jit(upstream)(x)), rolled)  # fmt: skip
    both = [DMA((2,)), DMA((2,))]
    want = np.stack([np.roll(shards, 1, 0), np.roll(shards, -1, 0)], axis=1)
    want = np.concatenate([want, want[:, :1] + 1.0, want[:, 1:]], axis=1).reshape(N * 4, 8, 128)
    racy = on_mesh(_both_ways(True), (4, 8, 128), both, collective_id=0)
    yield "two_copies_one_receive_semaphore", SCHEDULES, lambda s: (_run(racy, x, s), None)
    fixed = on_mesh(_both_ways(False), (4, 8, 128), both, collective_id=0)
    yield "two_copies_two_receive_semaphores", SCHEDULES, lambda s: (_run(fixed, x, s),
                                                                     want)  # fmt: skip
    gather = np.tile(shards, (N, 1, 1))
    ring = on_mesh(_ring_all_gather(False), (N, 8, 128), two, space=None)
    yield "ring_all_gather_one_receive_semaphore", SCHEDULES, lambda s: (_run(ring, x, s), None)
    per_step = [DMA, DMA((N - 1,))]
    fixed_ring = on_mesh(_ring_all_gather(True), (N, 8, 128), per_step, space=None)
    yield "ring_all_gather_per_step", SCHEDULES, lambda s: (_run(fixed_ring, x, s), gather)
    upstream_ring = on_mesh(_ring_all_gather(True), (N, 8, 128), per_step, space=None,
                                interpret=True)  # fmt: skip
    yield "ring_all_gather_per_step_upstream", ["upstream"], lambda s: (
        np.asarray(jax.jit(upstream_ring)(x)), gather)  # fmt: skip
    counted = on_mesh(arrivals_counted, (8, 128), [REGULAR])
    yield "arrivals_counted", [[0, 1, 2, 3, 4, 5]], lambda s: (_run(counted, x, s), None)
    yield "arrivals_counted_one_schedule", [[0, 0]], lambda s: (_run(counted, x, s), None)
    odd = on_mesh(odd_ones_receive, (8, 128), two)
    yield "odd_ones_receive", SCHEDULES, lambda s: (_run(odd, x, s), None)
    unreceived = on_mesh(receive_never_waited, (8, 128), two)
    yield "receive_never_waited", SCHEDULES, lambda s: (_run(unreceived, x, s), None)
    left_over = on_mesh(token_left_over, (8, 128), [REGULAR])
    yield "token_left_over", SCHEDULES, lambda s: (_run(left_over, x, s), None)
    never = on_mesh(never_signalled, (8, 128), [REGULAR])
    yield "never_signalled", SCHEDULES, lambda s: (_run(never, x, s), None)


def _judge(got, want) -> dict:
    ok = want is not None and np.array_equal(got, want)
    return {"ok": ok, "got": None if ok else np.asarray(got).ravel()[:4].tolist()}


def main() -> None:
    print_verdicts(cases(), _judge)


if __name__ == "__main__":
    main()
