"""tests/pallas/tpu_pallas_state_test.py: ``CoreMapTest``."""

from __future__ import annotations

import functools

import jax
import jax.ad_checkpoint
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from mesh_corpus_upstream.common import _UP, _add, _arange_i32, _i32, _identity, _params

# --------------------------------------------------------------------------------------------
# tests/pallas/tpu_pallas_state_test.py: CoreMapTest
# --------------------------------------------------------------------------------------------

_STATE = _UP + "tpu_pallas_state_test.py"


def _state_kernel_helper_basic(cores, style):
    mesh = pltpu.create_tensorcore_mesh("x", num_cores=cores)

    def body(x_ref, o_ref):
        pltpu.sync_copy(x_ref, o_ref)

    x = _arange_i32(8, 128)
    if style == "decorator":
        f = pl.kernel(body, out_type=x, mesh=mesh)
    else:
        f = pl.kernel(out_type=x, mesh=mesh)(body)
    return f, (x,)


def _state_empty_core_map(cores):
    @jax.jit
    def f(x):
        y = jnp.zeros_like(x)

        def inner(refs):
            del refs  # Unused.

            @pl.core_map(pltpu.create_tensorcore_mesh("x", num_cores=cores))
            def _():
                pass

        _, y = pl.run_state(inner)((x, y))
        return y

    return f, (_arange_i32(8, 128),)


def _state_can_signal_cores(cores):
    @jax.jit
    def f(x):
        x_ref = jax.new_ref(x)
        y_ref = jax.new_ref(jnp.empty_like(x))

        @pl.core_map(pltpu.create_tensorcore_mesh("x", num_cores=cores))
        def _():
            @functools.partial(pl.run_scoped, sem=pltpu.SemaphoreType.REGULAR)
            def inner(sem):
                s = jax.lax.axis_size("x")
                for i in range(s):
                    pl.semaphore_signal(sem, device_id={"x": i})
                pl.semaphore_wait(sem, s)
                pltpu.sync_copy(x_ref, y_ref)

        return jax.freeze(y_ref)

    return f, (_arange_i32(8, 128),)


def _state_can_query_core_index(cores):
    mesh = pltpu.create_tensorcore_mesh("x", num_cores=cores)
    slc_size = 16 // mesh.shape["x"]

    @jax.jit
    def f(x):
        @pl.kernel(
            out_type=x,
            mesh=mesh,
            scratch_types=[
                pltpu.VMEM((slc_size, 128), x.dtype),
                pltpu.VMEM((slc_size, 128), x.dtype),
                pltpu.SemaphoreType.DMA,
            ],
        )
        def kernel(x_ref, y_ref, x_vmem_ref, y_vmem_ref, sem):
            num_cores = jax.lax.axis_size("x")
            slc_size = 16 // num_cores
            core_index = jax.lax.axis_index("x")
            slc = pl.ds(core_index * slc_size, slc_size)
            pltpu.async_copy(
                x_ref.at[slc],
                x_vmem_ref,
                sem,
            ).wait()
            y = x_vmem_ref[...] + jax.lax.axis_index("x")
            y_vmem_ref[...] = y
            pltpu.async_copy(y_vmem_ref, y_ref.at[slc], sem).wait()

        return kernel(x)

    return f, (_arange_i32(16, 128),)


def _state_can_query_core_index_ref(cores):
    def ref(x):
        return (
            (x.reshape((cores, -1, 128)) + np.arange(cores, dtype=np.int32)[:, None, None]).reshape(
                x.shape
            ),
        )

    return ref


def _state_raises_on_captured_arrays(cores):
    @jax.jit
    def f(x):
        y = jnp.zeros_like(x)

        @pl.kernel(
            out_type=x,
            mesh=pltpu.create_tensorcore_mesh("x", num_cores=cores),
            scratch_types=dict(tmp_ref=pltpu.VMEM(x.shape, x.dtype)),
        )
        def kernel(x_ref, out_ref, tmp_ref):
            pltpu.sync_copy(x_ref, tmp_ref)
            tmp_ref[...] += y
            out_ref[...] = tmp_ref[...]

        return kernel(x)

    return f, (_arange_i32(8, 128),)


def _state_capture_scalar(which, i):
    mesh = pltpu.create_tensorcore_mesh("x", num_cores=1)
    use_tc_tiling_on_sc = None

    @jax.jit
    def f(x, i):
        @pl.kernel(
            out_type=jax.ShapeDtypeStruct((1, *x.shape[1:]), jnp.int32),
            mesh=mesh,
            compiler_params=pltpu.CompilerParams(
                use_tc_tiling_on_sc=use_tc_tiling_on_sc,
            ),
        )
        def kernel(x_ref, out_ref):
            idx = jax.lax.axis_index("x")  # this is always 0
            pltpu.sync_copy(x_ref.at[i], out_ref.at[idx])

        return kernel(x)

    @jax.jit
    def g(x, i):
        @pl.kernel(out_type=jax.ShapeDtypeStruct((2, *x.shape[1:]), jnp.int32), mesh=mesh)
        def kernel(x_ref, out_ref):
            pltpu.sync_copy(x_ref.at[pl.ds(i, 2)], out_ref)

        return kernel(x)

    return (f if which == "f" else g), (_arange_i32(4, 8, 128), _i32(i))


