"""The multi-program interpreter (``collectives="simulate"``): shared collective allocations,
barriers, and the races, deadlocks and skipped allocations it reports (issue 15)."""

import numpy as np
import pytest
from programs_helpers import N, rows, simulate

import minipallas as mp
import minipallas.numpy as jnp
from minipallas import tpu
from minipallas.ir.collectives import CollectiveAxesUnsupported
from minipallas.ir.errors import DeadlockError, InterpretError, RaceError

F32 = jnp.float32
REFS = (mp.RefType((N, 8), F32), mp.RefType((N, 8), F32))
SCHEDULES = ["lockstep", 0, 1, 2, 3]


def _shared_sum(barrier: bool = True):
    """Each program writes its row of a shared buffer, meets the others, sums the buffer."""

    def kernel(x_ref, o_ref):
        def body(shared):
            i = mp.axis_index("x")
            shared[mp.ds(i, 1), :] = x_ref[mp.ds(i, 1), :] * 2.0
            if barrier:
                mp.barrier("x")
            o_ref[mp.ds(i, 1), :] = shared[...].sum(axis=0, keepdims=True)

        mp.run_scoped(body, tpu.VMEM((N, 8), F32), collective_axes=("x",))

    return mp.trace(kernel, *REFS)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_programs_share_the_allocation_and_meet_at_the_barrier(schedule):
    x, out = rows(), np.zeros((N, 8), np.float32)
    simulate(_shared_sum(), x, out, schedule=schedule)
    total = (x * 2.0).sum(axis=0)
    assert out.tobytes() == np.broadcast_to(total, (N, 8)).tobytes()


def test_a_missing_barrier_is_a_race_naming_both_ops_and_programs():
    with pytest.raises(RaceError) as e:
        simulate(_shared_sum(barrier=False), rows(), np.zeros((N, 8), np.float32))
    err = e.value
    assert err.op == "get" and err.first[0] == "swap"
    assert err.first[2] == "(1,)" and err.second[2] == "(0,)"
    assert err.first[1].line != err.second[1].line  # two different lines of this file
    assert "test_programs.py" in str(err.first[1]) and "barrier" in err.fix
    assert "program (0,) reads element [1, 0]" in err.message


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5])
def test_a_missing_barrier_is_caught_under_random_schedules_too(seed):
    """Either the race, or (when a reader runs before any writer) the uninitialized read of
    shared scratch: never a silent result."""
    with pytest.raises(InterpretError, match="shared|never written"):
        simulate(_shared_sum(barrier=False), rows(), np.zeros((N, 8), np.float32), schedule=seed)


def test_accumulates_from_many_programs_are_not_races():
    def kernel(x_ref, o_ref):
        i = mp.axis_index("x")
        mp.addupdate(o_ref, (0, slice(None)), x_ref[i, :])

    fn = mp.trace(kernel, *REFS)
    x, out = rows(), np.zeros((N, 8), np.float32)
    simulate(fn, x, out)
    assert np.array_equal(out[0], x.sum(axis=0)) and not out[1:].any()


def test_reads_by_many_programs_are_not_races_but_a_write_after_them_is():
    def readers(x_ref, o_ref):
        i = mp.axis_index("x")
        o_ref[i, :] = x_ref[0, :]

    x, out = rows(), np.zeros((N, 8), np.float32)
    simulate(mp.trace(readers, *REFS), x, out)
    assert np.array_equal(out, np.broadcast_to(x[0], (N, 8)))

    def reader_then_writer(x_ref, o_ref):
        i = mp.axis_index("x")
        o_ref[i, :] = x_ref[0, :]

        @mp.when(i == N - 1)
        def _():
            x_ref[0, :] = jnp.zeros((8,), F32)

    with pytest.raises(RaceError, match=r"program \(3,\) writes element \[0, 0\]"):
        simulate(mp.trace(reader_then_writer, *REFS), rows(), np.zeros((N, 8), np.float32))


def test_a_barrier_orders_a_write_after_other_programs_reads():
    def kernel(x_ref, o_ref):
        i = mp.axis_index("x")
        o_ref[i, :] = x_ref[0, :]
        mp.barrier("x")

        @mp.when(i == 0)
        def _():
            x_ref[0, :] = jnp.zeros((8,), F32)

    x, out = rows(), np.zeros((N, 8), np.float32)
    first_row = x[0].copy()
    simulate(mp.trace(kernel, *REFS), x, out)
    assert np.array_equal(out, np.broadcast_to(first_row, (N, 8))) and not x[0].any()


def test_a_barrier_one_program_skips_is_a_deadlock():
    def kernel(x_ref, o_ref):
        i = mp.axis_index("x")

        @mp.when(i != 2)
        def _():
            mp.barrier("x")

    with pytest.raises(DeadlockError) as e:
        simulate(mp.trace(kernel, *REFS), rows(), np.zeros((N, 8), np.float32))
    assert "(0,), (1,), (3,)" in e.value.message
    assert "(2,) finished without reaching it" in e.value.message
    assert e.value.op == "barrier" and "test_programs.py" in str(e.value.loc)


def _skipping_sum(skipper: int):
    """``_shared_sum`` whose program ``skipper`` skips the barrier (a ``when`` around it)."""

    def kernel(x_ref, o_ref):
        def body(shared):
            i = mp.axis_index("x")
            shared[mp.ds(i, 1), :] = x_ref[mp.ds(i, 1), :] * 2.0

            @mp.when(i != skipper)
            def _():
                mp.barrier("x")

            o_ref[mp.ds(i, 1), :] = shared[...].sum(axis=0, keepdims=True)

        mp.run_scoped(body, tpu.VMEM((N, 8), F32), collective_axes=("x",))

    return mp.trace(kernel, *REFS)


