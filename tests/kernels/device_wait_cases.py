"""Kernels that span devices for the tests of waits of dynamic size (``copy.wait_recv()`` on a
descriptor over ``pl.ds(0, k * n)``, as upstream's race-detection test waits for every copy it
receives at once), DMA semaphore reads and semaphores passed between kernels
(``tests/ir/interpret/test_device_waits.py``, ``test_dma_semaphore_reads.py``,
``test_device_semaphore_results.py``), run in a process of their own with 4 CPU devices. Each
case prints one JSON line per schedule: ``ok`` (the expected values) or the error's kind and
text.
"""

import json
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from device_cases import on_mesh, print_verdicts
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import minipallas as mp
from minipallas.ir.parser import parse
from minipallas.ir.printer import print_function

warnings.simplefilter("ignore", DeprecationWarning)
N, ROWS = 4, 2
MESH = pl.DeviceIdType.MESH
DMA = pltpu.SemaphoreType.DMA
SCHEDULES = ["lockstep", 0, 1]


def _all_to_all_rows(extra: int, mismatched: bool = False):
    """Every device copies its ``ROWS`` rows into each device's rows ``ROWS * me`` on one
    receive semaphore, then waits for all ``N`` arrivals with one wait of ``ROWS * (N + extra)``
    rows (a size known only at run time); ``extra`` != 0 plants a wrong count."""

    def kernel(x_ref, o_ref, send_sem, recv_sem):
        me = lax.axis_index("x")
        barrier = pltpu.get_barrier_semaphore()  # every device is in the kernel
        for j in range(N):
            pl.semaphore_signal(barrier, 1, device_id=(j,), device_id_type=MESH)
        pl.semaphore_wait(barrier, N)
        copies = [
            pltpu.make_async_remote_copy(x_ref, o_ref.at[pl.ds(me * ROWS, ROWS)], send_sem,
                                         recv_sem, device_id=(j,), device_id_type=MESH)
            for j in range(N)
        ]  # fmt: skip
        for copy in copies:
            copy.start()
        for copy in copies:
            copy.wait_send()
        arrivals = me * 0 + N + extra  # traced: the wait's size is dynamic
        window = o_ref.at[pl.ds(0, ROWS * arrivals)]  # src too: upstream counts the source
        source = x_ref if mismatched else window  # x_ref: one copy's rows, not all of them
        everything = pltpu.make_async_remote_copy(source, window, send_sem, recv_sem,
                                                  device_id=(me,), device_id_type=MESH)  # fmt: skip
        everything.wait_recv()  # the dynamic wait

    return kernel


def _read_semaphores(in_flight: bool):
    """A right permute that adds what its DMA semaphores hold to ``o[0, 0]``: read after both
    waits (0), or the send semaphore read while the copy is in flight (undefined)."""

    def kernel(x_ref, o_ref, send_sem, recv_sem):
        to = (lax.rem(lax.axis_index("x") + 1, N),)
        copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id=to,
                                            device_id_type=MESH)  # fmt: skip
        copy.start()
        held = pl.semaphore_read(send_sem) if in_flight else 0  # the read in flight
        copy.wait()
        held += pl.semaphore_read(send_sem) + pl.semaphore_read(recv_sem)
        o_ref[0, 0] = o_ref[0, 0] + held.astype(jnp.float32)

    return kernel


def _semaphore_between_kernels(waits: int):
    """Upstream's test_no_barrier_semaphore with ``waits`` in place of ``N``: one kernel makes a
    REGULAR semaphore, the next signals it on every device and waits for ``waits`` signals."""

    def make(_):
        pass  # its result is the semaphore; it is made with a count of 0

    def use(x_ref, sem_ref, o_ref):
        for j in range(N):
            pl.semaphore_signal(sem_ref, device_id=(j,), device_id_type=MESH)
        pl.semaphore_wait(sem_ref, waits)  # the wait on the semaphore made before
        o_ref[...] = x_ref[...] + 1

    def body(x):
        semaphore = pl.BlockSpec(memory_space=pltpu.SEMAPHORE)
        sem = pl.pallas_call(make, in_specs=[], out_specs=semaphore,
                             out_shape=pltpu.SemaphoreType.REGULAR(()))()  # fmt: skip
        vmem = pl.BlockSpec(memory_space=pltpu.VMEM)
        return pl.pallas_call(use, in_specs=[vmem, semaphore],
                              out_specs=vmem, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              compiler_params=pltpu.CompilerParams(skip_device_barrier=True),
                              )(x, sem)  # fmt: skip

    mesh = jax.sharding.Mesh(np.array(jax.devices()[:N]), ("x",))
    spec = jax.sharding.PartitionSpec("x")
    return jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False)


def local_halves(n_ref, x_ref, o_ref, sem):
    """One device: two local copies into the halves of ``o``, then one wait for ``n_ref[0]``
    rows (both halves when it holds 8) on a descriptor made only to wait."""
    for half in (0, 1):
        rows = pl.ds(half * 4, 4)
        pltpu.make_async_copy(x_ref.at[rows], o_ref.at[rows], sem).start()
    n = n_ref[0]
    pltpu.make_async_copy(x_ref.at[pl.ds(0, n)], o_ref.at[pl.ds(0, n)], sem).wait()


