"""Chapter 17: programs that share scratch — collective axes, barriers, races and deadlocks.

``run_scoped(..., collective_axes=("x",))`` asks for one allocation shared by every program
that differs only along grid axis ``"x"``. Upstream JAX rejects it on every path but Mosaic
GPU's thread axes; minipallas rejects it by default too, with upstream's messages, and runs it
under an explicit opt-in: ``pallas_call(..., grid_names=("x",), collectives="simulate")``
runs every program of the grid together in the multi-program interpreter.

The kernel: each of 8 programs writes its row into a shared (8, 128) buffer, meets the others
at a barrier, then reduces the whole buffer. Two broken variants show what the simulator
reports: without the barrier, a race (both ops' lines and both programs); with one program
skipping the barrier, a deadlock.

Semaphores synchronize without a barrier: in the ring, each program signals that its row is in
the shared buffer and waits for its left neighbour's signal before copying that row. Without
the wait it is a race; waiting for two signals where one comes is a deadlock.

Run: ``.venv/bin/python examples/ch17_collectives.py``.
"""

import numpy as np

import minipallas as mp
import minipallas.numpy as jnp
from minipallas import tpu

N = 8


def shared_sum(x_ref, o_ref, *, barrier=True, skipper=None):
    def body(shared):
        i = mp.axis_index("x")
        shared[mp.ds(i, 1), :] = x_ref[...]
        if skipper is None and barrier:
            mp.barrier("x")
        elif skipper is not None:

            @mp.when(i != skipper)
            def _():
                mp.barrier("x")
                o_ref[...] = shared[...].sum(axis=0, keepdims=True)

            return
        o_ref[...] = shared[...].sum(axis=0, keepdims=True)

    mp.run_scoped(body, tpu.VMEM((N, 128), jnp.float32), collective_axes=("x",))


def ring(x_ref, o_ref, *, wait=1):
    def body(shared, sems):
        i = mp.axis_index("x")
        shared[mp.ds(i, 1), :] = x_ref[...]
        mp.semaphore_signal(sems.at[i])  # my row is in
        left = jnp.where(i == 0, N - 1, i - 1)
        if wait:
            mp.semaphore_wait(sems.at[left], wait)  # until the left neighbour's row is
        o_ref[...] = shared[mp.ds(left, 1), :]

    mp.run_scoped(body, tpu.VMEM((N, 128), jnp.float32), tpu.SemaphoreType.REGULAR((N,)),
                  collective_axes=("x",))  # fmt: skip


def call(kernel, **options):
    spec = mp.BlockSpec((1, 128), lambda i: (i, 0))
    out = mp.ArrayType((N, 128), jnp.float32)
    return mp.pallas_call(kernel, out, grid=(N,), in_specs=[spec], out_specs=spec,
                          grid_names=("x",), **options)  # fmt: skip


def main() -> None:
    x = np.random.default_rng(0).standard_normal((N, 128)).astype(np.float32)

    print("--- by default: upstream's error ---")
    try:
        call(shared_sum)(x)
    except mp.MiniPallasError as e:
        print(f"{type(e).__name__}: {e}")

    print("--- collectives='simulate': every program together ---")
    out = call(shared_sum, collectives="simulate")(x)
    total = np.zeros(128, np.float32)
    for row in x:
        total = total + row
    assert out.tobytes() == np.broadcast_to(total, (N, 128)).tobytes()
    print("every row holds the sum of all rows, bit for bit: True")
    for seed in range(3):
        again = call(shared_sum).simulate(x, schedule=seed)
        assert again.tobytes() == out.tobytes()
    print("the same bits under random interleavings too: True")

    print("--- without the barrier: a race ---")
    try:
        call(lambda a, b: shared_sum(a, b, barrier=False), collectives="simulate")(x)
        raise AssertionError("the race went unreported")
    except mp.RaceError as e:
        print(e)
        for which, (op, loc, program) in (("first", e.first), ("second", e.second)):
            where = f"{loc.file.rsplit('/')[-1]}:{loc.line}"
            print(f"{which} access: '{op}' at {where}, program {program}")

    print("--- program 5 skips the barrier: a deadlock ---")
    try:
        call(lambda a, b: shared_sum(a, b, skipper=5), collectives="simulate")(x)
        raise AssertionError("the deadlock went unreported")
    except mp.DeadlockError as e:
        print(e)

    print("--- semaphores: a ring, no barrier ---")
    out = call(ring, collectives="simulate")(x)
    assert out.tobytes() == np.roll(x, 1, axis=0).tobytes()
    print("each program holds its left neighbour's row: True")
    try:
        call(lambda a, b: ring(a, b, wait=0), collectives="simulate")(x)
        raise AssertionError("the race went unreported")
    except mp.RaceError as e:
        print(f"without the wait: {e.message}")
    try:
        call(lambda a, b: ring(a, b, wait=2), collectives="simulate")(x)
        raise AssertionError("the deadlock went unreported")
    except mp.DeadlockError as e:
        print(f"waiting for 2 signals: {e.message[:120]}...")


if __name__ == "__main__":
    main()
