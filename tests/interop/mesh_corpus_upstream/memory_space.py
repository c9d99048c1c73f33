"""tests/pallas/tpu_pallas_memory_space_test.py: ``TPUCoreMapMemorySpaceTest``."""

from __future__ import annotations

import functools

import jax
import jax.ad_checkpoint
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from mesh_corpus_upstream.common import _UP, _add, _identity, _params

# --------------------------------------------------------------------------------------------
# tests/pallas/tpu_pallas_memory_space_test.py: TPUCoreMapMemorySpaceTest
# --------------------------------------------------------------------------------------------

_MEMSPACE = _UP + "tpu_pallas_memory_space_test.py"


def _ms_basic_ref_memory_space_constraint(cores, memory_space):
    @jax.jit
    def f(x):
        x_ref = jax.new_ref(x, memory_space=memory_space)
        y_ref = jax.new_ref(pl.empty_like(x), memory_space=memory_space)

        assert jax.typeof(x_ref).memory_space == memory_space
        assert jax.typeof(y_ref).memory_space == memory_space

        @pl.core_map(mesh=pltpu.create_tensorcore_mesh("core", num_cores=cores))
        def _():
            if jax.typeof(x_ref).memory_space is pltpu.VMEM:
                y_ref[...] = x_ref[...]
            else:
                pltpu.sync_copy(x_ref, y_ref)

        return y_ref[...]

    return f, (np.arange(1024, dtype=np.float32).reshape((8, 128)),)


def _ms_smem_copy():
    mesh = pltpu.create_tensorcore_mesh("core", num_cores=1)
    kernel = pl.core_map(mesh=mesh)

    @jax.jit
    def f():
        y_ref = pl.empty_ref_like(pltpu.SMEM((8,), jnp.int32))

        @kernel
        def _():
            for i in range(y_ref.shape[0]):
                y_ref[i] = i

        @kernel
        def _():
            for i in range(y_ref.shape[0]):
                y_ref[i] = y_ref[i] + 1

        return y_ref[...]

    return f, ()


def _ms_smem_async_copy():
    mesh = pltpu.create_tensorcore_mesh("core", num_cores=1)
    kernel = pl.core_map(mesh=mesh)

    @jax.jit
    def f():
        y_ref = pl.empty_ref_like(pltpu.SMEM((8,), jnp.int32))

        @kernel
        def _():
            for i in range(y_ref.shape[0]):
                y_ref[i] = i

        @kernel
        def _():
            for i in range(y_ref.shape[0]):
                y_ref[i] = y_ref[i] + 1

        y_out_ref = pl.empty_ref_like(pltpu.HBM((8,), jnp.int32))

        sem = pl.empty_ref_like(pltpu.SemaphoreType.DMA(()))

        @kernel
        def _():
            pltpu.make_async_copy(y_ref, y_out_ref, sem).start()

        @kernel
        def _():
            pltpu.make_async_copy(y_ref, y_out_ref, sem).wait()

        return y_out_ref[...]

    return f, ()


def _ms_smem_async_copy_megacore(num_cores):
    mesh = pltpu.create_tensorcore_mesh("core", num_cores=num_cores)
    kernel = pl.core_map(mesh=mesh)
    n = 256

    @jax.jit
    def f():
        y_ref = pl.empty_ref_like(pltpu.SMEM((1, n), jnp.int32))

        @kernel
        def _():
            core_i = jax.lax.axis_index("core")
            for i in range(n):
                y_ref[0, i] = i + core_i * n

        @kernel
        def _():
            for i in range(n):
                y_ref[0, i] = y_ref[0, i] + 1

        y_out_ref = pl.empty_ref_like(pltpu.HBM((num_cores, 1, n), jnp.int32))

        sem = pl.empty_ref_like(pltpu.SemaphoreType.DMA(()))

        @kernel
        def _():
            core_i = jax.lax.axis_index("core")
            pltpu.make_async_copy(y_ref, y_out_ref.at[core_i, ...], sem).start()

        @kernel
        def _():
            core_i = jax.lax.axis_index("core")
            pltpu.make_async_copy(y_ref, y_out_ref.at[core_i, ...], sem).wait()

        return y_out_ref[...]

    return f, ()


def _cases_memory_space():
    cls = "TPUCoreMapMemorySpaceTest"
    for cores in (2, 1):
        for space in ("VMEM", "SMEM", "HBM", "ANY"):
            ms = pl.ANY if space == "ANY" else getattr(pltpu, space)
            p = _params(memory_space=space, cores=cores)
            name = f"{cls}.test_basic_ref_memory_space_constraint{p}"
            what = (
                "x and y made by jax.new_ref(memory_space=...) and written by a core_map (a "
                "load/store for VMEM, sync_copy otherwise); upstream also checks the HLO's "
                f"input_memory_space_colors; {_MEMSPACE}:234"
            )
            if cores > 1 and space == "VMEM":
                _add(
                    name,
                    cores,
                    functools.partial(_ms_basic_ref_memory_space_constraint, cores, ms),
                    None,
                    expect="raises_later:NotImplementedError:TensorCoreMesh does not support "
                    "VMEM inputs/outputs when there are >1 cores. Use HBM or ANY instead.",
                    what=what,
                )
            else:
                _add(
                    name,
                    cores,
                    functools.partial(_ms_basic_ref_memory_space_constraint, cores, ms),
                    _identity,
                    what=what,
                )
    _add(
        f"{cls}.test_smem_copy",
        1,
        _ms_smem_copy,
        lambda: (np.arange(8, dtype=np.int32) + 1,),
        what="two core_maps write and then increment an SMEM ref made by pl.empty_ref_like "
        f"(upstream skips it on >1 cores); {_MEMSPACE}:287",
    )
    _add(
        f"{cls}.test_smem_async_copy",
        1,
        _ms_smem_async_copy,
        lambda: (np.arange(8, dtype=np.int32) + 1,),
        what="as test_smem_copy, then a DMA started in one core_map and waited in the next "
        f"copies the SMEM ref to HBM (upstream skips it on >1 cores); {_MEMSPACE}:312",
    )
    for cores in (2, 1):
        _add(
            f"{cls}.test_smem_async_copy_megacore{_params(cores=cores)}",
            cores,
            functools.partial(_ms_smem_async_copy_megacore, cores),
            functools.partial(
                lambda c: (np.arange(c * 256, dtype=np.int32).reshape((c, 1, 256)) + 1,), cores
            ),
            what="one SMEM ref, a separate copy per core: core c writes i + 256c, increments, "
            "DMAs it to row c of an HBM ref across two core_maps (upstream skips 1 core); "
            f"{_MEMSPACE}:349",
        )
