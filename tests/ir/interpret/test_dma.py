"""``dma_start`` / ``dma_wait`` in the IR and the reference interpreter: the printed form round
trips, the type rule names what is wrong, the copy happens at the start and the DMA semaphore
counts its elements; a wait no started copy satisfies is a deadlock; discharge, the compiled
program and ``to_jax`` give the interpreter's bits. The front end refuses misuse at the
user's line."""

# ruff: noqa: E501  (the text IR's header is one line)

import inspect

import numpy as np
import pytest

import minipallas as mp
import minipallas.numpy as jnp
from minipallas import tpu
from minipallas.ir.errors import (
    DeadlockError,
    InterpretError,
    MiniPallasError,
    TraceError,
    VerificationError,
)

TEXT = """func @copy(%0: Ref{f32[4,8]}, %1: Ref{f32[2,8], tpu.vmem}, %2: Ref{i32[2], dma_semaphore}) -> (i32[], i32[]) effects {read 0, write 1, read 2, accum 2} {
  %3 = constant 1 : i32[]
  %4 = ref.at %0[ds(%3, 2), :] : Ref{f32[2,8]}
  %5 = ref.at %2[1] : Ref{i32[], dma_semaphore}
  dma_start %4, %1, %5
  %6 = semaphore_read %5[] : i32[]
  dma_wait %4, %1, %5
  %7 = semaphore_read %5[] : i32[]
  return %6, %7
}"""


def _args():
    return np.arange(32, dtype=np.float32).reshape(4, 8), np.zeros((2, 8), np.float32)


def test_the_printed_form_round_trips_with_the_effects_on_each_operand():
    fn = mp.parse(TEXT)
    assert str(fn) == TEXT
    mp.verify(fn)


def test_the_copy_lands_at_the_start_and_the_semaphore_counts_its_elements():
    x, y = _args()
    sems = np.zeros(2, np.int32)
    during, after = mp.interpret(mp.parse(TEXT), x, y, sems)
    assert (int(during), int(after)) == (16, 0)
    assert y.tobytes() == x[1:3].tobytes() and sems.tolist() == [0, 0]


def test_discharge_compile_and_to_jax_give_the_interpreters_bits():
    fn = mp.parse(TEXT)
    x, y = _args()
    sems = np.zeros(2, np.int32)
    want = [np.asarray(v) for v in mp.interpret(fn, x.copy(), y.copy(), sems.copy())]
    want += [x, x[1:3], sems]
    discharged = mp.discharge(fn)
    mp.verify(discharged)
    assert "dma_" not in str(discharged)
    for got in (
        mp.interpret(discharged, x, y, sems),
        mp.compile(fn)(x, y, sems),
        mp.to_jax(fn)(x, y, sems),
    ):
        assert [np.asarray(g).tobytes() for g in got] == [w.tobytes() for w in want]


@pytest.mark.parametrize(
    "old, new, message",
    [
        ("%1: Ref{f32[2,8], tpu.vmem}", "%1: Ref{f32[2,4], tpu.vmem}",
         "src Ref{f32[2,8]} and dst Ref{f32[2,4], tpu.vmem} must have one shape and dtype"),
        ("dma_semaphore", "semaphore", "operand 'sem' must be a DMA semaphore ref"),
    ],
)  # fmt: skip
def test_the_type_rule_names_the_mistake_at_the_op(old, new, message):
    with pytest.raises(VerificationError) as e:
        mp.parse(TEXT.replace(old, new))
    assert e.value.op == "dma_start" and message in e.value.message
    assert str(e.value.loc).startswith("5:")


def test_a_wait_without_a_started_copy_is_a_deadlock_at_its_line():
    def kernel(x_ref, o_ref):
        def body(sem):
            copy = tpu.make_async_copy(x_ref, o_ref, sem)
            copy.start()
            copy.wait()
            copy.wait()

        mp.run_scoped(body, tpu.SemaphoreType.DMA)

    t = mp.RefType((8,), jnp.float32)
    with pytest.raises(DeadlockError) as e:
        mp.interpret(mp.trace(kernel, t, t), np.ones(8, np.float32), np.zeros(8, np.float32))
    assert e.value.op == "dma_wait"
    line = inspect.getsourcelines(kernel)[1] + 5  # the second wait
    assert f"test_dma.py:{line}" in str(e.value.loc)
    assert "waits for 8 on a semaphore that holds 0" in e.value.message
    assert "start the copy first" in e.value.fix


def test_copying_unwritten_scratch_is_an_error_under_tracking():
    def kernel(o_ref):
        def body(buf, sem):
            tpu.async_copy(buf, o_ref, sem).wait()

        mp.run_scoped(body, tpu.VMEM((8,), jnp.float32), tpu.SemaphoreType.DMA)

    fn = mp.trace(kernel, mp.RefType((8,), jnp.float32))
    with pytest.raises(InterpretError, match="never written") as e:
        mp.interpret(fn, np.zeros(8, np.float32), uninitialized="error")
    assert e.value.op == "dma_start"


def _trace_error(kernel, *types):
    with pytest.raises(TraceError) as e:
        mp.trace(kernel, *types)
    assert "test_dma.py" in str(e.value.loc)
    return e.value


F8, F4 = mp.RefType((8,), jnp.float32), mp.RefType((4,), jnp.float32)