@pytest.mark.parametrize("skipper", [0, 2])
def test_a_skipped_barrier_is_named_as_the_cause_of_the_race_it_causes(skipper):
    """The skipper runs on into the read the barrier was there to order: the race comes
    first, but the error names the skipped barrier, its program and the programs waiting."""
    with pytest.raises(DeadlockError) as e:
        simulate(_skipping_sum(skipper), rows(), np.zeros((N, 8), np.float32))
    err = e.value
    waiting = ", ".join(f"({k},)" for k in range(N) if k != skipper)
    assert f"program ({skipper},) skips the barrier over ('x',)" in err.message
    assert f"that programs {waiting} of its group wait at" in err.message
    assert err.op == "barrier" and "test_programs.py" in str(err.loc)
    race = err.consequence
    assert isinstance(race, RaceError) and race.op == "get" and race.first[0] == "swap"
    assert race.second[2] == f"({skipper},)" and str(race.second[1]) in err.message
    assert "would wait for it forever" in err.message and "barrier" in err.fix


def test_a_race_before_the_barrier_is_not_blamed_on_a_program_still_on_its_way():
    """A program that has not reached the barrier yet, racing before it, raced: no skip."""

    def kernel(x_ref, o_ref):
        def body(shared):
            i = mp.axis_index("x")
            shared[mp.ds(i, 1), :] = x_ref[mp.ds(i, 1), :]
            o_ref[mp.ds(i, 1), :] = shared[...].sum(axis=0, keepdims=True)
            mp.barrier("x")

        mp.run_scoped(body, tpu.VMEM((N, 8), F32), collective_axes=("x",))

    with pytest.raises(RaceError):
        simulate(mp.trace(kernel, *REFS), rows(), np.zeros((N, 8), np.float32))


def test_a_skipped_collective_run_scoped_is_reported():
    def kernel(x_ref, o_ref):
        i = mp.axis_index("x")

        @mp.when(i != 1)
        def _():
            def body(shared):
                shared[mp.ds(i, 1), :] = x_ref[mp.ds(i, 1), :]

            mp.run_scoped(body, tpu.VMEM((N, 8), F32), collective_axes=("x",))

    with pytest.raises(DeadlockError, match=r"program \(1,\) skips the collective run_scoped"):
        simulate(mp.trace(kernel, *REFS), rows(), np.zeros((N, 8), np.float32))


def test_each_group_along_the_other_axes_gets_its_own_allocation():
    """Grid (2, 4) named ("y", "x"), collective along "x": the two rows of programs have one
    buffer each, so each row sums its own inputs."""

    def kernel(x_ref, o_ref):
        def body(shared):
            y, i = mp.axis_index("y"), mp.axis_index("x")
            shared[mp.ds(i, 1), :] = x_ref[mp.ds(y * N + i, 1), :]
            mp.barrier("x")
            o_ref[mp.ds(y * N + i, 1), :] = shared[...].sum(axis=0, keepdims=True)

        mp.run_scoped(body, tpu.VMEM((N, 8), F32), collective_axes=("x",))

    refs = (mp.RefType((2 * N, 8), F32), mp.RefType((2 * N, 8), F32))
    x = np.arange(2 * N * 8, dtype=np.float32).reshape(2 * N, 8)
    out = np.zeros_like(x)
    simulate(mp.trace(kernel, *refs), x, out, grid=(2, N), names=("y", "x"))
    expected = np.concatenate([np.broadcast_to(x[:N].sum(0), (N, 8)),
                               np.broadcast_to(x[N:].sum(0), (N, 8))])  # fmt: skip
    assert out.tobytes() == expected.tobytes()


def test_results_gain_the_grid_axes():
    def kernel(x_ref):
        return mp.axis_index("x") * 10 + mp.program_id(1)

    fn = mp.trace(kernel, mp.RefType((2,), F32))
    (ids,) = simulate(fn, np.zeros(2, np.float32), grid=(3, 2), names=("x", "y"))
    assert ids.shape == (3, 2) and ids.tolist() == [[0, 1], [10, 11], [20, 21]]


def test_the_default_still_rejects_with_upstreams_message():
    with pytest.raises(CollectiveAxesUnsupported) as e:
        mp.interpret(_shared_sum(), rows(), np.zeros((N, 8), np.float32), grid=(N,),
                     program_ids=(0,))  # fmt: skip
    assert str(e.value) == "run_scoped interpret rule does not support collective axes"


def test_misuse_is_a_minipallas_error_with_a_fix():
    fn = _shared_sum()
    x, out = rows(), np.zeros((N, 8), np.float32)
    with pytest.raises(InterpretError, match="needs grid= and grid_names=") as e:
        mp.interpret(fn, x, out, collectives="simulate")
    assert "grid_names" in e.value.fix
    with pytest.raises(InterpretError, match="is not a mode"):
        mp.interpret(fn, x, out, collectives="maybe")
    with pytest.raises(InterpretError, match="schedule must be"):
        simulate(fn, x, out, schedule="fast")
    with pytest.raises(InterpretError, match="name each of the 1 grid axes once"):
        simulate(fn, x, out, names=("x", "y"))
    with pytest.raises(InterpretError, match=r"names axes \['x'\], which are not grid axes"):
        simulate(fn, x, out, names=("z",))
    with pytest.raises(InterpretError, match="must be C-contiguous"):
        simulate(fn, np.asfortranarray(np.zeros((N, 8), np.float32)), out)
    lone = mp.parse('func @b() -> () {\n  barrier ("x")\n  return\n}')
    with pytest.raises(InterpretError, match="needs the other programs") as e:
        mp.interpret(lone)
    assert "collectives='simulate'" in e.value.fix and e.value.loc.line == 2
