"""Semaphores in the interpreter: counters in one program, and the synchronization of programs
that run together (``collectives="simulate"``): waits block, signals order accesses, a wait no
signal satisfies is a deadlock, and an unsynchronized handoff is a race."""

import numpy as np
import pytest
from programs_helpers import N, rows, simulate

import minipallas as mp
import minipallas.numpy as jnp
from minipallas import tpu
from minipallas.ir.errors import DeadlockError, InterpretError, RaceError, TraceError

F32, I32 = jnp.float32, jnp.int32
ROWS = (mp.RefType((N, 8), F32), mp.RefType((N, 8), F32))
SCHEDULES = ["lockstep", 0, 1, 2, 3, 4]


def _counts():
    """Signals and waits of one program on its own semaphores, read back."""

    def kernel(o_ref):
        def body(sems):
            mp.semaphore_signal(sems.at[1], 3)
            mp.semaphore_signal(sems.at[0])
            mp.semaphore_wait(sems.at[1], 2)
            mp.semaphore_wait(sems.at[0], 1, decrement=False)
            o_ref[0] = mp.semaphore_read(sems.at[0])
            o_ref[1] = mp.semaphore_read(sems.at[1])

        mp.run_scoped(body, tpu.SemaphoreType.REGULAR((2,)))

    return mp.trace(kernel, mp.RefType((2,), I32))


def test_one_program_counts_and_discharge_gives_the_same_counts():
    out = np.zeros(2, np.int32)
    mp.interpret(_counts(), out)
    assert out.tolist() == [1, 1]  # 0+1 kept by the keeping wait; 3-2
    discharged = mp.discharge(_counts())
    mp.verify(discharged)
    (again,) = mp.interpret(discharged, np.zeros(2, np.int32))
    assert again.tolist() == [1, 1]
    (compiled,) = mp.compile(_counts())(np.zeros(2, np.int32))
    assert np.asarray(compiled).tolist() == [1, 1]


def test_a_wait_nothing_can_satisfy_is_a_deadlock_at_its_line():
    def kernel(o_ref):
        def body(sem):
            mp.semaphore_signal(sem)
            mp.semaphore_wait(sem, 2)

        mp.run_scoped(body, tpu.SemaphoreType.REGULAR)

    with pytest.raises(DeadlockError) as e:
        mp.interpret(mp.trace(kernel, mp.RefType((), I32)), np.zeros((), np.int32))
    assert e.value.op == "semaphore_wait"
    assert "test_semaphores.py" in str(e.value.loc)
    assert "waits for 2 on a semaphore that holds 1" in e.value.message


def _handoff(wait: bool = True, value: int = 1):
    """Program i writes its row of shared scratch and signals semaphore i; it then waits on its
    left neighbour's semaphore and copies that row: a ring with no barrier."""

    def kernel(x_ref, o_ref):
        def body(shared, sems):
            i = mp.axis_index("x")
            shared[mp.ds(i, 1), :] = x_ref[mp.ds(i, 1), :] * 2.0
            mp.semaphore_signal(sems.at[i])
            left = jnp.where(i == 0, N - 1, i - 1)
            if wait:
                mp.semaphore_wait(sems.at[left], value)
            o_ref[mp.ds(i, 1), :] = shared[mp.ds(left, 1), :]

        mp.run_scoped(body, tpu.VMEM((N, 8), F32), tpu.SemaphoreType.REGULAR((N,)),
                      collective_axes=("x",))  # fmt: skip

    return mp.trace(kernel, *ROWS)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_signal_orders_the_handoff_under_every_schedule(schedule):
    x, out = rows(), np.zeros((N, 8), np.float32)
    simulate(_handoff(), x, out, schedule=schedule)
    assert out.tobytes() == np.roll(x * 2.0, 1, axis=0).tobytes()


def test_without_the_wait_the_handoff_is_a_race_naming_both_ops():
    with pytest.raises(RaceError) as e:
        simulate(_handoff(wait=False), rows(), np.zeros((N, 8), np.float32))
    err = e.value
    assert (err.first[0], err.second[0]) == ("swap", "get")
    assert err.first[2] != err.second[2]
    assert "no barrier or semaphore wait between them" in err.message