@pytest.mark.parametrize(
    "misuse, message, fix",
    [
        (lambda x, o, sems, reg: tpu.make_async_copy(x, o.at[0:4], sems.at[0]),
         "must have one shape and dtype", "ref.at"),
        (lambda x, o, sems, reg: tpu.make_async_copy(x, o, reg), "must be a DMA semaphore",
         "SemaphoreType.DMA"),
        (lambda x, o, sems, reg: tpu.make_async_copy(x, o, sems), "an array of them",
         "sem.at[i]"),
        (lambda x, o, sems, reg: tpu.make_async_copy(x[...], o, sems.at[0]),
         "must be a ref of memory", "x_ref.at"),
        (lambda x, o, sems, reg: tpu.async_copy(x, o, sems.at[0], add=True),
         "add=True is not supported", "add the values"),
        (lambda x, o, sems, reg: tpu.make_async_remote_copy(x, o, sems.at[0], sems.at[1], 1),
         "remote async copies", "make_async_copy"),
    ],
)  # fmt: skip
def test_the_front_end_refuses_misuse_with_a_fix(misuse, message, fix):
    def kernel(x_ref, o_ref):
        mp.run_scoped(
            lambda sems, reg: misuse(x_ref, o_ref, sems, reg),
            tpu.SemaphoreType.DMA((2,)),
            tpu.SemaphoreType.REGULAR,
        )

    error = _trace_error(kernel, F8, F8)
    assert message in error.message and fix in error.fix
    assert isinstance(error, MiniPallasError)


def test_regular_semaphore_ops_refuse_dma_semaphores():
    def signal(o_ref):
        mp.run_scoped(lambda sem: mp.semaphore_signal(sem), tpu.SemaphoreType.DMA)

    error = _trace_error(signal, F4)
    assert "takes a semaphore ref, got Ref{i32[], dma_semaphore}" in error.message
    with pytest.raises(VerificationError, match="must be a regular semaphore ref"):
        mp.parse(TEXT.replace("%6 = semaphore_read %5[] : i32[]", "semaphore_signal %5[], %3"))


def _early(mistake):
    """A kernel that starts a copy of x into scratch, makes ``mistake`` before the wait,
    then waits and writes the scratch out."""

    def kernel(x_ref, o_ref):
        def body(buf, sems):
            copy = tpu.make_async_copy(x_ref.at[0:8], buf.at[1], sems.at[0])
            copy.start()
            mistake(x_ref, buf, sems)
            copy.wait()
            o_ref[...] = buf[1]

        mp.run_scoped(body, tpu.VMEM((2, 8), jnp.float32), tpu.SemaphoreType.DMA((2,)))

    return mp.trace(kernel, mp.RefType((16,), jnp.float32), F8)


def _set(ref, value):
    ref[...] = value


@pytest.mark.parametrize(
    "mistake, message",
    [
        (lambda x, buf, s: buf[1, 3], "reads the destination"),
        (lambda x, buf, s: _set(buf.at[1, 2:4], jnp.zeros(2, jnp.float32)),
         "writes the destination"),
        (lambda x, buf, s: _set(x.at[7:9], jnp.zeros(2, jnp.float32)), "writes the source"),
        (lambda x, buf, s: tpu.async_copy(buf.at[1], buf.at[0], s.at[1]).wait(),
         "reads the destination"),
    ],
)  # fmt: skip
def test_under_checks_touching_a_copy_in_flight_is_an_error_at_the_access(mistake, message):
    fn = _early(mistake)
    x = np.arange(16, dtype=np.float32)
    mp.interpret(fn, x.copy(), np.zeros(8, np.float32))  # defined by default: upstream's meaning
    with pytest.raises(InterpretError, match=message) as e:
        mp.interpret(fn, x, np.zeros(8, np.float32), checks=True)
    assert "still in flight (started at" in e.value.message and "test_dma.py" in str(e.value.loc)
    assert "wait for the copy first" in e.value.fix


def test_under_checks_untouched_memory_and_waited_copies_are_fine():
    def fine(x, buf, sems):
        buf[0] = x[8:16]  # the other slot
        return x[0:8]  # reading a source is allowed

    out = np.zeros(8, np.float32)
    x = np.arange(16, dtype=np.float32)
    mp.interpret(_early(fine), x, out, checks=True)
    assert out.tobytes() == x[:8].tobytes()


def test_under_checks_copies_on_one_semaphore_land_when_all_are_waited_for():
    """After one of two waits on a shared semaphore either copy may still be in flight."""

    def kernel(x_ref, o_ref):
        def body(sem):
            first = tpu.async_copy(x_ref.at[0:4], o_ref.at[0:4], sem)
            second = tpu.async_copy(x_ref.at[4:8], o_ref.at[4:8], sem)
            first.wait()
            o_ref[0] = o_ref[0] + 1.0  # the first copy's: not known to have landed
            second.wait()

        mp.run_scoped(body, tpu.SemaphoreType.DMA)

    fn = mp.trace(kernel, F8, F8)
    with pytest.raises(InterpretError, match="reads the destination"):
        mp.interpret(fn, np.ones(8, np.float32), np.zeros(8, np.float32), checks=True)


def test_under_checks_a_copy_never_waited_for_is_an_error_at_its_start():
    def kernel(x_ref, o_ref):
        def body(sem):
            tpu.async_copy(x_ref, o_ref, sem)

        mp.run_scoped(body, tpu.SemaphoreType.DMA)

    fn = mp.trace(kernel, F8, F8)
    mp.interpret(fn, np.ones(8, np.float32), np.zeros(8, np.float32))
    with pytest.raises(InterpretError, match="never waited for") as e:
        mp.interpret(fn, np.ones(8, np.float32), np.zeros(8, np.float32), checks=True)
    assert e.value.op == "dma_start" and "copy.wait()" in e.value.fix
    # one step of a grid may leave a copy for the next step to wait for
    mp.interpret(fn, np.ones(8, np.float32), np.zeros(8, np.float32), checks=True,
                 program_ids=(0,), grid=(2,))  # fmt: skip