def _state_kernel_helper_with_scratch(cores):
    mesh = pltpu.create_tensorcore_mesh("x", num_cores=cores)

    def body(x_ref, o_ref, scratch_ref):
        pltpu.sync_copy(x_ref, scratch_ref)
        scratch_ref[...] += 1
        pltpu.sync_copy(scratch_ref, o_ref)

    x = _arange_i32(8, 128)
    f = pl.kernel(
        body,
        out_type=x,
        mesh=mesh,
        scratch_types=dict(scratch_ref=pltpu.VMEM(x.shape, x.dtype)),
    )
    return f, (x,)


def _state_kernel_helper_with_out_tree(cores):
    mesh = pltpu.create_tensorcore_mesh("x", num_cores=cores)

    def body(x_ref, o1_ref, o2_ref, scratch_ref):
        pltpu.sync_copy(x_ref, o1_ref)
        pltpu.sync_copy(x_ref, scratch_ref)
        scratch_ref[...] += 1
        pltpu.sync_copy(scratch_ref, o2_ref)

    x = _arange_i32(8, 128)
    kernel = pl.kernel(
        body, out_type=[x, x], mesh=mesh, scratch_types=[pltpu.VMEM(x.shape, x.dtype)]
    )

    def f(x):
        result1, result2 = kernel(x)
        return result1, result2

    return f, (x,)


def _state_kernel_with_output_memory_space(memory_space):
    mesh = pltpu.create_tensorcore_mesh("x", num_cores=1)

    def body(x_ref, o_ref):
        pltpu.sync_copy(x_ref, o_ref)

    x = _arange_i32(8, 128)
    f = jax.jit(
        pl.kernel(
            body,
            out_type=memory_space(x.shape, x.dtype),
            mesh=mesh,
        )
    )
    return f, (x,)


def _cases_state():
    cls = "CoreMapTest"
    for cores in (2, 1):
        for style in ("decorator", "decorator_factory"):
            _add(
                f"{cls}.test_kernel_helper_basic{_params(subtest=style, cores=cores)}",
                cores,
                functools.partial(_state_kernel_helper_basic, cores, style),
                _identity,
                what=f"pl.kernel(sync_copy) copies x to the output; {_STATE}:279",
            )
        _add(
            f"{cls}.test_empty_core_map_raises_error{_params(cores=cores)}",
            cores,
            functools.partial(_state_empty_core_map, cores),
            None,
            expect="raises_later:Exception:Attempted to lower core_map without discharging.",
            what="a core_map with an empty body inside run_state is not discharged, and "
            f"lowering it raises; {_STATE}:291",
        )
        _add(
            f"{cls}.test_can_signal_cores{_params(cores=cores)}",
            cores,
            functools.partial(_state_can_signal_cores, cores),
            _identity,
            what="each core signals every core's REGULAR semaphore (device_id={'x': i}), waits "
            f"for axis_size signals, then copies x to y through new_ref/freeze; {_STATE}:307",
        )
        _add(
            f"{cls}.test_can_query_core_index{_params(cores=cores)}",
            cores,
            functools.partial(_state_can_query_core_index, cores),
            _state_can_query_core_index_ref(cores),
            what=f"core c DMAs its 16/cores rows to VMEM, adds axis_index, DMAs back; {_STATE}:325",
        )
        _add(
            f"{cls}.test_raises_on_captured_arrays{_params(cores=cores)}",
            cores,
            functools.partial(_state_raises_on_captured_arrays, cores),
            None,
            expect="raises_at_trace:Exception:captures non-Ref constants",
            what=f"a pl.kernel body closing over a traced array is rejected; {_STATE}:362",
        )
        _add(
            f"{cls}.test_kernel_helper_with_scratch{_params(cores=cores)}",
            cores,
            functools.partial(_state_kernel_helper_with_scratch, cores),
            lambda x: (x + 1,),
            what=f"x -> VMEM scratch (dict scratch_types), +1, -> output; {_STATE}:429",
        )
        _add(
            f"{cls}.test_kernel_helper_with_out_tree{_params(cores=cores)}",
            cores,
            functools.partial(_state_kernel_helper_with_out_tree, cores),
            lambda x: (x, x + 1),
            what=f"out_type=[x, x]: the outputs are x and x + 1; {_STATE}:441",
        )
    for which, i, ref in (
        ("f", 2, lambda x, i: (x[int(i)][None],)),
        ("g", 1, lambda x, i: (x[int(i) : int(i) + 2],)),
    ):
        _add(
            f"{cls}.test_capture_scalar{_params(core_type='TC', fn=which)}",
            1,
            functools.partial(_state_capture_scalar, which, i),
            ref,
            what="a pl.kernel body indexes x_ref with a traced scalar it closes over "
            f"(upstream loops i over 0..3 for f, 0..2 for g; kept i={i}); {_STATE}:385",
        )
    for ms in ("HBM", "VMEM", "SMEM", "SEMAPHORE"):
        _add(
            f"{cls}.test_kernel_with_output_memory_space{_params(memory_space=ms)}",
            1,
            functools.partial(_state_kernel_with_output_memory_space, getattr(pltpu, ms)),
            None,
            expect="lower_only",
            what="out_type=pltpu.<space>(...): upstream checks output_memory_space_colors in "
            f"the lowered tpu_custom_call; {_STATE}:461",
        )