@pytest.mark.parametrize("seed", range(6))
def test_without_the_wait_random_schedules_report_a_race_or_an_unwritten_read(seed):
    with pytest.raises(InterpretError, match="shared|never written"):
        simulate(_handoff(wait=False), rows(), np.zeros((N, 8), np.float32), schedule=seed)


def test_a_wait_for_more_than_is_signalled_is_a_deadlock_naming_every_program():
    with pytest.raises(DeadlockError) as e:
        simulate(_handoff(value=2), rows(), np.zeros((N, 8), np.float32))
    err = e.value
    assert err.op == "semaphore_wait" and "test_semaphores.py" in str(err.loc)
    assert "waits for 2 on a semaphore that holds 1" in err.message
    for other in ("(1,)", "(2,)", "(3,)"):
        assert f"{other} waits at semaphore_wait" in err.message
    assert "signal" in err.fix


def test_a_signal_orders_only_what_came_before_it():
    """Program 0 writes both rows, signals, then writes row 1 again; program 1 waits and reads
    both rows: the last write is not ordered before the read, so it is a race."""

    def kernel(x_ref, o_ref):
        def body(shared, sem):
            i = mp.axis_index("x")

            @mp.when(i == 0)
            def _():
                shared[0:2, :] = x_ref[0:2, :]
                mp.semaphore_signal(sem)
                shared[1:2, :] = x_ref[1:2, :]

            @mp.when(i == 1)
            def _():
                mp.semaphore_wait(sem)
                o_ref[0:2, :] = shared[0:2, :]

        mp.run_scoped(body, tpu.VMEM((2, 8), F32), tpu.SemaphoreType.REGULAR,
                      collective_axes=("x",))  # fmt: skip

    fn = mp.trace(kernel, mp.RefType((2, 8), F32), mp.RefType((2, 8), F32))
    args = dict(grid=(2,), grid_names=("x",), collectives="simulate")
    with pytest.raises(RaceError) as e:
        mp.interpret(fn, rows()[:2], np.zeros((2, 8), np.float32), **args)
    assert "element [1, 0]" in e.value.message


def test_a_barrier_waiting_on_a_blocked_program_is_reported_with_its_semaphore():
    def kernel(o_ref):
        def body(sem):
            i = mp.axis_index("x")

            @mp.when(i == 0)
            def _():
                mp.semaphore_wait(sem)

            mp.barrier("x")

        mp.run_scoped(body, tpu.SemaphoreType.REGULAR, collective_axes=("x",))

    fn = mp.trace(kernel, mp.RefType((), I32))
    with pytest.raises(DeadlockError) as e:
        mp.interpret(fn, np.zeros((), np.int32), grid=(2,), grid_names=("x",),
                     collectives="simulate")  # fmt: skip
    assert e.value.op == "barrier"
    assert "(0,) waits at semaphore_wait" in e.value.message and "holds 0" in e.value.message


def test_misuse_is_a_trace_error_with_a_fix():
    def signal_memory(o_ref):
        mp.semaphore_signal(o_ref)

    with pytest.raises(TraceError, match="takes a semaphore ref") as e:
        mp.trace(signal_memory, mp.RefType((), I32))
    assert "SemaphoreType.REGULAR" in e.value.fix

    def signal_array(o_ref):
        mp.run_scoped(lambda s: mp.semaphore_signal(s), tpu.SemaphoreType.REGULAR((2,)))

    with pytest.raises(TraceError, match="one semaphore") as e:
        mp.trace(signal_array, mp.RefType((), I32))
    assert "sem.at[i]" in e.value.fix

    def read_as_memory(o_ref):
        mp.run_scoped(lambda s: o_ref.__setitem__((), s[...]), tpu.SemaphoreType.REGULAR)

    with pytest.raises(TraceError, match="not memory"):
        mp.trace(read_as_memory, mp.RefType((), I32))

    with pytest.raises(mp.MiniPallasError, match="int32"):
        tpu.SemaphoreType.REGULAR((2,), jnp.float32)
