"""A collective kernel as one pure program (kernels/collective/program.py): its groups' epochs
in turn, which discharges, lowers to StableHLO and runs on XLA with the bits of the
multi-program interpreter (issue 15)."""

import numpy as np
import pytest
from kernel_helpers import assert_same_bits

import minipallas as mp
import minipallas.numpy as jnp
from minipallas import tpu
from minipallas.ir.errors import RaceError, TraceError
from minipallas.kernels.collective.program import collective_program

N = 4
F32 = jnp.float32


def _call(kernel, rows=2 * N, grid=(2, N), names=("y", "x"), **options):
    spec = mp.BlockSpec((1, 128), lambda j, i: (j * N + i, 0))
    out = mp.ArrayType((rows, 128), F32)
    return mp.pallas_call(kernel, out, grid=grid, in_specs=[spec], out_specs=spec,
                          grid_names=names, collectives="simulate", **options)  # fmt: skip


def _three_ways(call, x, batched=True):
    """The simulator's bits, which the pure program (batched or not) gives interpreted and
    compiled."""
    simulated = call(x)
    program = collective_program(call.trace(x), call.grid_names, batched=batched)
    (interpreted,) = mp.interpret(program, x)
    (compiled,) = mp.compile(program)(x)
    assert_same_bits(interpreted, simulated)
    assert_same_bits(compiled, simulated)
    return simulated


def test_values_kept_across_the_barrier_and_each_group_its_own_buffer():
    def kernel(x_ref, o_ref):
        def body(shared):
            i = mp.axis_index("x")
            y = x_ref[...] * 2.0
            shared[mp.ds(i, 1), :] = y
            mp.barrier("x")
            o_ref[...] = shared[...].sum(axis=0, keepdims=True) + y

        mp.run_scoped(body, tpu.VMEM((N, 128), F32), collective_axes=("x",))

    x = np.random.default_rng(0).standard_normal((2 * N, 128)).astype(np.float32)
    out = _three_ways(_call(kernel), x)
    for g in range(2):
        rows = x[g * N : (g + 1) * N] * 2.0
        total = np.zeros(128, np.float32)
        for r in rows:
            total = total + r
        assert_same_bits(out[g * N : (g + 1) * N], total + rows)


def test_the_program_lowers_to_stablehlo_without_refs():
    def kernel(x_ref, o_ref):
        def body(shared):
            shared[mp.ds(mp.axis_index("x"), 1), :] = x_ref[...]
            mp.barrier("x")
            o_ref[...] = shared[...].max(axis=0, keepdims=True)

        mp.run_scoped(body, tpu.VMEM((N, 128), F32), collective_axes=("x",))

    x = np.zeros((2 * N, 128), np.float32)
    text = _call(kernel).lower(x, target="stablehlo").as_text(debug_info=False)
    assert "stablehlo.while" in text and "func.func @main" in text


def test_epochs_that_are_not_static_are_refused_with_a_fix():
    def in_a_branch(x_ref, o_ref):
        def body(shared):
            i = mp.axis_index("x")

            @mp.when(i > 0)
            def _():
                mp.barrier("x")

            o_ref[...] = x_ref[...]

        mp.run_scoped(body, tpu.VMEM((N, 128), F32), collective_axes=("x",))

    x = np.zeros((2 * N, 128), np.float32)
    with pytest.raises(TraceError, match="top level only") as e:
        _call(in_a_branch).program(x)
    assert "multi-program interpreter" in e.value.fix and e.value.loc.line > 0


@pytest.mark.parametrize("batched", [False, True])
def test_each_program_keeps_its_own_scratch_shapes_across_barriers(batched):
    """A program's scratch (its row of one array per group) holds what it wrote before the
    barrier; another program's writes never reach it."""

    def kernel(x_ref, o_ref, s_ref, t_ref):
        def body(shared):
            i = mp.axis_index("x")
            s_ref[...] = x_ref[...] * 3.0
            t_ref[0] = i
            shared[mp.ds(i, 1), :] = x_ref[...]
            mp.barrier("x")
            left = jnp.where(i == 0, N - 1, i - 1)
            o_ref[...] = shared[mp.ds(left, 1), :] + s_ref[...] + t_ref[0].astype(F32)

        mp.run_scoped(body, tpu.VMEM((N, 128), F32), collective_axes=("x",))

    call = _call(kernel, scratch_shapes=[tpu.VMEM((1, 128), F32), tpu.SMEM((1,), jnp.int32)])
    x = np.random.default_rng(1).standard_normal((2 * N, 128)).astype(np.float32)
    simulated = _three_ways(call, x, batched)
    for g in range(2):
        rows = x[g * N : (g + 1) * N]
        want = np.roll(rows, 1, axis=0) + rows * 3.0 + np.arange(N, dtype=np.float32)[:, None]
        assert_same_bits(simulated[g * N : (g + 1) * N], want)


def _no_barrier(x_ref, o_ref):
    def body(shared):
        shared[mp.ds(mp.axis_index("x"), 1), :] = x_ref[...]
        o_ref[...] = shared[...].sum(axis=0, keepdims=True)  # reads every program's row: a race

    mp.run_scoped(body, tpu.VMEM((N, 128), F32), collective_axes=("x",))


def _same_row(x_ref, o_ref):
    def body(shared):
        shared[0:1, :] = x_ref[...]  # every program writes row 0
        mp.barrier("x")
        o_ref[...] = shared[0:1, :]

    mp.run_scoped(body, tpu.VMEM((N, 128), F32), collective_axes=("x",))


@pytest.mark.parametrize("kernel, ops", [(_no_barrier, ("get", "swap")), (_same_row, ("swap",))])
def test_a_race_the_index_arithmetic_proves_is_refused_statically(kernel, ops):
    x = np.zeros((2 * N, 128), np.float32)
    with pytest.raises(RaceError, match="statically") as e:
        _call(kernel).program(x)
    assert {e.value.first[0], e.value.second[0]} == set(ops)
    assert e.value.first[2] != e.value.second[2] and "barrier" in e.value.fix
    with pytest.raises(RaceError):  # and the simulator finds it too
        _call(kernel)(x)


def test_windows_from_data_are_left_to_the_simulator():
    """Which row each program writes comes from the input: no static proof; the simulator
    runs it (race-free here: the input holds a permutation)."""

    def kernel(x_ref, i_ref, o_ref):
        def body(shared):
            row = i_ref[0, 0]
            shared[mp.ds(row, 1), :] = x_ref[...]
            mp.barrier("x")
            o_ref[...] = shared[mp.ds(row, 1), :]

        mp.run_scoped(body, tpu.VMEM((N, 128), F32), collective_axes=("x",))

    spec = mp.BlockSpec((1, 128), lambda j, i: (j * N + i, 0))
    index = mp.BlockSpec((1, 1), lambda j, i: (j * N + i, 0))
    call = mp.pallas_call(kernel, mp.ArrayType((2 * N, 128), F32), grid=(2, N),
                          in_specs=[spec, index], out_specs=spec, grid_names=("y", "x"),
                          collectives="simulate")  # fmt: skip
    x = np.random.default_rng(0).standard_normal((2 * N, 128)).astype(np.float32)
    rows = np.array([[3], [1], [0], [2]] * 2, np.int32)
    simulated = call(x, rows)
    (compiled,) = mp.compile(call.program(x, rows))(x, rows)
    assert_same_bits(compiled, simulated)
    assert_same_bits(simulated, x)
