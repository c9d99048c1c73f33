"""Property: on random race-free collective kernels
(``minipallas.tools.generate.collective_kernels``) the multi-program interpreter, the pure program
(loop and batched forms) under the reference interpreter and compiled by XLA agree bit for bit,
under lockstep and random schedules; and a planted race (one barrier dropped, each program reading
its successor's row) is always reported. The same kernels synchronized by semaphore handoffs give
the barrier kernels' bits, and a dropped wait is always reported."""

import dataclasses

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import minipallas as mp
from minipallas.ir.errors import InterpretError, RaceError
from minipallas.kernels.collective.program import collective_program
from minipallas.tools.generate.check import same_bits
from minipallas.tools.generate.collective_kernels import (
    collective_call,
    collective_inputs,
    draw_collective,
)
from minipallas.tools.generate.strategies import DrawChoices

SETTINGS = settings(
    max_examples=12,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@st.composite
def collective_kernels(draw, plant=False, semaphores=False):
    return draw_collective(DrawChoices(draw), plant=plant, semaphores=semaphores)


@SETTINGS
@given(collective_kernels(), st.integers(0, 2**16))
def test_simulated_discharged_and_compiled_runs_agree(spec, seed):
    note(repr(spec))
    x = collective_inputs(spec, seed)
    call = collective_call(spec)
    simulated = call(x)
    assert same_bits(call.simulate(x, schedule=seed), simulated)
    for batched in (False, True):  # a group's programs one at a time, or each epoch batched
        program = collective_program(call.trace(x), call.grid_names, batched)
        (interpreted,) = mp.interpret(program, x)
        (compiled,) = mp.compile(program)(x)
        assert same_bits(interpreted, simulated) and same_bits(compiled, simulated)


@SETTINGS
@given(collective_kernels(plant=True), st.integers(0, 2**16))
def test_a_planted_race_is_always_reported(spec, seed):
    note(repr(spec))
    x = collective_inputs(spec, seed)
    call = collective_call(spec)
    with pytest.raises(RaceError):
        call(x)  # lockstep: every program writes before any reads
    with pytest.raises(RaceError):
        call.program(x)  # the windows come from the grid indices: proved statically
    with pytest.raises(InterpretError):  # a race, or a read before any write
        call.simulate(x, schedule=seed)


@SETTINGS
@given(collective_kernels(semaphores=True), st.integers(0, 2**16))
def test_semaphore_handoffs_give_the_barrier_kernels_bits(spec, seed):
    """The same kernel with each epoch's first barrier replaced by signal/wait handoffs: the
    simulator gives the barrier kernel's bits (compiled by XLA), under every schedule."""
    note(repr(spec))
    x = collective_inputs(spec, seed)
    call = collective_call(spec)
    simulated = call(x)
    assert same_bits(call.simulate(x, schedule=seed), simulated)
    barriers = collective_call(dataclasses.replace(spec, semaphores=False))
    (compiled,) = mp.compile(collective_program(barriers.trace(x), barriers.grid_names))(x)
    assert same_bits(compiled, simulated)


@SETTINGS
@given(collective_kernels(plant=True, semaphores=True), st.integers(0, 2**16))
def test_a_dropped_wait_is_always_reported(spec, seed):
    note(repr(spec))
    x = collective_inputs(spec, seed)
    call = collective_call(spec)
    with pytest.raises(RaceError):
        call(x)
    with pytest.raises(InterpretError):
        call.simulate(x, schedule=seed)
