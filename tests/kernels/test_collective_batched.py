"""A collective group's epochs batched over the collective axes (kernels/collective/batched.py):
the shared allocation one unbatched array, each program's writes merged at the barrier; bit
for bit with the multi-program interpreter; the one-program-at-a-time form where an epoch
accumulates or has no exact batched form (issue 15)."""

import numpy as np
import pytest
from kernel_helpers import assert_same_bits

import minipallas as mp
import minipallas.numpy as jnp
from minipallas import tpu
from minipallas.ir.core import Function
from minipallas.kernels.collective.program import collective_program

N = 4
F32 = jnp.float32


def _call(kernel, grid=(2, N), names=("y", "x"), index=lambda j, i: (j * N + i, 0)):
    spec = mp.BlockSpec((1, 128), index)
    return mp.pallas_call(kernel, mp.ArrayType((2 * N, 128), F32), grid=grid, in_specs=[spec],
                          out_specs=spec, grid_names=names, collectives="simulate")  # fmt: skip


def _program_agrees(call, x):
    """The batched pure program, interpreted and compiled, gives the simulator's bits."""
    simulated = call(x)
    program = collective_program(call.trace(x), call.grid_names, batched=True)
    (interpreted,) = mp.interpret(program, x)
    (compiled,) = mp.compile(program)(x)
    assert_same_bits(interpreted, simulated)
    assert_same_bits(compiled, simulated)
    return program, simulated


def _callee_names(fn: Function) -> set[str]:
    return {f.name for f in fn.callees()}


def _x(seed=0):
    return np.random.default_rng(seed).standard_normal((2 * N, 128)).astype(np.float32)


def _rows_then_sum(x_ref, o_ref):
    def body(shared):
        y = x_ref[...] * 2.0
        shared[mp.ds(mp.axis_index("x"), 1), :] = y
        mp.barrier("x")
        o_ref[...] = shared[...].sum(axis=0, keepdims=True) + y

    mp.run_scoped(body, tpu.VMEM((N, 128), F32), collective_axes=("x",))


def test_each_epoch_runs_once_for_the_whole_group():
    program, out = _program_agrees(_call(_rows_then_sum), _x())
    assert {"epoch0_batched", "epoch1_batched"} <= _callee_names(program)
    text = str(program)
    assert text.count("for ") == 1  # the groups (axis "y") loop; the programs of one do not
    assert "scatter" in text  # each program writes its own row of the one shared array
    x = _x()
    for g in range(2):
        total = np.zeros(128, np.float32)
        for r in x[g * N : (g + 1) * N] * 2.0:
            total = total + r
        assert_same_bits(out[g * N : (g + 1) * N], total + x[g * N : (g + 1) * N] * 2.0)


def test_a_block_one_program_writes_for_the_group_is_merged_from_that_program():
    """The usual reduction: every program leaves its partial result in shared memory, then
    program 0 reduces them into the group's one output row (the other programs' copies of the
    row are unchanged, so program 0's writes win)."""

    def kernel(x_ref, o_ref):
        def body(shared):
            i = mp.axis_index("x")
            shared[mp.ds(i, 1), :] = x_ref[...] * 3.0
            mp.barrier("x")

            @mp.when(i == 0)
            def _():
                o_ref[...] = shared[...].max(axis=0, keepdims=True)

        mp.run_scoped(body, tpu.VMEM((N, 128), F32), collective_axes=("x",))

    row = mp.BlockSpec((1, 128), lambda j, i: (j * N + i, 0))
    group_row = mp.BlockSpec((1, 128), lambda j, i: (j, 0))
    call = mp.pallas_call(kernel, mp.ArrayType((2, 128), F32), grid=(2, N), in_specs=[row],
                          out_specs=group_row, grid_names=("y", "x"),
                          collectives="simulate")  # fmt: skip
    x = _x()
    program, out = _program_agrees(call, x)
    assert "epoch1_batched" in _callee_names(program)
    assert_same_bits(out, (x * np.float32(3.0)).reshape(2, N, 128).max(axis=1))


def test_two_collective_axes_batch_as_a_two_dimensional_group():
    def kernel(x_ref, o_ref):
        def body(shared):
            a, b = mp.axis_index("a"), mp.axis_index("b")
            shared[mp.ds(a * 2 + b, 1), :] = x_ref[...] + 1.0
            mp.barrier(("a", "b"))
            o_ref[...] = shared[mp.ds(3 - (a * 2 + b), 1), :]  # the mirror program's row

        mp.run_scoped(body, tpu.VMEM((4, 128), F32), collective_axes=("a", "b"))

    call = _call(kernel, grid=(2, 2, 2), names=("y", "a", "b"),
                 index=lambda y, a, b: (y * 4 + a * 2 + b, 0))  # fmt: skip
    x = _x()
    program, out = _program_agrees(call, x)
    assert "epoch0_batched" in _callee_names(program)
    expected = (x + 1.0).reshape(2, 4, 128)[:, ::-1].reshape(8, 128)
    assert_same_bits(out, expected)


def test_an_epoch_that_accumulates_into_shared_memory_keeps_the_program_loop():
    """Two programs may add into one element without a race; their copies could not be
    merged, so the group runs one program at a time (same bits, no batched epoch)."""

    def kernel(x_ref, o_ref):
        def body(shared):
            i = mp.axis_index("x")

            @mp.when(i == 0)
            def _():
                shared[...] = jnp.zeros((1, 128), F32)

            mp.barrier("x")
            mp.addupdate(shared, ..., x_ref[...])
            mp.barrier("x")
            o_ref[...] = shared[...]

        mp.run_scoped(body, tpu.VMEM((1, 128), F32), collective_axes=("x",))

    x = np.arange(2 * N * 128, dtype=np.float32).reshape(2 * N, 128)  # exact sums
    program, out = _program_agrees(_call(kernel), x)
    assert not any(n.endswith("_batched") for n in _callee_names(program))
    assert_same_bits(out, np.repeat(x.reshape(2, N, 128).sum(axis=1), N, axis=0))


NEG_NAN = np.float32(np.nan) * np.float32(-1.0)  # a NaN with its sign bit set


@pytest.mark.parametrize(
    "old, written", [(0.0, -0.0), (np.float32(np.nan), NEG_NAN), (1.0, 2.0)]
)  # fmt: skip
def test_a_write_is_seen_by_its_bits(old, written):
    """Program 1 overwrites program 0's row with a value equal to it (-0.0 over 0.0), or a
    NaN with other bits: the merge compares bits, so the write is kept."""

    def kernel(x_ref, o_ref):
        def body(shared):
            i = mp.axis_index("x")
            shared[mp.ds(i, 1), :] = x_ref[...]
            mp.barrier("x")

            @mp.when(i == 1)
            def _():
                shared[0:1, :] = jnp.full((1, 128), written, F32)

            mp.barrier("x")
            o_ref[...] = shared[0:1, :]

        mp.run_scoped(body, tpu.VMEM((N, 128), F32), collective_axes=("x",))

    x = np.full((2 * N, 128), old, np.float32)
    program, out = _program_agrees(_call(kernel), x)
    assert "epoch1_batched" in _callee_names(program)
    assert_same_bits(out, np.full((2 * N, 128), written, np.float32))
