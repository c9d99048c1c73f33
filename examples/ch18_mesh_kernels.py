"""Chapter 18: upstream's mesh kernels, the programs minipallas was founded for.

Upstream JAX writes kernels whose programs share memory as *mesh kernels*: ``pl.kernel(body,
out_type=..., mesh=pltpu.create_tensorcore_mesh("core", num_cores=2))`` runs ``body`` once on
each TensorCore, ``lax.axis_index("core")`` says which, ``pl.run_scoped(...,
collective_axes="core")`` allocates memory the cores share (``pltpu.VMEM_SHARED``) and
semaphores, and ``pltpu.core_barrier`` meets the other cores. Upstream refuses every such kernel
off a multi-core chip: its interpret mode, its TPU interpret mode and its Mosaic lowering all
raise on the collective ``run_scoped``.

minipallas imports the kernel (``from_jaxpr``: a ``mesh_call`` op over the mesh) onto its one
model of programs that run together (chapter 17): by default it refuses it too, with upstream's
message; under ``collectives="simulate"`` the cores run together in the multi-program
interpreter, and the discharged program (the cores' epochs in turn) gives the same bits on
XLA. A missing barrier is a race naming both cores; a barrier one core skips is a deadlock
naming it; a signal to another core's semaphore (``core_index``) is a handoff, and the
one-program form runs the producer before the consumer.

Run: ``.venv/bin/python examples/ch18_mesh_kernels.py``.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import minipallas as mp
from minipallas.lowering.runtime.libtpu import quiet_libtpu

quiet_libtpu()  # the mesh asks jax for devices, loading libtpu: on a machine with no chip, quietly
CORES, ROWS = 2, 8


def kernel(barrier="all", **options):
    """Each core copies its rows into one shared buffer, meets the other at core_barrier, then
    writes the sum of both cores' rows into its own rows of the output; ``options`` go to
    ``pl.kernel`` (``interpret=True``)."""
    mesh = pltpu.create_tensorcore_mesh("core", num_cores=CORES)

    def body(x_ref, o_ref):
        def scoped(shared, sem):
            c = jax.lax.axis_index("core")
            mine = pl.ds(c * ROWS, ROWS)
            pltpu.sync_copy(x_ref.at[mine], shared.at[mine])
            if barrier == "all":
                pltpu.core_barrier(sem, core_axis_name="core")
            elif barrier == "core 0 only":
                pl.when(c == 0)(lambda: pltpu.core_barrier(sem, core_axis_name="core"))
            o_ref[mine, :] = shared[pl.ds(0, ROWS), :] + shared[pl.ds(ROWS, ROWS), :]

        shared = pltpu.VMEM_SHARED((CORES * ROWS, 128), jnp.float32)
        pl.run_scoped(scoped, shared, pltpu.SemaphoreType.REGULAR, collective_axes="core")

    out = jax.ShapeDtypeStruct((CORES * ROWS, 128), jnp.float32)
    return lambda x: pl.kernel(body, out_type=out, mesh=mesh, **options)(x)


def handoff(x_ref, o_ref):
    """Core 0 writes a tile into shared memory and signals core 1's semaphore; core 1 waits."""

    def scoped(shared, sem):
        c = jax.lax.axis_index("core")

        @pl.when(c == 0)
        def _():
            shared[...] = x_ref[pl.ds(0, ROWS), :] * 2
            pl.semaphore_signal(sem, 1, core_index=1)

        @pl.when(c == 1)
        def _():
            pl.semaphore_wait(sem, 1)
            o_ref[...] = shared[...] + 1

    pl.run_scoped(scoped, pltpu.VMEM_SHARED((ROWS, 128), jnp.float32),
                  pltpu.SemaphoreType.REGULAR, collective_axes="core")  # fmt: skip


def main() -> None:
    x = np.random.default_rng(0).standard_normal((CORES * ROWS, 128)).astype(np.float32)
    expected = np.concatenate([x[:ROWS] + x[ROWS:]] * CORES)

    print("--- upstream, interpret=True ---")
    try:
        kernel(interpret=True)(x)
    except NotImplementedError as e:
        print(f"NotImplementedError: {e}")

    print("--- imported: a mesh_call over the cores ---")
    fn = mp.from_jaxpr(jax.make_jaxpr(kernel())(x))
    print(fn)

    print("--- by default: upstream's error ---")
    try:
        mp.interpret(fn, x)
    except mp.MiniPallasError as e:
        print(f"{type(e).__name__}: {e}")

    print("--- collectives='simulate': the cores together ---")
    (out,) = mp.interpret(fn, x, collectives="simulate")
    assert out.tobytes() == expected.tobytes()
    print("each core's rows hold the sum of both cores' rows, bit for bit: True")
    for seed in range(3):
        (again,) = mp.interpret(fn, x, collectives="simulate", schedule=seed)
        assert again.tobytes() == out.tobytes()
    print("the same bits under random interleavings too: True")
    pure = mp.discharge(fn, collectives="simulate")
    (compiled,) = mp.compile(pure)(x)
    assert np.asarray(compiled).tobytes() == expected.tobytes()
    print("discharged and compiled by XLA, the same bits: True")

    print("--- without core_barrier: a race ---")
    try:
        mp.interpret(mp.from_jaxpr(jax.make_jaxpr(kernel("none"))(x)), x, collectives="simulate")
        raise AssertionError("the race went unreported")
    except mp.RaceError as e:
        print(e.message)

    print("--- core 1 skips core_barrier: a deadlock ---")
    try:
        skipped = mp.from_jaxpr(jax.make_jaxpr(kernel("core 0 only"))(x))
        mp.interpret(skipped, x, collectives="simulate")
        raise AssertionError("the deadlock went unreported")
    except mp.DeadlockError as e:
        print(e.message.split(" (they would")[0])

    print("--- a handoff: core 0 signals core 1's semaphore ---")
    mesh = pltpu.create_tensorcore_mesh("core", num_cores=CORES)
    out = jax.ShapeDtypeStruct((ROWS, 128), jnp.float32)
    fn = mp.from_jaxpr(jax.make_jaxpr(pl.kernel(handoff, out_type=out, mesh=mesh))(x))
    (simulated,) = mp.interpret(fn, x, collectives="simulate")
    (compiled,) = mp.compile(mp.discharge(fn, collectives="simulate"))(x)
    assert simulated.tobytes() == np.asarray(compiled).tobytes() == (x[:ROWS] * 2 + 1).tobytes()
    print("core 1 reads what core 0 wrote, simulated and compiled (core 0 first): True")


if __name__ == "__main__":
    main()
