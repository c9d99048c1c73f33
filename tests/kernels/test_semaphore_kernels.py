"""Semaphores in kernels: scratch semaphores on the CPU path agree with upstream's
``interpret=True`` bit for bit (they start at 0 and keep counting across grid steps); shared
ones synchronize programs under ``collectives="simulate"``; the one-program form refuses shared
ones; Triton rejects them with upstream's message."""

import jax
import jax.numpy as jjnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import minipallas as mp
import minipallas.numpy as jnp
from minipallas import tpu
from minipallas.ir.collectives import TritonSemaphoreUnsupported
from minipallas.ir.errors import TraceError
from minipallas.kernels.collective.program import collective_program

I32 = jnp.int32


def _counting(sig, wait, read):
    """One kernel in either API (``sig``/``wait``/``read`` are minipallas's or upstream's): the
    semaphore gains x[0] and loses 1 per step; each step writes its count."""

    def kernel(x_ref, o_ref, sem):
        sig(sem, x_ref[0])
        wait(sem, 1)
        o_ref[0] = read(sem)

    return kernel


def test_scratch_semaphores_count_across_grid_steps_as_upstreams_do():
    x = np.array([3], np.int32)
    ours = mp.pallas_call(
        _counting(mp.semaphore_signal, mp.semaphore_wait, mp.semaphore_read),
        mp.ArrayType((4,), I32),
        grid=(4,),
        in_specs=[mp.BlockSpec((1,), lambda i: (0,), memory_space=tpu.SMEM)],
        out_specs=mp.BlockSpec((1,), lambda i: (i,), memory_space=tpu.SMEM),
        scratch_shapes=[tpu.SemaphoreType.REGULAR],
    )(x)
    upstream = pl.pallas_call(
        _counting(pl.semaphore_signal, pl.semaphore_wait, pl.semaphore_read),
        out_shape=jax.ShapeDtypeStruct((4,), jjnp.int32),
        grid=(4,),
        in_specs=[pl.BlockSpec((1,), lambda i: (0,), memory_space=pltpu.SMEM)],
        out_specs=pl.BlockSpec((1,), lambda i: (i,), memory_space=pltpu.SMEM),
        scratch_shapes=[pltpu.SemaphoreType.REGULAR],
        interpret=True,
    )(x)
    assert np.asarray(ours).tobytes() == np.asarray(upstream).tobytes()
    assert np.asarray(ours).tolist() == [2, 4, 6, 8]


def _ring(n):
    """Program i puts its row in shared scratch and signals semaphore i, waits on its left
    neighbour's, and copies that row out."""

    def kernel(x_ref, o_ref):
        def body(shared, sems):
            i = mp.axis_index("x")
            shared[mp.ds(i, 1), :] = x_ref[...]
            mp.semaphore_signal(sems.at[i])
            left = jnp.where(i == 0, n - 1, i - 1)
            mp.semaphore_wait(sems.at[left])
            o_ref[...] = shared[mp.ds(left, 1), :]

        mp.run_scoped(body, tpu.VMEM((n, 128), jnp.float32), tpu.SemaphoreType.REGULAR((n,)),
                      collective_axes=("x",))  # fmt: skip

    spec = mp.BlockSpec((1, 128), lambda i: (i, 0))
    return mp.pallas_call(kernel, mp.ArrayType((n, 128), jnp.float32), grid=(n,),
                          in_specs=[spec], out_specs=spec, grid_names=("x",),
                          collectives="simulate")  # fmt: skip


@pytest.mark.parametrize("schedule", ["lockstep", 0, 1])
def test_shared_semaphores_pass_rows_around_a_ring_under_simulate(schedule):
    x = np.random.default_rng(0).standard_normal((8, 128)).astype(np.float32)
    out = _ring(8).simulate(x, schedule=schedule)
    assert out.tobytes() == np.roll(x, 1, axis=0).tobytes()


def test_the_one_program_form_refuses_a_ring_of_handoffs_with_a_fix():
    """Every program signals, then waits for its neighbour: no order runs them one by one
    (``collective/handoffs.py``)."""
    x = np.zeros((4, 128), np.float32)
    with pytest.raises(TraceError, match=r"programs \[0, 1, 2, 3\] wait for each other") as e:
        _ring(4).lower(x)
    assert "core_barrier" in e.value.fix and "multi-program interpreter" in e.value.fix


def test_triton_rejects_semaphores_with_upstreams_message():
    call = mp.pallas_call(
        _counting(mp.semaphore_signal, mp.semaphore_wait, mp.semaphore_read),
        mp.ArrayType((4,), I32),
        grid=(4,),
        in_specs=[mp.BlockSpec((1,), lambda i: (0,))],
        out_specs=mp.BlockSpec((1,), lambda i: (i,)),
        scratch_shapes=[tpu.SemaphoreType.REGULAR],
    )
    with pytest.raises(TritonSemaphoreUnsupported) as e:
        call.lower(np.array([3], np.int32), target="gpu")
    assert str(e.value) == (
        "Unimplemented primitive in Pallas Triton lowering: semaphore_signal. Please file an "
        "issue at https://github.com/jax-ml/jax/issues/new/choose."
    )
    assert isinstance(e.value, NotImplementedError) and e.value.op == "semaphore_signal"
    assert "test_semaphore_kernels.py" in str(e.value.loc)


@pytest.mark.parametrize("batched", [False, True])
def test_private_scratch_semaphores_of_a_collective_kernel_have_a_one_program_form(batched):
    """Each program's own scratch semaphore is its row of the group's array: the one-program
    form counts as the simulator does."""

    def kernel(x_ref, o_ref, sem):
        def body(shared):
            i = mp.axis_index("x")
            mp.semaphore_signal(sem, i + 2)
            shared[mp.ds(i, 1), :] = x_ref[...]
            mp.barrier("x")
            mp.semaphore_wait(sem, 1)
            o_ref[...] = shared[...].sum(axis=0, keepdims=True) * mp.semaphore_read(sem).astype(
                jnp.float32
            )

        mp.run_scoped(body, tpu.VMEM((4, 128), jnp.float32), collective_axes=("x",))

    spec = mp.BlockSpec((1, 128), lambda i: (i, 0))
    call = mp.pallas_call(kernel, mp.ArrayType((4, 128), jnp.float32), grid=(4,),
                          in_specs=[spec], out_specs=spec, grid_names=("x",),
                          collectives="simulate",
                          scratch_shapes=[tpu.SemaphoreType.REGULAR])  # fmt: skip
    x = np.random.default_rng(2).standard_normal((4, 128)).astype(np.float32)
    simulated = call(x)
    program = collective_program(call.trace(x), call.grid_names, batched=batched)
    (compiled,) = mp.compile(program)(x)
    assert np.asarray(compiled).tobytes() == simulated.tobytes()
    total = np.zeros(128, np.float32)
    for r in x:
        total = total + r
    counts = np.arange(4, dtype=np.float32)[:, None] + 1.0  # i + 2 signalled, 1 waited
    assert simulated.tobytes() == (total * counts).tobytes()