def _local(interpret: bool):
    any_ = pl.BlockSpec(memory_space=pl.ANY)
    return pl.pallas_call(
        local_halves,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), any_],
        out_specs=any_,
        scratch_shapes=[DMA],
        interpret=pltpu.InterpretParams() if interpret else False,
    )


def _import(fn, *args):
    return mp.from_jaxpr(jax.make_jaxpr(jax.jit(fn))(*args))


def _run(fn, x, schedule):
    (out,) = mp.interpret(_import(fn, x), x, collectives="simulate", schedule=schedule)
    return out


def _text(fn, *args) -> dict:
    """The imported program's text, and whether it prints back the same after a parse."""
    imported = _import(fn, *args)
    text = print_function(imported)
    return {"text": text, "roundtrip": print_function(parse(text)) == text}


def cases():
    """(name, schedules, run(schedule) -> (got, want or None))."""
    x = np.arange(N * ROWS * 128, dtype=np.float32).reshape(N * ROWS, 128)
    want = np.tile(x, (N, 1))  # every device holds every device's rows, in order
    fns = {extra: on_mesh(_all_to_all_rows(extra), (N * ROWS, 128), space=pl.ANY,
                          collective_id=0) for extra in (0, 1, -1)}  # fmt: skip
    yield "all_to_all_one_wait", SCHEDULES, lambda s: (_run(fns[0], x, s), want)
    upstream = on_mesh(
        _all_to_all_rows(0), (N * ROWS, 128), space=pl.ANY, collective_id=0, interpret=True
    )
    yield "all_to_all_one_wait_upstream", ["upstream"], lambda s: (
        np.asarray(jax.jit(upstream)(x)), want)  # fmt: skip
    yield "all_to_all_one_wait_compiled", ["on_devices"], lambda s: (
        np.asarray(jax.jit(mp.on_devices(fns[0]))(x)), want)  # fmt: skip
    yield "wait_one_piece_too_many", SCHEDULES, lambda s: (_run(fns[1], x, s), None)
    yield "wait_one_piece_too_few", SCHEDULES, lambda s: (_run(fns[-1], x, s), None)
    two_sizes = on_mesh(_all_to_all_rows(0, mismatched=True), (N * ROWS, 128), space=pl.ANY,
                        collective_id=0)  # fmt: skip
    yield "wait_descriptor_of_two_sizes", ["import"], lambda s: (_run(two_sizes, x, s), None)
    rolled = np.roll(x.reshape(N, ROWS, 128), 1, axis=0).reshape(x.shape)
    for in_flight in (False, True):
        reads = on_mesh(_read_semaphores(in_flight), (ROWS, 128), space=None)
        name = f"semaphore_read_{'in_flight' if in_flight else 'after_waits'}"
        yield name, SCHEDULES, lambda s, f=reads: (_run(f, x, s), rolled)
    after_waits = on_mesh(_read_semaphores(False), (ROWS, 128), space=None)
    yield "semaphore_read_compiled", ["on_devices"], lambda s: (
        _raised(mp.on_devices(after_waits), x), None)  # fmt: skip
    upstream_reads = on_mesh(_read_semaphores(False), (ROWS, 128), space=None, interpret=True)
    yield "semaphore_read_upstream", ["upstream"], lambda s: (_raised(upstream_reads, x), None)
    for waits, name in ((N, "right_count"), (N + 1, "one_wait_too_many"), (N - 1, "left_over")):
        shared = _semaphore_between_kernels(waits)
        yield f"semaphore_between_kernels_{name}", SCHEDULES, lambda s, f=shared: (
            _run(f, x, s), x + 1)  # fmt: skip
    rows = np.arange(8 * 128, dtype=np.float32).reshape(8, 128)
    for n in (8, 4):
        counted = np.array([n], np.int32)

        def alone(s, n=n, counted=counted):
            fn = _import(_local(False), counted, rows)
            if s == "upstream":
                return np.asarray(jax.jit(_local(True))(counted, rows)), rows
            (out,) = mp.interpret(fn, counted, rows, checks=True)
            return out, rows

        yield f"local_wait_of_{n}_rows", ["alone", "upstream"], alone


def _raised(fn, *args) -> str | None:
    """What ``jax.jit(fn)(*args)`` raises (its type and first line), None when it runs."""
    try:
        jax.jit(fn)(*args)
    except Exception as e:  # upstream's refusal is what the test checks
        return f"{type(e).__name__}: {str(e).splitlines()[0]}"
    return None


def _judge(got, want) -> dict:
    if got is None or isinstance(got, str):
        return {"ok": False, "raised": got}
    ok = want is not None and np.array_equal(got, want)
    return {"ok": ok, "got": None if ok else np.asarray(got).ravel()[:4].tolist()}


def main() -> None:
    print_verdicts(cases(), _judge)
    x = np.zeros((N * ROWS, 128), np.float32)
    f = on_mesh(_all_to_all_rows(0), (N * ROWS, 128), space=pl.ANY, collective_id=0)
    print(json.dumps({"case": "imported_text", **_text(f, x)}))


if __name__ == "__main__":
    main()
