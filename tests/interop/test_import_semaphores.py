"""Upstream's semaphore primitives imported: ``pl.semaphore_signal`` / ``semaphore_wait`` /
``semaphore_read`` on ``pltpu.SemaphoreType.REGULAR`` allocations, checked against upstream's
discharge bit for bit; remote signals and barrier semaphores are refused with a fix (DMA
semaphores import: ``test_import_dma.py``)."""

import jax
import numpy as np
import pytest
from interop_helpers import I32, ref
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import minipallas
from minipallas.interop import JaxprImportError, from_jaxpr, to_jax


def _counting_kernel(x_ref, o_ref, s0, s1):
    pl.semaphore_signal(s1, x_ref[0])
    pl.semaphore_signal(s0)
    pl.semaphore_wait(s1, 2)
    pl.semaphore_wait(s0, 1, decrement=False)
    o_ref[0] = pl.semaphore_read(s1) + x_ref[1]
    o_ref[1] = pl.semaphore_read(s0)


def _call(**options):
    smem = pl.BlockSpec(memory_space=pltpu.SMEM)
    return pl.pallas_call(_counting_kernel, out_shape=jax.ShapeDtypeStruct((2,), np.int32),
                          in_specs=[smem], out_specs=smem,
                          scratch_shapes=[pltpu.SemaphoreType.REGULAR] * 2, **options)  # fmt: skip


@pytest.mark.parametrize("n", [2, 3, 7])
def test_scratch_semaphores_of_a_kernel_match_upstreams_interpret_mode(n):
    """Upstream's ``discharge_state`` keeps the semaphore effect, which ``jax.jit`` cannot
    lower, so upstream's answer is its ``interpret=True`` pallas_call."""
    x = np.array([n, 10], np.int32)
    want = np.asarray(_call(interpret=True)(x))
    fn = from_jaxpr(jax.make_jaxpr(_call())(x))
    minipallas.verify(fn)
    text = str(fn)  # the kernel is a callee, printed with its caller
    assert all(f"semaphore_{what} " in text for what in ("signal", "wait", "read"))
    (got,) = minipallas.compile(fn)(x)
    assert np.asarray(got).tobytes() == want.tobytes()
    (again,) = jax.jit(to_jax(fn))(x)
    assert np.asarray(again).tobytes() == want.tobytes()
    assert want.tolist() == [n - 2 + 10, 1]


def test_a_semaphore_array_indexed_with_at_imports_and_counts():
    """Upstream's own discharge of ``sems.at[i]`` breaks inside pallas_call's interpreter (a
    while_loop carry of int16[2] against int16[]); the import runs it."""

    def f(o_ref, i):
        def body(sems):
            pl.semaphore_signal(sems.at[i], 5)
            pl.semaphore_wait(sems.at[i], 2)
            o_ref[0] = pl.semaphore_read(sems.at[i])
            o_ref[1] = pl.semaphore_read(sems.at[1 - i])

        pl.run_scoped(body, pltpu.SemaphoreType.REGULAR((2,)))

    fn = from_jaxpr(jax.make_jaxpr(f)(ref((2,), np.int32), I32))
    minipallas.verify(fn)
    for i in (0, 1):
        out = np.zeros(2, np.int32)
        minipallas.interpret(fn, out, np.int32(i))
        assert out.tolist() == [3, 0]


def test_remote_signals_and_barrier_semaphores_are_refused_with_a_fix():
    def remote(o_ref):
        pl.run_scoped(lambda s: pl.semaphore_signal(s, 1, device_id=0),
                      pltpu.SemaphoreType.REGULAR)  # fmt: skip

    with pytest.raises(JaxprImportError, match="semaphore_signal to another device") as e:
        from_jaxpr(jax.make_jaxpr(remote)(ref((), np.int32)))
    assert "collective run_scoped" in e.value.fix

    def barrier(o_ref):
        pl.run_scoped(lambda s: None, pltpu.SemaphoreType.BARRIER)

    with pytest.raises(JaxprImportError, match="only regular and DMA semaphores"):
        from_jaxpr(jax.make_jaxpr(barrier)(ref((), np.int32)))
