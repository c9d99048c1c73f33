"""tests/pallas/tpu_pallas_interpret_test.py: ``InterpretTest`` (TPU interpret mode, on CPU)."""

from __future__ import annotations

import functools

import jax
import jax.ad_checkpoint
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from mesh_corpus_upstream.common import _UP, _add, _arange_i32, _identity, _ints, _params

# --------------------------------------------------------------------------------------------
# tests/pallas/tpu_pallas_interpret_test.py: InterpretTest (TPU interpret mode, on CPU)
# --------------------------------------------------------------------------------------------

_INTERP = _UP + "tpu_pallas_interpret_test.py"


def _interp_core_map(num_cores, use_context_manager):
    mesh = pltpu.create_tensorcore_mesh("x", num_cores=num_cores)
    interpret = False if use_context_manager else pltpu.InterpretParams()

    @jax.jit
    def f(x):
        y = jnp.zeros_like(x)

        def inner(refs):
            x_ref, y_ref = refs

            @pl.core_map(mesh, interpret=interpret)
            def _():
                num_cores = jax.lax.axis_size("x")
                slc_size = 16 // num_cores

                def alloc(x_vmem_ref, y_vmem_ref, dma_sem, sem):
                    # Barrier so we deadlock unless the core_map is actually parallel.
                    for i in range(num_cores):
                        pl.semaphore_signal(sem, 1, core_index=i)
                    pl.semaphore_wait(sem, num_cores)

                    core_index = jax.lax.axis_index("x")
                    slc = pl.ds(core_index * slc_size, slc_size)
                    pltpu.async_copy(
                        x_ref.at[slc],
                        x_vmem_ref,
                        dma_sem,
                    ).wait()
                    y = x_vmem_ref[...] + jax.lax.axis_index("x") + 1
                    y_vmem_ref[...] = y
                    pltpu.async_copy(y_vmem_ref, y_ref.at[slc], dma_sem).wait()

                pl.run_scoped(
                    alloc,
                    pltpu.VMEM((slc_size, 128), x_ref.dtype),
                    pltpu.VMEM((slc_size, 128), y_ref.dtype),
                    pltpu.SemaphoreType.DMA,
                    pltpu.SemaphoreType.REGULAR,
                )

        _, y = pl.run_state(inner)((x, y))
        return y

    if use_context_manager:

        def g(x):
            with pltpu.force_tpu_interpret_mode():
                return f(x)

        return g, (_arange_i32(16, 128),)
    return f, (_arange_i32(16, 128),)


def _interp_core_map_ref(num_cores):
    def ref(x):
        return (
            (
                x.reshape((num_cores, -1, 128))
                + 1
                + np.arange(num_cores, dtype=np.int32)[..., None, None]
            ).reshape(x.shape),
        )

    return ref


def _interp_core_map_exception_no_hang():
    @pl.kernel(
        mesh=pltpu.create_tensorcore_mesh("core", num_cores=2),
        out_type=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        scratch_types=[pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.REGULAR],
        interpret=pltpu.InterpretParams(),
    )
    def kernel(x_ref, o_ref, vmem_ref, sem):
        core_index = jax.lax.axis_index("core")
        jax.debug.print("core_index: {core_index}", core_index=core_index)

        @pl.when(core_index == 1)
        def _():
            t = vmem_ref[100, 0]
            vmem_ref[100, 0] = t
            pl.semaphore_signal(sem, 1, core_index=0)

        @pl.when(core_index == 0)
        def _():
            # This wait will never succeed, as the other core raises before
            # signaling the semaphore.
            pl.semaphore_wait(sem, 1)
            pltpu.sync_copy(x_ref, o_ref)

    return kernel, (np.ones((8, 128), dtype=np.float32),)


def _interp_hbm_allocation_in_run_scoped_raises(hbm_memory_space):
    mesh = pltpu.create_tensorcore_mesh("x", num_cores=1)

    @jax.jit
    def f(x):
        y = jnp.zeros_like(x)

        def inner(x):
            x_ref, y_ref = x

            @pl.core_map(
                mesh,
                interpret=pltpu.InterpretParams(allow_hbm_allocation_in_run_scoped=False),
            )
            def _():
                def copy(hbm):
                    pltpu.sync_copy(x_ref, hbm)
                    pltpu.sync_copy(hbm, y_ref)

                pl.run_scoped(
                    copy,
                    hbm_memory_space(x_ref.shape, x_ref.dtype),
                )

        _, y = pl.run_state(inner)((x, y))
        return y

    return f, (np.arange(8, dtype=np.int32),)


def _interp_allocate_shared_buffer(first_core_to_copy, dma_execution_mode, hbm_memory_space):
    mesh = pltpu.create_tensorcore_mesh("x", num_cores=2)
    second_core_to_copy = 1 if first_core_to_copy == 0 else 0

    @jax.jit
    def f(x):
        y = jnp.zeros_like(x)

        def inner(refs):
            x_ref, y_ref = refs

            @pl.core_map(
                mesh,
                interpret=pltpu.InterpretParams(
                    detect_races=True,
                    allow_hbm_allocation_in_run_scoped=True,
                    dma_execution_mode=dma_execution_mode,
                ),
            )
            def _():
                def body(sem):
                    @pl.when(jax.lax.axis_index("x") == second_core_to_copy)
                    def _():
                        pl.semaphore_wait(sem, 1)

                    def copy(x_hbm_ref):
                        pltpu.sync_copy(x_ref, x_hbm_ref)
                        pltpu.sync_copy(x_hbm_ref, y_ref)

                    pl.run_scoped(
                        copy,
                        hbm_memory_space(x_ref.shape, x_ref.dtype),
                    )

                    @pl.when(jax.lax.axis_index("x") == first_core_to_copy)
                    def _():
                        pl.semaphore_signal(sem, 1, core_index=second_core_to_copy)

                pl.run_scoped(
                    body,
                    pltpu.SemaphoreType.REGULAR,
                )

        _, y = pl.run_state(inner)((x, y))
        return y

    return f, (_arange_i32(16, 128),)


def _interp_shared_buffer_with_race(num_cores, slow_core, dma_execution_mode, hbm_memory_space):
    mesh = pltpu.create_tensorcore_mesh("x", num_cores=num_cores)

    @jax.jit
    def f(x, y):
        z = jnp.zeros_like(x)
        o = jnp.zeros((y.shape[0], y.shape[0]), dtype=y.dtype)

        def inner(refs):
            """Copies `x_ref` to `z_ref` and computes `y_ref @ y_ref^t` into `o_ref`."""
            x_ref, y_ref, z_ref, o_ref = refs

            @pl.core_map(
                mesh,
                interpret=pltpu.InterpretParams(
                    detect_races=True,
                    allow_hbm_allocation_in_run_scoped=True,
                    dma_execution_mode=dma_execution_mode,
                ),
            )
            def _():
                def body(x_hbm_ref, vmem_ref_0, vmem_ref_1):
                    @pl.when(jax.lax.axis_index("x") == slow_core)
                    def _():
                        pltpu.sync_copy(y_ref, vmem_ref_0)
                        vmem_ref_1[...] = vmem_ref_0[...] @ jnp.transpose(vmem_ref_0[...])
                        pltpu.sync_copy(vmem_ref_1, o_ref)

                    pltpu.sync_copy(x_ref, x_hbm_ref)
                    pltpu.sync_copy(x_hbm_ref, z_ref)

                pl.run_scoped(
                    body,
                    hbm_memory_space(x.shape, x.dtype),
                    pltpu.VMEM(y.shape, dtype=y.dtype),
                    pltpu.VMEM((y.shape[0], y.shape[0]), dtype=y.dtype),
                )

        _, _, z, o = pl.run_state(inner)((x, y, z, o))
        return z, o

    y = _ints((1024, 1024), seed=0, lo=-100, hi=99, dtype=np.int32)
    return f, (_arange_i32(16, 128), y)


def _interp_shared_buffer_with_race_ref(x, y):
    yy = y.astype(np.int64)
    return x, (yy @ yy.T).astype(np.int32)


def _cases_interpret():
    cls = "InterpretTest"
    for num_cores in (1, 2, 4):
        for ucm in (False, True):
            _add(
                f"{cls}.test_core_map{_params(num_cores=num_cores, use_context_manager=ucm)}",
                num_cores,
                functools.partial(_interp_core_map, num_cores, ucm),
                _interp_core_map_ref(num_cores),
                what="semaphore barrier across cores (core_index=i), then core c DMAs its rows, "
                "adds c + 1, DMAs back; interpret=InterpretParams() on the core_map or "
                f"force_tpu_interpret_mode around the call; {_INTERP}:879",
            )
    _add(
        f"{cls}.test_core_map_exception_no_hang",
        2,
        _interp_core_map_exception_no_hang,
        None,
        expect="raises_later:JaxRuntimeError:",
        what="core 1 reads vmem_ref[100, 0] out of bounds (interpret mode raises) before "
        f"signalling core 0, which must not hang; {_INTERP}:931",
    )
    for space in ("HBM", "ANY"):
        ms = pltpu.HBM if space == "HBM" else pl.ANY
        _add(
            f"{cls}.test_hbm_allocation_in_run_scoped_raises{_params(hbm_memory_space=space)}",
            1,
            functools.partial(_interp_hbm_allocation_in_run_scoped_raises, ms),
            None,
            expect="raises_later:ValueError:Cannot allocate HBM in `run_scoped`.",
            what="run_scoped of an HBM buffer inside core_map with "
            f"allow_hbm_allocation_in_run_scoped=False; {_INTERP}:963",
        )
    for first in (0, 1):
        for mode in ("eager", "on_wait"):
            for space in ("HBM", "ANY"):
                ms = pltpu.HBM if space == "HBM" else pl.ANY
                p = _params(
                    first_core_to_copy=first, dma_execution_mode=mode, hbm_memory_space=space
                )
                _add(
                    f"{cls}.test_allocate_shared_buffer_in_core_map{p}",
                    2,
                    functools.partial(_interp_allocate_shared_buffer, first, mode, ms),
                    _identity,
                    what="an HBM buffer run_scoped inside core_map is shared by the cores; they "
                    "take turns (REGULAR semaphore) copying x -> buffer -> y (upstream also "
                    f"asserts no race is found); {_INTERP}:1002",
                )
    for slow in (0, 1):
        for mode in ("eager", "on_wait"):
            for space in ("HBM", "ANY"):
                ms = pltpu.HBM if space == "HBM" else pl.ANY
                p = _params(slow_core=slow, dma_execution_mode=mode, hbm_memory_space=space)
                _add(
                    f"{cls}.test_allocate_shared_buffer_in_core_map_with_race{p}",
                    2,
                    functools.partial(_interp_shared_buffer_with_race, 2, slow, mode, ms),
                    _interp_shared_buffer_with_race_ref,
                    what="the slow core computes o = y @ y.T (int32), both copy x through one "
                    "shared HBM buffer to z: upstream asserts o and that the race is detected, "
                    "not z (racy, though both cores write the same x, so z == x); "
                    f"{_INTERP}:1101",
                )
    for space in ("HBM", "ANY"):
        ms = pltpu.HBM if space == "HBM" else pl.ANY
        p = _params(slow_core=0, dma_execution_mode="eager", hbm_memory_space=space, cores=1)
        _add(
            f"{cls}.test_allocate_shared_buffer_in_core_map_with_race{p}",
            1,
            functools.partial(_interp_shared_buffer_with_race, 1, 0, "eager", ms),
            _interp_shared_buffer_with_race_ref,
            what="1-core variant (upstream: 2 cores): core 0 computes o = y @ y.T and copies x "
            f"to z through an HBM run_scoped buffer; {_INTERP}:1101",
        )
