"""Upstream JAX's own TensorCore-mesh kernel tests (``pl.kernel`` / ``pl.core_map`` over
``pltpu.create_tensorcore_mesh``), ported into ``MeshCase`` entries.

Ported from jax-ml/jax at tag ``jax-v0.10.2`` (commit
990e6a0b84138346e6a38785412f36356e0e5dc3), the version installed here, from:

- tests/pallas/tpu_pallas_state_test.py (CoreMapTest)
- tests/pallas/tpu_pallas_interpret_test.py (InterpretTest: the core_map tests, run there on CPU
  in TPU interpret mode)
- tests/pallas/tpu_pallas_memory_space_test.py (TPUCoreMapMemorySpaceTest)
- tests/pallas/tpu_pallas_mpmd_test.py (the TensorCore parameterizations of MpmdTest,
  MpmdHijaxTest, MpmdPhysicalizeTest)
- tests/pallas/tpu_pallas_pipeline_test.py (emit_pipeline inside pl.kernel / core_map, and the
  ``...PrimitiveTest`` subclasses that rerun them with ``jax_use_emit_pipeline_primitive``)
- tests/pallas/tpu_pallas_random_test.py (PRNGTest.test_key_in_core_map)
- tests/pallas/einshape_test.py (EinshapeTPUKernelTest.test_einshape_basic)
- tests/pallas/tpu_fusible_matmul_test.py and
  tests/pallas/tpu_fusible_matmul_with_stateful_fusions_test.py (the CORE_MAP and KERNEL
  implementations of the fused matmul)

Each ``what`` names the upstream file and line of the test. Kernel bodies are upstream's;
what changed:

- ``num_cores``: where upstream reads the device's core count (``create_tensorcore_mesh(name)``,
  ``get_tpu_info().num_cores``) the case fixes it (``cores``), with a 2-core and a 1-core
  variant; where upstream fixes it, the case keeps upstream's number.
- data: ``jax.random`` inputs became deterministic integer-valued numpy arrays, small enough
  that every product and sum is exact in float32 and every matmul operand exact in bfloat16,
  so the references are exact whatever the matmul precision.
- a test that loops over scalar arguments keeps one of them (the ``what`` says which).
- every ``f`` runs its body under ``assume_chip("TPU_V5E")``: upstream asks ``get_tpu_info()`` while
  tracing (``emit_pipeline``'s tiling inference), which raises on a CPU; the context manager
  registers a v5e's info for the local device kind, the way minipallas.difftest.mosaic does,
  and does nothing on a TPU.

``expect`` is one of:

- ``"ok"``: ``f(*args)`` returns ``reference(*args)`` (a tuple), bit for bit unless ``what`` says
  otherwise.
- ``"raises_at_trace:<Exception>:<regex>"``: tracing ``f`` raises (checked below).
- ``"raises_later:<Exception>:<regex>"``: ``f`` traces; upstream's error comes when it lowers,
  compiles or runs (Mosaic, or TPU interpret mode).
- ``"lower_only"``: upstream only lowers the kernel and checks the HLO text; it asserts no
  values.

Tests that need more than TensorCore meshes are listed in ``NOT_PORTED``.

Running it: ``python tests/interop/mesh_corpus_upstream.py`` builds and traces every case
(``jax.make_jaxpr``) on any machine, checking each reference's shapes and dtypes and each
``raises_at_trace`` error. ``--run [REGEX]`` also runs the cases on the default device (a TPU;
cases with more cores than the chip has are only traced), ``--interpret [REGEX]`` under
``pltpu.force_tpu_interpret_mode()`` on a CPU. Seen so far: on one TPU v5e chip (1 core) every
1-core case returns its reference bit for bit, except the 1-core InterpretTest cases, which set
``InterpretParams`` and run on the CPU backend only (on a TPU backend they fail to lower:
"Lowering rule for `mpmd_map` needs to set `tokens_out`"); in interpret mode on a CPU every
2-core case that interpret mode can run returns its reference. Interpret mode cannot run: the
``...PrimitiveTest`` twins (the emit_pipeline primitive), refs in SMEM/VMEM made outside the
kernel, ``jax.empty_ref`` inside a kernel body ("No state discharge rule ... io_callback"),
``semaphore_signal(device_id={'x': i})`` between cores, a traced scalar closed over by a jitted
``pl.kernel`` (it reads a buffer id for the value), PRNG keys in SMEM, and Mosaic's integer
poison (it has its own uninitialized-memory fill).

Importing this module registers ``WeirdTuple`` as a hijax type (as tpu_pallas_mpmd_test does).
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import re
import sys
from collections.abc import Callable
from typing import Any

import jax
import jax.ad_checkpoint
import jax.numpy as jnp
import numpy as np
from jax import random as jax_random
from jax.experimental import pallas as pl
from jax.experimental.pallas import fuser
from jax.experimental.pallas import tpu as pltpu

from minipallas.difftest.mosaic import assume_chip
from minipallas.lowering.jax_private import config as jax_config
from minipallas.lowering.jax_private import core as jax_core
from minipallas.lowering.jax_private import fusible_dtype, hijax, state, state_utils


@dataclasses.dataclass(frozen=True)
class MeshCase:
    name: str  # "upstream/<TestClass>.<test_name>[param]"
    cores: int  # num_cores of the mesh
    # -> (jax function f, numpy args); f(*args) calls pl.kernel / core_map
    build: Callable[[], tuple[Callable, tuple[np.ndarray, ...]]]
    # numpy outputs (tuple) for args (what the upstream test asserts); None if expect != "ok"
    reference: Callable[..., tuple[np.ndarray, ...]] | None
    expect: str = "ok"
    what: str = ""  # one line: what the upstream test checks, and the upstream file:line


CASES: list[MeshCase] = []
NOT_PORTED: list[tuple[str, str]] = []

_UP = "tests/pallas/"


def _on_any_device(build):
    """``build`` with its ``f`` run under ``assume_chip("TPU_V5E")``."""

    @functools.wraps(build)
    def wrapped():
        f, args = build()

        @functools.wraps(f)
        def g(*a):
            with assume_chip("TPU_V5E"):
                return f(*a)

        return g, args

    return wrapped


def _add(name, cores, build, reference, *, expect="ok", what=""):
    assert (reference is None) == (expect != "ok"), name
    CASES.append(
        MeshCase(
            name=f"upstream/{name}",
            cores=cores,
            build=_on_any_device(build),
            reference=reference,
            expect=expect,
            what=what,
        )
    )


def _params(**kw) -> str:
    return "[" + ",".join(f"{k}={v}" for k, v in kw.items()) + "]"


def _ints(shape, seed, lo=-3, hi=3, dtype=np.float32) -> np.ndarray:
    """Deterministic integers in [lo, hi], as ``dtype``."""
    return np.random.default_rng(seed).integers(lo, hi + 1, size=shape).astype(dtype)


def _mm(x, y) -> np.ndarray:
    """x @ y for integer-valued float inputs, exact, as float32."""
    return (np.asarray(x, np.float64) @ np.asarray(y, np.float64)).astype(np.float32)


def _i32(v) -> np.ndarray:
    return np.asarray(v, np.int32)


def _identity(*args):
    return tuple(args)


def _arange_i32(*shape) -> np.ndarray:
    return np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)


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


# --------------------------------------------------------------------------------------------
# tests/pallas/tpu_pallas_mpmd_test.py: the TensorCore cases (their meshes have 1 core)
# --------------------------------------------------------------------------------------------

_MPMD = _UP + "tpu_pallas_mpmd_test.py"


def _tc_mesh():
    """``from_core_type(pltpu.CoreType.TC)`` upstream."""
    return pltpu.create_tensorcore_mesh(axis_name="tc_core", num_cores=1)


def _mpmd_capture_scalar():
    mesh = _tc_mesh()
    axis_name = list(mesh.shape.keys())[0]

    def f(x, i):
        def body(x_ref, out_ref):
            idx = jax.lax.axis_index(axis_name)
            pltpu.sync_copy(x_ref.at[i], out_ref.at[idx])

        return pl.kernel(
            body=body,
            mesh=mesh,
            out_type=jax.ShapeDtypeStruct((1, *x.shape[1:]), jnp.int32),
        )(x)

    return jax.jit(f), (_arange_i32(4, 8, 128), _i32(2))


def _mpmd_capture_multiple_scalars():
    mesh = pltpu.create_tensorcore_mesh("x", num_cores=1)

    def f(x, i, j):
        def body(x_ref, out_ref):
            idx = jax.lax.axis_index("x")
            pltpu.sync_copy(x_ref.at[i + j], out_ref.at[idx])

        return pl.kernel(
            body=body,
            mesh=mesh,
            out_type=jax.ShapeDtypeStruct((1, *x.shape[1:]), jnp.int32),
        )(x)

    return jax.jit(f), (_arange_i32(4, 8, 128), _i32(1), _i32(2))


def _mpmd_capture_scalar_indexing():
    mesh = pltpu.create_tensorcore_mesh("x", num_cores=1)

    def f(x, i):
        def body(x_ref, out_ref):
            idx = jax.lax.axis_index("x")
            pltpu.sync_copy(x_ref.at[i], out_ref.at[idx])

        return pl.kernel(
            body=body,
            mesh=mesh,
            out_type=jax.ShapeDtypeStruct((1, *x.shape[1:]), jnp.int32),
        )(x)

    return f, (_arange_i32(4, 8, 128), _i32(1))


def _mpmd_capture_scalar_and_ref():
    mesh = pltpu.create_tensorcore_mesh("x", num_cores=1)

    @jax.jit
    def f(x, i):
        y = jnp.arange(8 * 128, dtype=jnp.int32).reshape(8, 128)
        y_ref = jax.new_ref(y, memory_space=pl.ANY)

        def body(x_ref, out_ref):
            idx = jax.lax.axis_index("x")
            pltpu.sync_copy(x_ref.at[i], out_ref.at[idx])
            vmem_buf = jax.empty_ref(
                jax.typeof(y_ref).inner_aval, memory_space=pltpu.MemorySpace.VMEM
            )
            pltpu.sync_copy(y_ref, vmem_buf)

        return pl.kernel(
            body=body,
            mesh=mesh,
            out_type=jax.ShapeDtypeStruct((1, *x.shape[1:]), jnp.int32),
        )(x)

    return f, (_arange_i32(4, 8, 128), _i32(1))


def _mpmd_passing_in_refs():
    mesh = _tc_mesh()

    @jax.jit
    def f(x):
        x_ref = jax.new_ref(x)
        o_ref = jax.empty_ref(jax.typeof(x))
        pl.kernel(body=pltpu.sync_copy, mesh=mesh)(x_ref, o_ref)
        return jax.freeze(o_ref)

    return f, (_arange_i32(8, 128),)


def _mpmd_passing_in_multiple_refs():
    mesh = _tc_mesh()

    @jax.jit
    def f(x, y):
        x_ref = jax.new_ref(x)
        y_ref = jax.new_ref(y)

        def fn(x_ref, y_ref, scratch_x, scratch_y):
            pltpu.sync_copy(x_ref, scratch_x)
            pltpu.sync_copy(y_ref, scratch_y)
            pltpu.sync_copy(scratch_x, y_ref)
            pltpu.sync_copy(scratch_y, x_ref)

        pl.kernel(
            body=fn,
            mesh=mesh,
            scratch_types=(
                pltpu.SMEM(x.shape, x.dtype),
                pltpu.SMEM(y.shape, y.dtype),
            ),
        )(x_ref, y_ref)
        return jax.freeze(x_ref), jax.freeze(y_ref)

    x = _arange_i32(8, 128)
    return f, (x, np.zeros_like(x))


def _mpmd_mixed_outputs_and_refs():
    mesh = _tc_mesh()
    num_lanes = _SC_NUM_LANES

    @jax.jit
    def f(x):
        x_ref = jax.new_ref(x)

        def fn(x_ref, out_ref, scratch_ref):
            pltpu.sync_copy(x_ref, out_ref)
            pltpu.sync_copy(x_ref, scratch_ref)
            scratch_ref[0, :num_lanes] += jnp.ones(num_lanes, dtype=jnp.int32)
            pltpu.sync_copy(scratch_ref, x_ref)

        out = pl.kernel(
            body=fn,
            mesh=mesh,
            out_type=jax.typeof(x),
            scratch_types=(pltpu.VMEM(x.shape, x.dtype),),
        )(x_ref)
        return out, jax.freeze(x_ref)

    return f, (_arange_i32(8, 128),)


# upstream reads pltpu.get_tpu_info().sparse_core.num_lanes (16 on v6e and v7x, where
# tpu_pallas_mpmd_test runs)
_SC_NUM_LANES = 16


def _mpmd_mixed_outputs_and_refs_ref(x):
    mutated = x.copy()
    mutated[0, :_SC_NUM_LANES] += 1
    return x, mutated


def _mpmd_passing_in_refs_read_only():
    mesh = _tc_mesh()

    @jax.jit
    def f(x):
        x_ref = jax.new_ref(x)

        def fn(_):
            pass

        pl.kernel(body=fn, mesh=mesh)(x_ref)
        return jax.freeze(x_ref)

    return f, (_arange_i32(8, 128),)


def _mpmd_passing_in_refs_with_scratch():
    mesh = _tc_mesh()

    @jax.jit
    def f(x):
        x_ref = jax.new_ref(x)
        o_ref = jax.empty_ref(jax.typeof(x))

        def fn(x_hbm_ref, out_hbm_ref, scratch_ref):
            pltpu.sync_copy(x_hbm_ref, scratch_ref)
            pltpu.sync_copy(scratch_ref, out_hbm_ref)

        pl.kernel(
            body=fn,
            mesh=mesh,
            scratch_types=(pltpu.SMEM(x.shape, x.dtype),),
        )(x_ref, o_ref)
        return jax.freeze(o_ref)

    return f, (_arange_i32(8, 128),)


def _mpmd_passing_in_duplicate_refs_errors():
    mesh = _tc_mesh()

    @jax.jit
    def f(x):
        x_ref = jax.new_ref(x)
        pl.kernel(body=lambda *_: None, mesh=mesh)(x_ref, x_ref)

    return f, (_arange_i32(8, 128),)


def _mpmd_closed_over_refs():
    mesh = _tc_mesh()

    @jax.jit
    def f(x):
        x_ref = jax.new_ref(x)
        o_ref = jax.empty_ref(jax.typeof(x))

        @pl.kernel(mesh=mesh)
        def fn():
            pltpu.sync_copy(x_ref, o_ref)

        fn()

        return jax.freeze(o_ref)

    return f, (_arange_i32(8, 128),)


def _mpmd_closed_over_refs_with_scratch():
    mesh = _tc_mesh()

    @jax.jit
    def f(x):
        x_ref = jax.new_ref(x)
        o_ref = jax.empty_ref(jax.typeof(x))

        mem_type = pltpu.VMEM  # core_type is TC

        @pl.kernel(
            mesh=mesh,
            scratch_types=(mem_type(x.shape, x.dtype),),
        )
        def fn(scratch_ref):
            pltpu.sync_copy(x_ref, scratch_ref)
            pltpu.sync_copy(scratch_ref, o_ref)

        fn()

        return jax.freeze(o_ref)

    return f, (_arange_i32(8, 128),)


def _mpmd_remat_with_checkpoint():
    mesh = pltpu.create_tensorcore_mesh("tc", num_cores=1)

    kernel_impl = pl.kernel(
        pltpu.sync_copy,
        mesh=mesh,
        out_type=jax.ShapeDtypeStruct((8, 128), jnp.float32),
    )

    # NOTE: ``mpmd_map`` does not yet have a general purpose jvp rule, so we
    # need to use ``custom_vjp`` to define one.
    @jax.custom_vjp
    def kernel(x):
        return kernel_impl(x)

    kernel.defvjp(lambda x: (kernel_impl(x), ()), lambda res, g: (g,))

    def f(x):
        def block(x):
            y = jax.ad_checkpoint.checkpoint_name(x * 2.0, name="y")
            return kernel(y)

        policy = jax.checkpoint_policies.save_only_these_names("y")
        return jax.remat(block, policy=policy)(x).sum()

    return jax.grad(f), (np.ones((8, 128), dtype=np.float32),)


# MpmdHijaxTest's hi-type, as upstream defines it at module level (tpu_pallas_mpmd_test.py:815)


@dataclasses.dataclass(frozen=True)
class WeirdTuple:
    x0: jax.Array
    x1: jax.Array


@dataclasses.dataclass(frozen=True)
class WeirdTupleTy(hijax.HiType):
    x0_aval: jax_core.ShapedArray
    x1_aval: jax_core.ShapedArray

    @property
    def shape(self) -> tuple[int, ...]:
        return self.x0_aval.shape

    @property
    def dtype(self) -> jnp.dtype:
        return self.x0_aval.dtype

    def lo_ty(self) -> list[jax_core.ShapedArray]:
        return [self.x0_aval, self.x1_aval]

    def lower_val(self, hi_val: WeirdTuple) -> list[jax.Array]:
        assert isinstance(hi_val, WeirdTuple), f"Expected WeirdTuple, got {type(hi_val)}"
        return [hi_val.x0, hi_val.x1]

    def raise_val(self, x0, x1) -> WeirdTuple:
        return WeirdTuple(x0, x1)

    def get_ref_aval(self):
        return state.AbstractRef(self, memory_space=self.memory_space)

    def dma_start(
        self,
        src_ref,
        dst_ref,
        src_sem,
        dst_sem,
        device_id,
        device_id_type,
        priority,
        add,
    ) -> None:
        assert device_id is None
        assert src_sem is None
        src_x0_ref = src_ref._refs.x0
        src_x1_ref = src_ref._refs.x1
        dst_x0_ref = dst_ref._refs.x0
        dst_x1_ref = dst_ref._refs.x1

        desc_x0 = pltpu.make_async_copy(src_x0_ref, dst_x0_ref, dst_sem)
        desc_x0.start(priority=priority, add=add)

        desc_x1 = pltpu.make_async_copy(src_x1_ref, dst_x1_ref, dst_sem)
        desc_x1.start(priority=priority, add=add)

    def dma_wait(self, src_ref, dst_ref, src_sem, dst_sem, device_id, device_id_type):
        assert device_id is None
        assert src_sem is None

        src_x0_ref = src_ref._refs.x0
        src_x1_ref = src_ref._refs.x1
        dst_x0_ref = dst_ref._refs.x0
        dst_x1_ref = dst_ref._refs.x1

        desc_x0 = pltpu.make_async_copy(src_x0_ref, dst_x0_ref, dst_sem)
        desc_x0.wait()

        desc_x1 = pltpu.make_async_copy(src_x1_ref, dst_x1_ref, dst_sem)
        desc_x1.wait()


hijax.register_hitype(WeirdTuple, lambda t: WeirdTupleTy(jax.typeof(t.x0), jax.typeof(t.x1)))

unpack_p = hijax.HiPrimitive("unpack")
unpack = unpack_p.bind
unpack_p.multiple_results = True
unpack_p.is_high = lambda *_: True
unpack_p.def_abstract_eval(lambda x: [x.x0_aval, x.x1_aval])
unpack_p.to_lojax = lambda x: [x.x0, x.x1]

pack_p = hijax.HiPrimitive("pack")
pack = pack_p.bind
pack_p.is_high = lambda *_: True
pack_p.def_abstract_eval(lambda x0, x1: WeirdTupleTy(x0, x1))
pack_p.to_lojax = lambda x0, x1: WeirdTuple(x0, x1)


def _weird_args():
    """xt's two arrays; each f packs them into a WeirdTuple hi value (``pack``) and unpacks its
    result, since a traced WeirdTuple has no ``.x0``."""
    return np.ones((8, 8), dtype=np.int32), np.zeros((8,), dtype=np.int32)


def _mpmd_pass_weird_tuple_into_mpmd_map():
    def kernel(xt_ref, ot_ref, xt_vmem_ref, ot_vmem_ref):
        pltpu.sync_copy(xt_ref, xt_vmem_ref)
        ot_vmem_ref[...] = xt_vmem_ref[...]
        pltpu.sync_copy(ot_vmem_ref, ot_ref)

    mesh = pltpu.create_tensorcore_mesh("tc_core", num_cores=1)

    def f(x0, x1):
        xt = pack(x0, x1)  # upstream: WeirdTuple(x0=..., x1=...), a concrete hi value
        ot = pl.kernel(
            body=kernel,
            mesh=mesh,
            out_type=jax.typeof(xt),
            scratch_types=(
                pltpu.VMEM.like(WeirdTupleTy(jax.typeof(x0), jax.typeof(x1))),
                pltpu.VMEM.like(WeirdTupleTy(jax.typeof(x0), jax.typeof(x1))),
            ),
        )(xt)
        return tuple(unpack(ot))

    return f, _weird_args()


def _mpmd_hijax_input_output_aliasing():
    mesh = pltpu.create_tensorcore_mesh("tc_core", num_cores=1)

    def kernel(xt_ref_inner, scratch_vmem_ref):
        pltpu.sync_copy(xt_ref_inner, scratch_vmem_ref)
        x0, x1 = unpack(scratch_vmem_ref[...])
        scratch_vmem_ref[...] = pack(x0 + 1, x1)
        pltpu.sync_copy(scratch_vmem_ref, xt_ref_inner)

    @jax.jit
    def f(xt):
        xt_ref = jax.new_ref(xt)
        pl.kernel(
            body=kernel,
            mesh=mesh,
            scratch_types=(pltpu.VMEM.like(jax.typeof(xt)),),
        )(xt_ref)
        return jax.freeze(xt_ref)

    def g(x0, x1):
        return tuple(unpack(f(pack(x0, x1))))

    return g, _weird_args()


def _mpmd_closed_over_hijax_refs():
    mesh = pltpu.create_tensorcore_mesh("tc_core", num_cores=1)

    @jax.jit
    def f(xt_in):
        xt_ref = jax.new_ref(xt_in)
        ot_ref = jax.empty_ref(jax.typeof(xt_in))

        def kernel(xt_vmem_ref, ot_vmem_ref):
            pltpu.sync_copy(xt_ref, xt_vmem_ref)
            ot_vmem_ref[...] = xt_vmem_ref[...]
            pltpu.sync_copy(ot_vmem_ref, ot_ref)

        pl.kernel(
            body=kernel,
            mesh=mesh,
            scratch_types=(
                pltpu.VMEM.like(jax.typeof(xt_in)),
                pltpu.VMEM.like(jax.typeof(xt_in)),
            ),
        )()
        return jax.freeze(ot_ref)

    def g(x0, x1):
        return tuple(unpack(f(pack(x0, x1))))

    return g, _weird_args()


def _mpmd_map_physicalize():
    @dataclasses.dataclass(frozen=True)
    class SimpleFusionDType(fusible_dtype.FusionDType):
        def __str__(self):
            return "simple_fusion_dtype"

        def abstract_unpack(self, x):
            if isinstance(x, jax_core.ShapedArray):
                return (x.update(dtype=jnp.float32), x.update(dtype=jnp.float32))
            raise NotImplementedError(type(x))

        def abstract_pack(self, x, y):
            if isinstance(x, jax_core.ShapedArray):
                return x.update(dtype=self)
            raise NotImplementedError(type(x))

        def pull_block_spec_one_step(self, aval_out, block_spec):
            return block_spec, block_spec

        def unpack_push_block_spec(self, aval_in, block_spec):
            return block_spec, block_spec

        def unpack_pull_block_spec(self, aval_in, block_spec1, block_spec2):
            return (block_spec1,)

        def pack_eval_rule(self, eval_ctx, x, y):
            return fusible_dtype.pack_dtype_p.bind(x, y, dtype=self)

        def unpack_eval_rule(self, eval_ctx, x):
            return fusible_dtype.unpack(x)

    mesh = pltpu.create_tensorcore_mesh("tc_core", num_cores=1)

    def subkernel(x_ref, y_ref, out_ref, x_vmem, y_vmem, out_vmem):
        pltpu.sync_copy(x_ref, x_vmem)
        pltpu.sync_copy(y_ref, y_vmem)
        packed = fusible_dtype.pack(x_vmem[...], y_vmem[...], dtype=SimpleFusionDType())
        x_val, y_val = fusible_dtype.unpack(packed)
        out_vmem[...] = x_val + y_val
        pltpu.sync_copy(out_vmem, out_ref)

    @fuser.fusible
    def mpmd_f(x_fn, y_fn, z_fn):
        x = x_fn()
        y = y_fn()
        out = pl.kernel(
            body=subkernel,
            mesh=mesh,
            out_type=jax.ShapeDtypeStruct.like(x),
            scratch_types=(
                pltpu.VMEM(x.shape, x.dtype),
                pltpu.VMEM(x.shape, x.dtype),
                pltpu.VMEM(x.shape, x.dtype),
            ),
        )(x, y)
        if z_fn is None:
            z_fn = lambda x: x  # noqa: E731
        return z_fn(out)

    physicalized_f = fusible_dtype.physicalize(mpmd_f)
    return physicalized_f, (np.ones((8, 8), np.float32), np.ones((8, 8), np.float32))


def _cases_mpmd():
    cls = "MpmdTest"
    tc = _params(core_type="TC")
    one = [
        (
            f"{cls}.test_mpmd_capture_scalar{tc}",
            _mpmd_capture_scalar,
            lambda x, i: (x[int(i)][None],),
            "pl.kernel body indexes x_ref with a closed-over traced scalar (upstream loops i over "
            f"0..3; kept i=2); {_MPMD}:167",
        ),
        (
            f"{cls}.test_mpmd_capture_multiple_scalars",
            _mpmd_capture_multiple_scalars,
            lambda x, i, j: (x[int(i) + int(j)][None],),
            f"two closed-over scalars, f(x, 1, 2) copies x[3]; {_MPMD}:186",
        ),
        (
            f"{cls}.test_mpmd_capture_scalar_indexing",
            _mpmd_capture_scalar_indexing,
            lambda x, i: (x[int(i)][None],),
            f"as test_mpmd_capture_scalar without jit, f(x, 1); {_MPMD}:204",
        ),
        (
            f"{cls}.test_mpmd_capture_scalar_and_ref",
            _mpmd_capture_scalar_and_ref,
            lambda x, i: (x[int(i)][None],),
            "a closed-over scalar and a closed-over ANY ref (copied to a jax.empty_ref VMEM "
            f"buffer inside the body); {_MPMD}:221",
        ),
        (
            f"{cls}.test_passing_in_refs{tc}",
            _mpmd_passing_in_refs,
            _identity,
            "pl.kernel(body=pltpu.sync_copy) called on two refs (no outputs) copies x; "
            f"{_MPMD}:355",
        ),
        (
            f"{cls}.test_passing_in_multiple_refs{tc}",
            _mpmd_passing_in_multiple_refs,
            lambda x, y: (y, x),
            f"two refs passed in swap contents through SMEM scratch; {_MPMD}:369",
        ),
        (
            f"{cls}.test_mixed_outputs_and_refs{tc}",
            _mpmd_mixed_outputs_and_refs,
            _mpmd_mixed_outputs_and_refs_ref,
            "an out_type output plus a ref argument the body mutates (row 0, first num_lanes "
            "lanes +1; upstream reads num_lanes from the SparseCore info, kept 16); "
            f"{_MPMD}:400",
        ),
        (
            f"{cls}.test_passing_in_refs_read_only{tc}",
            _mpmd_passing_in_refs_read_only,
            _identity,
            f"a ref passed to a body that ignores it is unchanged; {_MPMD}:428",
        ),
        (
            f"{cls}.test_passing_in_refs_with_scratch{tc}",
            _mpmd_passing_in_refs_with_scratch,
            _identity,
            f"refs in, SMEM scratch, copy x -> scratch -> o; {_MPMD}:445",
        ),
        (
            f"{cls}.test_closed_over_refs{tc}",
            _mpmd_closed_over_refs,
            _identity,
            f"a body with no arguments copies between closed-over refs; {_MPMD}:484",
        ),
        (
            f"{cls}.test_closed_over_refs_with_scratch{tc}",
            _mpmd_closed_over_refs_with_scratch,
            _identity,
            f"closed-over refs and a VMEM scratch argument; {_MPMD}:503",
        ),
        (
            f"{cls}.test_remat_with_checkpoint",
            _mpmd_remat_with_checkpoint,
            lambda x: (np.full_like(x, 2.0),),
            "jax.grad through jax.remat of a custom_vjp around pl.kernel(sync_copy) of x * 2; "
            f"{_MPMD}:571",
        ),
        (
            "MpmdHijaxTest.test_pass_weird_tuple_into_mpmd_map",
            _mpmd_pass_weird_tuple_into_mpmd_map,
            _identity,
            "a hijax WeirdTuple (two arrays) as pl.kernel input, output and VMEM scratch type "
            f"(f takes and returns its two arrays); {_MPMD}:915",
        ),
        (
            "MpmdHijaxTest.test_mpmd_map_hijax_input_output_aliasing",
            _mpmd_hijax_input_output_aliasing,
            lambda x0, x1: (x0 + 1, x1),
            "a WeirdTuple ref passed to pl.kernel, unpacked, x0 + 1, packed, written back; "
            f"{_MPMD}:941",
        ),
        (
            "MpmdHijaxTest.test_closed_over_hijax_refs",
            _mpmd_closed_over_hijax_refs,
            _identity,
            f"closed-over WeirdTuple refs copied through WeirdTuple VMEM scratch; {_MPMD}:1004",
        ),
        (
            "MpmdPhysicalizeTest.test_mpmd_map_physicalize",
            _mpmd_map_physicalize,
            lambda x, y: (x + y,),
            "fusible_dtype.physicalize of a fuser.fusible whose pl.kernel body packs/unpacks a "
            f"custom FusionDType; {_MPMD}:1047",
        ),
    ]
    for name, build, ref, what in one:
        _add(name, 1, build, ref, what=what)
    _add(
        f"{cls}.test_passing_in_duplicate_refs_errors{tc}",
        1,
        _mpmd_passing_in_duplicate_refs_errors,
        None,
        expect="raises_at_trace:NotImplementedError:"
        "Cannot pass the same ref into a mpmd map multiple times",
        what=f"the same ref passed twice to pl.kernel is rejected; {_MPMD}:468",
    )


# --------------------------------------------------------------------------------------------
# tests/pallas/tpu_pallas_random_test.py and tests/pallas/einshape_test.py
# --------------------------------------------------------------------------------------------

_RANDOM = _UP + "tpu_pallas_random_test.py"
_EINSHAPE = _UP + "einshape_test.py"


def _random_key_in_core_map(cores):
    def main(refs):
        key_hbm, o_ref = refs

        @pl.core_map(pltpu.create_tensorcore_mesh("core", num_cores=cores))
        def _():
            @functools.partial(
                pl.run_scoped,
                key_smem=pltpu.SMEM((), key_hbm.dtype),
                o_vmem=pltpu.VMEM(o_ref.shape, o_ref.dtype),
            )
            def _scoped(key_smem, o_vmem):
                pltpu.sync_copy(key_hbm, key_smem)
                o_vmem[...] = jax_random.uniform(
                    key_smem[...], shape=o_ref.shape, minval=0.0, maxval=1.0
                )
                pltpu.sync_copy(o_vmem, o_ref)

    @jax.jit
    def f(rng_key):
        y = jnp.zeros((8, 128), dtype=jnp.float32)
        _, y = pl.run_state(main)((rng_key, y))
        return y

    def g(key_data):
        key = pltpu.to_pallas_key(jax_random.wrap_key_data(key_data, impl="rbg"))
        y = f(key)
        return (jnp.max(y) >= jnp.min(y),)

    key_data = np.asarray(jax_random.key_data(jax_random.key(0, impl="rbg")))
    return g, (key_data,)


@functools.partial(jax.jit, static_argnames=["equation", "sizes"])
def _einshape_kernel(x, equation, sizes):
    sizes = dict(sizes)
    x_ref = jax.new_ref(x)
    fn = functools.partial(pltpu.einshape, equation, **sizes)
    out_ref = jax.new_ref(jnp.empty_like(jax.eval_shape(fn, x)))

    @pl.core_map(mesh=pltpu.create_tensorcore_mesh(num_cores=1, axis_name="x"))
    def _():
        @pl.with_scoped(
            pltpu.VMEM(x_ref.shape, x_ref.dtype),
            pltpu.VMEM(out_ref.shape, out_ref.dtype),
        )
        def inner(x_vmem_ref, out_vmem_ref):
            pltpu.sync_copy(x_ref, x_vmem_ref)
            out_vmem_ref[...] = pltpu.einshape(equation, x_vmem_ref[...], **sizes)
            pltpu.sync_copy(out_vmem_ref, out_ref)

        inner()

    return out_ref[...]


_EINSHAPES = [
    ("ab(cd)->cabd", (2, 4, 128 * 4), {"c": 4}),
    ("abcd->ab(cd)", (2, 3, 4, 128), {}),
    ("abc->a(bc)", (8, 2, 128), {}),
    ("a(bc)->abc", (10, 128 * 4), {"b": 4}),
    ("a(bc)->abc", (10, 128 * 2), {"c": 128}),
    ("a(bc)->abc", (10, 128 * 2), {"b": 2}),
    ("a(bc)->b(ac)", (8, 256), {"c": 128}),
]


def _einshape_build(equation, shape, sizes, dtype):
    x = np.arange(int(np.prod(shape))).reshape(shape).astype(jnp.dtype(dtype))

    def f(x):
        return (_einshape_kernel(x, equation, tuple(sizes.items())),)

    return f, (x,)


def _einshape_expected(equation, sizes):
    def ref(x):
        match equation:
            case "ab(cd)->cabd":
                a, b, cd = x.shape
                c = sizes["c"]
                d = cd // c
                return (x.reshape(a, b, c, d).transpose(2, 0, 1, 3),)
            case "abcd->ab(cd)":
                a, b, c, d = x.shape
                return (x.reshape(a, b, c * d),)
            case "abc->a(bc)":
                a, b, c = x.shape
                return (x.reshape(a, b * c),)
            case "a(bc)->abc":
                a, bc = x.shape
                if "b" in sizes:
                    b = sizes["b"]
                    c = bc // b
                else:
                    c = sizes["c"]
                    b = bc // c
                return (x.reshape(a, b, c),)
            case "a(bc)->b(ac)":
                a, bc = x.shape
                c = sizes["c"]
                b = bc // c
                return (x.reshape(a, b, c).transpose(1, 0, 2).reshape(b, a * c),)
        raise ValueError(f"Unsupported equation: {equation}")

    return ref


def _einshape_error_build(shape, equation, sizes):
    def f(x):
        return (_einshape_kernel(x, equation, tuple(sizes.items())),)

    return f, (np.zeros(shape, np.float32),)


def _cases_random_einshape():
    for test, shape, sizes, message, line in (
        ("test_error_ambiguous", (10, 12), {}, "Ambiguous split", 209),
        ("test_error_mismatch", (10, 13), {"b": 3}, "Cannot split size", 214),
    ):
        _add(
            f"EinshapeTPUKernelTest.{test}",
            1,
            functools.partial(_einshape_error_build, shape, "a(bc)->abc", sizes),
            None,
            expect=f"raises_at_trace:ValueError:{message}",
            what="the kernel's jax.eval_shape of pltpu.einshape rejects the equation before "
            f"the core_map is traced; {_EINSHAPE}:{line}",
        )
    for cores in (2, 1):
        _add(
            f"PRNGTest.test_key_in_core_map{_params(cores=cores)}",
            cores,
            functools.partial(_random_key_in_core_map, cores),
            lambda key_data: (np.bool_(True),),
            what="an rbg key (to_pallas_key) DMA'd to SMEM drives jax.random.uniform in a "
            "core_map; upstream asserts only max(y) >= min(y), which f returns (f takes the "
            f"key's raw uint32 data); {_RANDOM}:216",
        )
    for equation, shape, sizes in _EINSHAPES:
        for dtype in ("int32", "bfloat16"):
            p = _params(
                einshape=f"{equation}|{'x'.join(map(str, shape))}|"
                + ",".join(f"{k}{v}" for k, v in sizes.items()),
                dtype=dtype,
            )
            _add(
                f"EinshapeTPUKernelTest.test_einshape_basic{p}",
                1,
                functools.partial(_einshape_build, equation, shape, sizes, dtype),
                _einshape_expected(equation, sizes),
                what="pltpu.einshape on a VMEM value inside a 1-core core_map (refs from "
                f"jax.new_ref, scratch from pl.with_scoped); {_EINSHAPE}:170",
            )


# --------------------------------------------------------------------------------------------
# tests/pallas/tpu_pallas_pipeline_test.py: emit_pipeline inside pl.kernel / core_map
# --------------------------------------------------------------------------------------------

_PIPE = _UP + "tpu_pallas_pipeline_test.py"

# upstream's ``...PrimitiveTest`` subclasses rerun each class under
# ``config.use_emit_pipeline_primitive(True)`` (tpu_pallas_pipeline_test.py:2259)
_PRIMITIVE_CLASS = {
    "PallasCallPipelinePoisonTest": "PallasCallPipelinePoisonPrimitiveTest",
    "PallasCallMultipleBufferedPipelineTest": "PallasCallMultipleBufferedPipelinePrimitiveTest",
    "PallasCallMegacoreTest": "PallasCallMegacorePrimitiveTest",
    "PallasCallBoundedSliceIndexingTest": "PallasCallBoundedSliceIndexingPrimitiveTest",
    "PallasCallPipelineTransformedRefsTest": "PallasCallPipelineTransformedRefsPrimitiveTest",
    "PallasCallPipelineNonFlatArgsTest": "PallasCallPipelineNonFlatArgsPrimitiveTest",
}


def _with_pipeline_primitive(build):
    """``build`` with its ``f`` traced under ``jax_use_emit_pipeline_primitive``."""

    def wrapped():
        f, args = build()

        def g(*a):
            with jax_config.use_emit_pipeline_primitive(True):
                return f(*a)

        return g, args

    return wrapped


def _pipe_add(cls, test, params, cores, build, reference, *, line, what, expect="ok", only=None):
    """Adds ``cls.test`` and its ``...PrimitiveTest`` twin (or only one, ``only`` in
    {"plain", "primitive"})."""
    p = params[:-1] + f",cores={cores}]" if params else _params(cores=cores)
    if only != "primitive":
        _add(
            f"{cls}.{test}{p}",
            cores,
            build,
            reference,
            expect=expect,
            what=f"{what}; {_PIPE}:{line}",
        )
    if only != "plain":
        _add(
            f"{_PRIMITIVE_CLASS[cls]}.{test}{p}",
            cores,
            _with_pipeline_primitive(build),
            reference,
            expect=expect,
            what=f"{what} (with jax_use_emit_pipeline_primitive); {_PIPE}:{line}",
        )


def _pipe_poison(cores, dtype, no_pipelining):
    def pipeline_body(x_ref, o_ref):
        o_ref[:4, :] = x_ref[:4, :]

    @pl.kernel(
        out_type=jax.ShapeDtypeStruct((8, 128), dtype),
        mesh=pltpu.create_tensorcore_mesh("core", num_cores=cores),
    )
    def kernel(x_hbm_ref, o_hbm_ref):
        pltpu.emit_pipeline(
            pipeline_body,
            grid=(1,),
            in_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)),
            out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)),
            no_pipelining=no_pipelining,
        )(x_hbm_ref, o_hbm_ref)

    def f(x):
        # upstream: @jtu.with_config(jax_pallas_poison_buffers=True) on the class
        with jax_config.jax_pallas_poison_buffers(True):
            return kernel(x)

    return f, (np.ones((8, 128), dtype=dtype),)


def _pipe_poison_ref(x):
    out = x.copy()
    if jnp.issubdtype(x.dtype, jnp.floating):
        out[4:, :] = np.nan
    else:
        out[4:, :] = np.iinfo(x.dtype).min
    return (out,)


def _pipe_matmul_megacore(cores, x_buffer_count, y_buffer_count, out_buffer_count):
    block_shape = (128, 128)

    def matmul_kernel(x_hbm_ref, y_hbm_ref, o_hbm_ref):
        def pipeline_step(x_ref, y_ref, o_ref):
            @pl.when(pl.program_id(2) == 0)
            def _():
                o_ref[...] = jnp.zeros(o_ref.shape, jnp.float32)

            o_ref[...] += x_ref[...] @ y_ref[...]

        pltpu.emit_pipeline(
            pipeline_step,
            core_axis_name="core",
            grid=(
                512 // block_shape[0],
                512 // block_shape[0],
                512 // block_shape[0],
            ),
            dimension_semantics=(pltpu.PARALLEL, pltpu.PARALLEL, pltpu.ARBITRARY),
            in_specs=[
                pl.BlockSpec(
                    block_shape,
                    lambda i, j, k: (i, k),
                    pipeline_mode=pl.Buffered(buffer_count=x_buffer_count),
                ),
                pl.BlockSpec(
                    block_shape,
                    lambda i, j, k: (k, j),
                    pipeline_mode=pl.Buffered(buffer_count=y_buffer_count),
                ),
            ],
            out_specs=pl.BlockSpec(
                block_shape,
                lambda i, j, k: (i, j),
                pipeline_mode=pl.Buffered(buffer_count=out_buffer_count),
            ),
        )(x_hbm_ref, y_hbm_ref, o_hbm_ref)

    @jax.jit
    def fn(x, y):
        x_ref = jax.new_ref(x)
        y_ref = jax.new_ref(y)
        o_ref = jax.empty_ref(jax.ShapeDtypeStruct(x.shape, jnp.float32))
        mesh = pltpu.create_tensorcore_mesh("core", num_cores=cores)

        @pl.core_map(mesh)
        def _():
            matmul_kernel(x_ref, y_ref, o_ref)

        return jax.freeze(o_ref)

    return fn, (_ints((512, 512), 0), _ints((512, 512), 1))


def _pipe_single_buffered_output(cores):
    def body(o_ref):
        @pl.when(pl.program_id(1) == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)

        o_ref[...] += 1.0

    spec = pl.BlockSpec(
        (1, 8, 128),
        lambda b, _: (b, 0, 0),
        memory_space=pltpu.VMEM,
        pipeline_mode=pl.Buffered(buffer_count=1),
    )

    @pl.kernel(
        out_type=jax.ShapeDtypeStruct((2, 8, 128), jnp.float32),
        mesh=pltpu.create_tensorcore_mesh("core", num_cores=cores),
    )
    def run_kernel(o_ref):
        pltpu.emit_pipeline(
            body,
            grid=(2, 3),
            out_specs=(spec,),
        )(o_ref)

    return run_kernel, ()


def _pipe_nondivisible_dynamic(cores):
    def mul_pipeline(x_ref, y_ref):
        y_ref[...] = x_ref[...] * 2

    def mul_kernel(i, x_ref, y_ref):
        pltpu.emit_pipeline(
            mul_pipeline,
            grid=(i, 5),
            in_specs=[
                pl.BlockSpec((128, 128), lambda i, j: (i, j)),
            ],
            out_specs=pl.BlockSpec((128, 128), lambda i, j: (i, j)),
            core_axis_name="core",
            dimension_semantics=(pltpu.PARALLEL, pltpu.PARALLEL),
        )(x_ref, y_ref)

    @jax.jit
    def func(x, i):
        x_ref = jax.new_ref(x)
        y_ref = jax.empty_ref(jax.ShapeDtypeStruct.like(x))
        mesh = pltpu.create_tensorcore_mesh("core", num_cores=cores)

        @pl.core_map(mesh)
        def _():
            mul_kernel(i, x_ref, y_ref)

        return jax.freeze(y_ref)

    return func, (_ints((640, 640), 0), _i32(5))


_P, _A = pltpu.PARALLEL, pltpu.ARBITRARY

_PARTITION_GRID_PARAMS = [
    # 1D scenarios
    ((8,), (_P,), None),
    ((5,), (_P,), None),
    ((8,), (_P,), 0),
    ((5,), (_P,), 0),
    # 2D scenarios (1 Parallel, 1 Arbitrary)
    ((8, 3), (_P, _A), None),
    ((5, 3), (_P, _A), None),
    ((8, 3), (_P, _A), 0),
    ((5, 3), (_P, _A), 0),
    ((2, 7), (_A, _P), 1),
    # 2D Two Parallel (Static)
    ((8, 8), (_P, _P), None),
    ((5, 7), (_P, _P), None),
    ((1, 1), (_P, _P), None),
]


def _pipe_can_partition_grid(cores, grid_vals, dimension_semantics, dynamic_grid_index):
    def mul_kernel(grid, o_vmem_ref):
        def mul_pipeline():
            o_vmem_ref[...] += 1

        pltpu.emit_pipeline(
            mul_pipeline,
            grid=grid,
            out_specs=[],
            core_axis_name="core",
            dimension_semantics=dimension_semantics,
        )()

    num_cores = cores  # upstream: pltpu.get_tpu_info().num_cores

    @jax.jit
    def func(*args):
        o_ref = jax.empty_ref(jax.ShapeDtypeStruct((num_cores, 8, 128), jnp.int32))
        mesh = pltpu.create_tensorcore_mesh("core", num_cores=cores)

        @pl.core_map(mesh)
        def _():
            def run(o_vmem_ref):
                o_vmem_ref[...] = jnp.zeros_like(o_vmem_ref)
                if dynamic_grid_index is None:
                    grid = grid_vals
                else:
                    grid = list(grid_vals)
                    grid[dynamic_grid_index] = args[0]
                    grid = tuple(grid)
                mul_kernel(grid, o_vmem_ref)
                pltpu.sync_copy(o_vmem_ref, o_ref.at[jax.lax.axis_index("core")])

            pl.run_scoped(run, pltpu.VMEM((8, 128), jnp.int32))

        return jax.freeze(o_ref)

    if dynamic_grid_index is not None:
        return func, (_i32(grid_vals[dynamic_grid_index]),)
    return func, ()


def _pipe_can_partition_grid_ref(num_cores, grid_vals, dimension_semantics):
    """Upstream's expected value (it mirrors pipeline._partition_grid)."""
    parallel_dims = [i for i, d in enumerate(dimension_semantics) if d == pltpu.PARALLEL]
    div_dims = [
        i for i in parallel_dims if isinstance(grid_vals[i], int) and grid_vals[i] % num_cores == 0
    ]
    if div_dims:
        partition_dim = min(div_dims)
    else:
        static_parallel_dims = [
            i for i in parallel_dims if isinstance(grid_vals[i], int) and grid_vals[i] > 1
        ]
        if not static_parallel_dims:
            partition_dim = parallel_dims[0]  # Must be dynamic (if mixed)
        else:
            max_val = max(grid_vals[i] for i in static_parallel_dims)
            partition_dim = min(i for i in static_parallel_dims if grid_vals[i] == max_val)
    dim_size = grid_vals[partition_dim]
    other_dims_prod = int(np.prod([v for i, v in enumerate(grid_vals) if i != partition_dim]))
    q, r = divmod(dim_size, num_cores)
    expected = np.empty((num_cores, 8, 128), np.int32)
    for c in range(num_cores):
        count = q + (1 if c < r else 0)
        expected[c] = count * other_dims_prod

    def ref(*args):
        return (expected,)

    return ref


def _pipe_megacore_mul(cores):
    def matmul_pipeline(x_ref, y_ref):
        y_ref[...] = x_ref[...] * 2

    def matmul_kernel(x_ref, y_ref):
        pltpu.emit_pipeline(
            matmul_pipeline,
            grid=(4, 4),
            in_specs=[
                pl.BlockSpec((128, 128), lambda i, j: (i, j)),
            ],
            out_specs=pl.BlockSpec((128, 128), lambda i, j: (i, j)),
            core_axis_name="core",
            dimension_semantics=(pltpu.ARBITRARY, pltpu.PARALLEL),
        )(x_ref, y_ref)

    @jax.jit
    def func(x):
        x_ref = jax.new_ref(x)
        y_ref = jax.empty_ref(jax.ShapeDtypeStruct.like(x))
        mesh = pltpu.create_tensorcore_mesh("core", num_cores=cores)

        @pl.core_map(mesh)
        def _():
            matmul_kernel(x_ref, y_ref)

        return jax.freeze(y_ref)

    return func, (_ints((512, 512), 0),)


def _pipe_megacore_matmul(cores, m, k, n, bm, bk, bn):
    def matmul_pipeline(x_ref, y_ref, z_ref):
        @pl.when(pl.program_id(2) == 0)
        def _():
            z_ref[...] = jnp.zeros_like(z_ref)

        z_ref[...] += x_ref[...] @ y_ref[...]

    def matmul_kernel(x_ref, y_ref, z_ref, *, bm, bk, bn):
        m, k = x_ref.shape
        _, n = y_ref.shape
        assert k % bk == 0
        pltpu.emit_pipeline(
            matmul_pipeline,
            grid=(pl.cdiv(m, bm), pl.cdiv(n, bn), pl.cdiv(k, bk)),
            in_specs=[
                pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)),
                pl.BlockSpec((bk, bn), lambda i, j, k: (k, j)),
            ],
            out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
            core_axis_name="core",
            dimension_semantics=(pltpu.PARALLEL, pltpu.PARALLEL, pltpu.ARBITRARY),
        )(x_ref, y_ref, z_ref)

    @jax.jit
    def func(x, y):
        x_ref = jax.new_ref(x)
        y_ref = jax.new_ref(y)
        o_ref = jax.empty_ref(jax.ShapeDtypeStruct((m, n), jnp.float32))
        mesh = pltpu.create_tensorcore_mesh("core", num_cores=cores)

        @pl.core_map(mesh)
        def _():
            matmul_kernel(x_ref, y_ref, o_ref, bm=bm, bk=bk, bn=bn)

        return jax.freeze(o_ref)

    return func, (_ints((m, k), 42), _ints((k, n), 43))


def _pipe_axis_queries(cores):
    mesh = pltpu.create_tensorcore_mesh("core", num_cores=cores)
    grid_size = 8

    def kernel(o_ref):
        def pipeline_body(o_smem_ref):
            pid = pl.program_id(0)
            nprogs = pl.num_programs(0)
            asize = jax.lax.axis_size("core")
            aindex = jax.lax.axis_index("core")
            o_smem_ref[0], o_smem_ref[1] = pid, nprogs
            o_smem_ref[2], o_smem_ref[3] = asize, aindex

        pltpu.emit_pipeline(
            pipeline_body,
            grid=(grid_size,),
            out_specs=pl.BlockSpec((None, 128), lambda i: (i, 0), memory_space=pltpu.SMEM),
            core_axis_name="core",
            dimension_semantics=(pltpu.PARALLEL,),
        )(o_ref)

    @jax.jit
    def func():
        o_ref = jax.empty_ref(jax.ShapeDtypeStruct((grid_size, 128), jnp.int32))

        @pl.core_map(mesh)
        def _():
            kernel(o_ref)

        return jax.freeze(o_ref)

    def f():
        # upstream asserts columns 0..3 only; the rest of each SMEM block is never written
        return (func()[:, :4],)

    return f, ()


def _pipe_axis_queries_ref(num_cores):
    grid_size = 8
    local_nprogs = grid_size // num_cores
    rows = [[i, local_nprogs, num_cores, i // local_nprogs] for i in range(grid_size)]
    out = np.asarray(rows, np.int32)
    return lambda: (out,)


def _pipe_bounded_slice_invalid_index(cores):
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    def main(refs):
        x_ref, y_ref = refs

        @pl.core_map(pltpu.create_tensorcore_mesh("core", num_cores=cores))
        def _():
            pltpu.emit_pipeline(
                kernel,
                grid=(1,),
                in_specs=(
                    pl.BlockSpec(
                        (pl.BoundedSlice(8), 8, 128),
                        lambda i: (0, 0, 0),  # first index needs to be a pl.ds
                    ),
                ),
                out_specs=pl.BlockSpec(
                    (8, 8, 128),
                    lambda i: (0, 0, 0),
                ),
            )(x_ref, y_ref)

    @jax.jit
    def f(x):
        y = jnp.ones((8, 8, 128), dtype=jnp.int32)
        _, y = pl.run_state(main)((x, y))
        return y

    return f, (_arange_i32(16, 8, 128),)


def _pipe_bounded_slice_static(cores):
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    def main(refs):
        x_ref, y_ref = refs

        @pl.core_map(pltpu.create_tensorcore_mesh("core", num_cores=cores))
        def _():
            pltpu.emit_pipeline(
                kernel,
                grid=(1,),
                in_specs=(
                    pl.BlockSpec(
                        (pl.BoundedSlice(8), 8, 128),
                        lambda i: (pl.ds(4, 8), 0, 0),
                    ),
                ),
                out_specs=pl.BlockSpec(
                    (8, 8, 128),
                    lambda i: (0, 0, 0),
                ),
            )(x_ref, y_ref)

    @jax.jit
    def f(x):
        y = jnp.ones((8, 8, 128), dtype=jnp.int32)
        _, y = pl.run_state(main)((x, y))
        return y

    return f, (_arange_i32(16, 8, 128),)


def _pipe_bounded_slice_dynamic(cores):
    slices = np.array([[0, 3], [3, 8], [8, 11], [11, 16]], dtype=np.int32)[::-1].copy()

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    def main(refs):
        x_ref, y_ref, slices_ref = refs

        @pl.core_map(pltpu.create_tensorcore_mesh("core", num_cores=cores))
        def _():
            @functools.partial(pl.run_scoped, slices_smem=pltpu.SMEM(slices.shape, slices.dtype))
            def _(slices_smem):
                pltpu.sync_copy(slices_ref, slices_smem)

                def index_map(i):
                    return (
                        pl.ds(slices_smem[i, 0], slices_smem[i, 1] - slices_smem[i, 0]),
                        0,
                        0,
                    )

                block_spec = pl.BlockSpec(
                    (pl.BoundedSlice(16), 8, 128),
                    index_map,
                )
                pltpu.emit_pipeline(
                    kernel,
                    grid=(slices.shape[0],),
                    in_specs=(block_spec,),
                    out_specs=block_spec,
                )(x_ref, y_ref)

    @jax.jit
    def f(x, slices):
        y = pl.empty_like(x)
        _, y, _ = pl.run_state(main)((x, y, slices))
        return y

    return f, (_arange_i32(16, 8, 128), slices)


def _tr_grid(dynamic_grid, *n):
    """``(jnp.array(n),) if dynamic_grid else (n,)`` as upstream writes each grid."""
    return tuple(jnp.array(v) for v in n) if dynamic_grid else n


def _pipe_transformed_refs_as_inputs(cores, dynamic_grid):
    def body(x, o):
        o[...] = x[...]

    @jax.jit
    def fn(x):
        out_type = jax.ShapeDtypeStruct(x.shape[1:], x.dtype)

        @pl.kernel(out_type=out_type, mesh=pltpu.create_tensorcore_mesh("core", num_cores=cores))
        def run_kernel(x_ref, o_ref):
            x_ref = x_ref.at[1, ...]
            bs = x_ref.shape[:-1] + (256,)
            idx_map = lambda i: (0,) * (x_ref.ndim - 1) + (i,)  # noqa: E731
            pltpu.emit_pipeline(
                body,
                grid=_tr_grid(dynamic_grid, 2),
                in_specs=[pl.BlockSpec(bs, idx_map)],
                out_specs=[pl.BlockSpec(bs, idx_map)],
                dimension_semantics=(pltpu.ARBITRARY,),
            )(x_ref, o_ref)

        return run_kernel(x)

    return fn, (np.arange(2 * 16 * 512, dtype=np.float32).reshape((2, 16, 512)),)


def _pipe_transformed_refs_as_inputs_nested(cores, dynamic_grid):
    def fn(x):
        out_type = jax.ShapeDtypeStruct(x.shape[1:], x.dtype)

        @pl.kernel(out_type=out_type, mesh=pltpu.create_tensorcore_mesh("core", num_cores=cores))
        def run_kernel(x_ref, o_ref):
            x_ref = x_ref.at[1, ...]

            def outer_body(outer_x, outer_o):
                def inner_body(x, o):
                    o[...] = x[...]

                pltpu.emit_pipeline(
                    inner_body,
                    grid=_tr_grid(dynamic_grid, 2),
                    in_specs=[pl.BlockSpec((16, 128), lambda i: (0, i))],
                    out_specs=[pl.BlockSpec((16, 128), lambda i: (0, i))],
                    dimension_semantics=(pltpu.PARALLEL,),
                )(outer_x, outer_o)

            pltpu.emit_pipeline(
                outer_body,
                grid=_tr_grid(dynamic_grid, 2),
                in_specs=[pl.BlockSpec((16, 256), lambda i: (0, i))],
                out_specs=[pl.BlockSpec((16, 256), lambda i: (0, i))],
                dimension_semantics=(pltpu.PARALLEL,),
            )(x_ref, o_ref)

        return run_kernel(x)

    return fn, (np.arange(2 * 16 * 512, dtype=np.float32).reshape((2, 16, 512)),)


def _pipe_transformed_refs_as_inputs_nested_uneven(cores, dynamic_grid):
    def fn(x):
        out_type = jax.ShapeDtypeStruct((256, 128), x.dtype)

        @pl.kernel(out_type=out_type, mesh=pltpu.create_tensorcore_mesh("core", num_cores=cores))
        def run_kernel(x_ref, o_ref):
            def outer_body(outer_x, outer_o):
                outer_o[...] = jnp.zeros(outer_o.shape, outer_o.dtype)
                tx = outer_x.at[0:128, :].at[pl.ds(0, 64), :]
                to = outer_o.at[pl.ds(0, 64), :]

                def inner_body(x, o):
                    o[...] = x[...]

                pltpu.emit_pipeline(
                    inner_body,
                    grid=_tr_grid(dynamic_grid, 2),
                    in_specs=[pl.BlockSpec((32, 128), lambda i: (i, 0))],
                    out_specs=[pl.BlockSpec((32, 128), lambda i: (i, 0))],
                    dimension_semantics=(pltpu.PARALLEL,),
                )(tx, to)

            pltpu.emit_pipeline(
                outer_body,
                grid=_tr_grid(dynamic_grid, 2),
                in_specs=[pl.BlockSpec((256, 128), lambda i: (i, 0))],
                out_specs=[pl.BlockSpec((128, 128), lambda i: (i, 0))],
                dimension_semantics=(pltpu.PARALLEL,),
            )(x_ref, o_ref)

        return run_kernel(x)

    return fn, (np.arange(512 * 128, dtype=np.float32).reshape((512, 128)),)


def _pipe_nested_uneven_ref(x):
    expected = np.zeros((256, 128), dtype=np.float32)
    expected[0:64, :] = x[0:64, :]
    expected[128:192, :] = x[256:320, :]
    return (expected,)


def _pipe_transformed_refs_as_inputs_nested_bitcast(cores, dynamic_grid):
    @jax.jit
    def fn(x):
        out_type = jax.ShapeDtypeStruct((128, 128), x.dtype)

        @pl.kernel(out_type=out_type, mesh=pltpu.create_tensorcore_mesh("core", num_cores=cores))
        def run_kernel(x_ref, o_ref):
            def outer_body(outer_x, outer_o):
                tx = outer_x.at[0:64, :].bitcast(jnp.int16)
                to = outer_o.bitcast(jnp.int16)

                def inner_body(x, o):
                    o[...] = x[...]

                pltpu.emit_pipeline(
                    inner_body,
                    grid=_tr_grid(dynamic_grid, 4),
                    in_specs=[pl.BlockSpec((32, 128), lambda i: (i, 0))],
                    out_specs=[pl.BlockSpec((32, 128), lambda i: (i, 0))],
                    dimension_semantics=(pltpu.PARALLEL,),
                )(tx, to)

            pltpu.emit_pipeline(
                outer_body,
                grid=_tr_grid(dynamic_grid, 2),
                in_specs=[pl.BlockSpec((128, 128), lambda i: (i, 0))],
                out_specs=[pl.BlockSpec((64, 128), lambda i: (i, 0))],
                dimension_semantics=(pltpu.PARALLEL,),
            )(x_ref, o_ref)

        return run_kernel(x)

    return fn, (np.arange(256 * 128, dtype=np.float32).reshape((256, 128)),)


def _pipe_nested_bitcast_ref(x):
    """Upstream's expectation, written through state_utils.bitcast (TPU packing: int16 rows
    2r and 2r + 1 hold float32 row r), is rows 0:64 and 128:192 of x."""
    x_i16 = np.asarray(state_utils.bitcast(jnp.asarray(x), jnp.int16))
    expected_i16 = np.zeros((256, 128), dtype=np.int16)
    expected_i16[0:128, :] = x_i16[0:128, :]
    expected_i16[128:256, :] = x_i16[256:384, :]
    out = np.asarray(state_utils.bitcast(jnp.asarray(expected_i16), jnp.float32))
    assert np.array_equal(out, np.concatenate([x[0:64], x[128:192]]))
    return (out,)


def _pipe_transformed_refs_as_inputs_nested_3level(cores, dynamic_grid):
    @jax.jit
    def fn(x):
        out_type = jax.ShapeDtypeStruct(x.shape[1:], x.dtype)

        @pl.kernel(out_type=out_type, mesh=pltpu.create_tensorcore_mesh("core", num_cores=cores))
        def run_kernel(x_ref, o_ref):
            x_ref = x_ref.at[1, ...]

            def outer_body(outer_x, outer_o):
                def middle_body(middle_x, middle_o):
                    def inner_body(x, o):
                        o[...] = x[...]

                    pltpu.emit_pipeline(
                        inner_body,
                        grid=_tr_grid(dynamic_grid, 8),
                        in_specs=[pl.BlockSpec((16, 512), lambda i: (0, i))],
                        out_specs=[pl.BlockSpec((16, 512), lambda i: (0, i))],
                        dimension_semantics=(pltpu.PARALLEL,),
                    )(middle_x, middle_o)

                pltpu.emit_pipeline(
                    middle_body,
                    grid=_tr_grid(dynamic_grid, 8),
                    in_specs=[pl.BlockSpec((16, 4096), lambda i: (0, i))],
                    out_specs=[pl.BlockSpec((16, 4096), lambda i: (0, i))],
                    dimension_semantics=(pltpu.PARALLEL,),
                )(outer_x, outer_o)

            pltpu.emit_pipeline(
                outer_body,
                grid=_tr_grid(dynamic_grid, 8),
                in_specs=[pl.BlockSpec((16, 32768), lambda i: (0, i))],
                out_specs=[pl.BlockSpec((16, 32768), lambda i: (0, i))],
                dimension_semantics=(pltpu.PARALLEL,),
            )(x_ref, o_ref)

        return run_kernel(x)

    return fn, (np.arange(2 * 16 * 262144, dtype=np.float32).reshape((2, 16, 262144)),)


def _pipe_transformed_refs_as_inputs_nested_hbm_passthrough(cores, dynamic_grid):
    @jax.jit
    def fn(x, y):
        out_type = jax.ShapeDtypeStruct(x.shape[1:], x.dtype)

        @pl.kernel(out_type=out_type, mesh=pltpu.create_tensorcore_mesh("core", num_cores=cores))
        def run_kernel(x_ref, y_ref, o_ref):
            x_ref = x_ref.at[1, ...]
            y_scratch = jax.empty_ref(jax.ShapeDtypeStruct((16, 512), jnp.float32), pltpu.VMEM)

            def outer_body(outer_x, outer_o):
                pltpu.sync_copy(y_ref, y_scratch)

                def inner_body(x, o):
                    o[...] = x[...] + y_scratch[...]

                pltpu.emit_pipeline(
                    inner_body,
                    grid=_tr_grid(dynamic_grid, 8),
                    in_specs=[pl.BlockSpec((16, 512), lambda i: (0, i))],
                    out_specs=[pl.BlockSpec((16, 512), lambda i: (0, i))],
                    dimension_semantics=(pltpu.PARALLEL,),
                )(outer_x, outer_o)

            pltpu.emit_pipeline(
                outer_body,
                grid=_tr_grid(dynamic_grid, 8),
                in_specs=[pl.BlockSpec((16, 4096), lambda i: (0, i))],
                out_specs=[pl.BlockSpec((16, 4096), lambda i: (0, i))],
                dimension_semantics=(pltpu.PARALLEL,),
            )(x_ref, o_ref)

        return run_kernel(x, y)

    x = np.arange(2 * 16 * 32768, dtype=np.float32).reshape((2, 16, 32768))
    return fn, (x, np.ones((16, 512), dtype=np.float32))


def _pipe_transformed_refs_as_inputs_nested_mixed_grids(cores, dynamic_grid):
    @jax.jit
    def fn(x):
        out_type = jax.ShapeDtypeStruct(x.shape[1:], x.dtype)

        @pl.kernel(out_type=out_type, mesh=pltpu.create_tensorcore_mesh("core", num_cores=cores))
        def run_kernel(x_ref, o_ref):
            x_ref = x_ref.at[1, ...]

            def outer_body(outer_x, outer_o):
                def inner_body(x, o):
                    o[...] = x[...]

                pltpu.emit_pipeline(
                    inner_body,
                    grid=_tr_grid(dynamic_grid, 8),
                    in_specs=[pl.BlockSpec((32, 512), lambda i: (0, i))],
                    out_specs=[pl.BlockSpec((32, 512), lambda i: (0, i))],
                    dimension_semantics=(pltpu.PARALLEL,),
                )(outer_x, outer_o)

            pltpu.emit_pipeline(
                outer_body,
                grid=_tr_grid(dynamic_grid, 8, 8),
                in_specs=[pl.BlockSpec((32, 4096), lambda i, j: (i, j))],
                out_specs=[pl.BlockSpec((32, 4096), lambda i, j: (i, j))],
                dimension_semantics=(pltpu.PARALLEL, pltpu.PARALLEL),
            )(x_ref, o_ref)

        return run_kernel(x)

    return fn, (np.arange(2 * 256 * 32768, dtype=np.float32).reshape((2, 256, 32768)),)


def _pipe_transformed_refs_as_inputs_nested_sequential(cores, dynamic_grid):
    @jax.jit
    def fn(x):
        out_type = jax.ShapeDtypeStruct(x.shape[1:], x.dtype)

        @pl.kernel(out_type=out_type, mesh=pltpu.create_tensorcore_mesh("core", num_cores=cores))
        def run_kernel(x_ref, o_ref):
            x_ref = x_ref.at[1, ...]

            def outer_body(outer_x, outer_o):
                tmp = jax.empty_ref(jax.ShapeDtypeStruct((16, 4096), jnp.float32), pltpu.VMEM)

                def inner_body_1(x, o):
                    o[...] = x[...] * 2

                def inner_body_2(x, o):
                    o[...] = x[...] + 1

                pltpu.emit_pipeline(
                    inner_body_1,
                    grid=_tr_grid(dynamic_grid, 8),
                    in_specs=[pl.BlockSpec((16, 512), lambda i: (0, i))],
                    out_specs=[pl.BlockSpec((16, 512), lambda i: (0, i))],
                    dimension_semantics=(pltpu.PARALLEL,),
                )(outer_x, tmp)
                pltpu.emit_pipeline(
                    inner_body_2,
                    grid=_tr_grid(dynamic_grid, 8),
                    in_specs=[pl.BlockSpec((16, 512), lambda i: (0, i))],
                    out_specs=[pl.BlockSpec((16, 512), lambda i: (0, i))],
                    dimension_semantics=(pltpu.PARALLEL,),
                )(tmp, outer_o)

            pltpu.emit_pipeline(
                outer_body,
                grid=_tr_grid(dynamic_grid, 8),
                in_specs=[pl.BlockSpec((16, 4096), lambda i: (0, i))],
                out_specs=[pl.BlockSpec((16, 4096), lambda i: (0, i))],
                dimension_semantics=(pltpu.PARALLEL,),
            )(x_ref, o_ref)

        return run_kernel(x)

    return fn, (np.arange(2 * 16 * 32768, dtype=np.float32).reshape((2, 16, 32768)),)


_NON_FLAT_OUT_TYPE = [
    (),
    (
        jax.ShapeDtypeStruct((512,), jnp.float32),
        jax.ShapeDtypeStruct((512,), jnp.float32),
    ),
]


def _non_flat_args(run_kernel):
    """f(x, y, z) = upstream's run_kernel(x, x * 2, x * 3), its two leaves."""

    def f(x, y, z):
        out = run_kernel(x, y, z)
        assert len(out) == 2 and out[0] == ()
        return out[1][0], out[1][1]

    x = np.arange(512, dtype=np.float32)
    return f, (x, x * 2, x * 3)


def _pipe_non_flat_args(cores, dynamic_grid):
    out_type = _NON_FLAT_OUT_TYPE

    def body(in_refs, out_refs):
        out_refs[1][0][...] = in_refs[0][0][...] + in_refs[2][0][...]
        out_refs[1][1][...] = in_refs[2][1][...]

    @pl.kernel(out_type=out_type, mesh=pltpu.create_tensorcore_mesh("core", num_cores=cores))
    def run_kernel(x_ref, y_ref, z_ref, out_xy_ref, out_z_ref):
        in_specs = (
            [
                (pl.BlockSpec((256,), lambda i: (i,)),),
                (),
                (pl.BlockSpec((256,), lambda i: (i,)), pl.BlockSpec((256,), lambda i: (i,))),
            ],
        )
        out_specs = (
            [(), (pl.BlockSpec((256,), lambda i: (i,)), pl.BlockSpec((256,), lambda i: (i,)))],
        )
        pltpu.emit_pipeline(
            body,
            grid=_tr_grid(dynamic_grid, 2),
            in_specs=in_specs,
            out_specs=out_specs,
        )([(x_ref,), (), (y_ref, z_ref)], [out_xy_ref, out_z_ref])

    return _non_flat_args(run_kernel)


def _pipe_non_flat_args_and_scratch(cores, dynamic_grid):
    out_type = _NON_FLAT_OUT_TYPE

    def body(in_refs, out_refs):
        scratch1 = jax.empty_ref(jax.ShapeDtypeStruct((256,), jnp.float32), memory_space=pltpu.VMEM)
        scratch2 = jax.empty_ref(jax.ShapeDtypeStruct((256,), jnp.float32), memory_space=pltpu.VMEM)
        scratch2_list = [scratch2]
        scratch1[...] = in_refs[0][0][...] + in_refs[2][0][...]
        out_refs[1][0][...] = scratch1[...]
        scratch2_list[0][...] = in_refs[2][1][...]
        out_refs[1][1][...] = scratch2_list[0][...]

    @pl.kernel(out_type=out_type, mesh=pltpu.create_tensorcore_mesh("core", num_cores=cores))
    def run_kernel(x_ref, y_ref, z_ref, out_xy_ref, out_z_ref):
        in_specs = (
            [
                (pl.BlockSpec((256,), lambda i: (i,)),),
                (),
                (pl.BlockSpec((256,), lambda i: (i,)), pl.BlockSpec((256,), lambda i: (i,))),
            ],
        )
        out_specs = (
            [(), (pl.BlockSpec((256,), lambda i: (i,)), pl.BlockSpec((256,), lambda i: (i,)))],
        )
        pltpu.emit_pipeline(
            body,
            grid=_tr_grid(dynamic_grid, 2),
            in_specs=in_specs,
            out_specs=out_specs,
        )([(x_ref,), (), (y_ref, z_ref)], [out_xy_ref, out_z_ref])

    return _non_flat_args(run_kernel)


def _pipe_non_flat_args_nested(cores, dynamic_grid):
    out_type = _NON_FLAT_OUT_TYPE

    def outer_body(outer_in, outer_out):
        def inner_body(in_refs, out_refs):
            out_refs[1][0][...] = in_refs[0][0][...] + in_refs[2][0][...]
            out_refs[1][1][...] = in_refs[2][1][...]

        pltpu.emit_pipeline(
            inner_body,
            grid=_tr_grid(dynamic_grid, 2),
            in_specs=(
                [
                    (pl.BlockSpec((128,), lambda i: (i,)),),
                    (),
                    (pl.BlockSpec((128,), lambda i: (i,)), pl.BlockSpec((128,), lambda i: (i,))),
                ],
            ),
            out_specs=(
                [(), (pl.BlockSpec((128,), lambda i: (i,)), pl.BlockSpec((128,), lambda i: (i,)))],
            ),
        )(outer_in, outer_out)

    @pl.kernel(out_type=out_type, mesh=pltpu.create_tensorcore_mesh("core", num_cores=cores))
    def run_kernel(x_ref, y_ref, z_ref, out_xy_ref, out_z_ref):
        in_specs = (
            [
                (pl.BlockSpec((256,), lambda i: (i,)),),
                (),
                (pl.BlockSpec((256,), lambda i: (i,)), pl.BlockSpec((256,), lambda i: (i,))),
            ],
        )
        out_specs = (
            [(), (pl.BlockSpec((256,), lambda i: (i,)), pl.BlockSpec((256,), lambda i: (i,)))],
        )

        pltpu.emit_pipeline(
            outer_body,
            grid=_tr_grid(dynamic_grid, 2),
            in_specs=in_specs,
            out_specs=out_specs,
        )([(x_ref,), (), (y_ref, z_ref)], [out_xy_ref, out_z_ref])

    return _non_flat_args(run_kernel)


def _pipe_non_flat_args_and_scratch_nested(cores, dynamic_grid):
    out_type = _NON_FLAT_OUT_TYPE

    def outer_body(outer_in, outer_out):
        outer_scratch1 = jax.empty_ref(
            jax.ShapeDtypeStruct((256,), jnp.float32), memory_space=pltpu.VMEM
        )
        outer_scratch2 = jax.empty_ref(
            jax.ShapeDtypeStruct((256,), jnp.float32), memory_space=pltpu.VMEM
        )
        outer_scratch2_list = [outer_scratch2]
        outer_scratch1[...] = outer_in[0][0][...] + outer_in[2][0][...]
        outer_scratch2_list[0][...] = outer_in[2][1][...]

        def inner_body(in_refs, out_refs):
            inner_scratch = jax.empty_ref(
                jax.ShapeDtypeStruct((128,), jnp.float32), memory_space=pltpu.VMEM
            )
            inner_scratch[...] = in_refs[0][0][...]
            out_refs[1][0][...] = inner_scratch[...]
            out_refs[1][1][...] = in_refs[2][0][...]

        pltpu.emit_pipeline(
            inner_body,
            grid=_tr_grid(dynamic_grid, 2),
            in_specs=(
                [
                    (pl.BlockSpec((128,), lambda i: (i,)),),
                    (),
                    (pl.BlockSpec((128,), lambda i: (i,)),),
                ],
            ),
            out_specs=(
                [(), (pl.BlockSpec((128,), lambda i: (i,)), pl.BlockSpec((128,), lambda i: (i,)))],
            ),
        )([(outer_scratch1,), (), (outer_scratch2_list[0],)], outer_out)

    @pl.kernel(out_type=out_type, mesh=pltpu.create_tensorcore_mesh("core", num_cores=cores))
    def run_kernel(x_ref, y_ref, z_ref, out_xy_ref, out_z_ref):
        in_specs = (
            [
                (pl.BlockSpec((256,), lambda i: (i,)),),
                (),
                (pl.BlockSpec((256,), lambda i: (i,)), pl.BlockSpec((256,), lambda i: (i,))),
            ],
        )
        out_specs = (
            [(), (pl.BlockSpec((256,), lambda i: (i,)), pl.BlockSpec((256,), lambda i: (i,)))],
        )
        pltpu.emit_pipeline(
            outer_body,
            grid=_tr_grid(dynamic_grid, 2),
            in_specs=in_specs,
            out_specs=out_specs,
        )([(x_ref,), (), (y_ref, z_ref)], [out_xy_ref, out_z_ref])

    return _non_flat_args(run_kernel)


def _cases_pipeline():
    for cores in (2, 1):
        c = cores
        cls = "PallasCallPipelinePoisonTest"
        for dtype in ("float32", "int32", "int8", "float8_e4m3fn"):
            for no_pipelining in (False, True):
                _pipe_add(
                    cls,
                    "test_poison_buffers",
                    _params(dtype=dtype, no_pipelining=no_pipelining),
                    c,
                    functools.partial(_pipe_poison, c, getattr(jnp, dtype), no_pipelining),
                    _pipe_poison_ref,
                    line=528,
                    what="emit_pipeline writes half of its output block; the other half is the "
                    "poison a VMEM buffer gets under jax_pallas_poison_buffers=True (f sets it "
                    "around its call; it acts when Mosaic lowers): NaN for floats (upstream "
                    "asserts isnan, any payload), iinfo.min for ints",
                )
        cls = "PallasCallMultipleBufferedPipelineTest"
        for xb in (2, 4):
            for yb in (2, 4):
                _pipe_add(
                    cls,
                    "test_matmul_megacore",
                    _params(x_buffer_count=xb, y_buffer_count=yb, out_buffer_count=2),
                    c,
                    functools.partial(_pipe_matmul_megacore, c, xb, yb, 2),
                    lambda x, y: (_mm(x, y),),
                    line=665,
                    what="512^3 matmul, emit_pipeline with pl.Buffered(n) specs and "
                    "core_axis_name='core' inside a core_map over new_ref/empty_ref refs",
                )
        _pipe_add(
            cls,
            "test_single_buffered_output",
            "",
            c,
            functools.partial(_pipe_single_buffered_output, c),
            lambda: (np.full((2, 8, 128), 3, np.float32),),
            line=876,
            what="a Buffered(1) VMEM output block accumulated over the 3-step inner grid axis",
        )
        cls = "PallasCallMegacoreTest"
        _pipe_add(
            cls,
            "test_can_partition_nondivisible_grid_with_dynamic_dimensions",
            "",
            c,
            functools.partial(_pipe_nondivisible_dynamic, c),
            lambda x, i: (x * 2,),
            line=929,
            what="grid (i, 5) with traced i = 5 split over the core axis, y = 2x",
        )
        for grid_vals, sems, dyn in _PARTITION_GRID_PARAMS:
            p = _params(
                grid_vals="x".join(map(str, grid_vals)),
                dimension_semantics="/".join("P" if s == _P else "A" for s in sems),
                dynamic_grid_index=dyn,
            )
            _pipe_add(
                cls,
                "test_can_partition_grid",
                p,
                c,
                functools.partial(_pipe_can_partition_grid, c, grid_vals, sems, dyn),
                _pipe_can_partition_grid_ref(c, grid_vals, sems),
                line=1027,
                what="each core counts the grid steps emit_pipeline gives it (the split of a "
                "parallel axis over core_axis_name); upstream mirrors _partition_grid",
            )
        _pipe_add(
            cls,
            "test_megacore_mul",
            "",
            c,
            functools.partial(_pipe_megacore_mul, c),
            lambda x: (x * 2,),
            line=1109,
            what="y = 2x through a (4, 4) grid whose second axis is split over the cores",
        )
        for m, k, n, bm, bk, bn in (
            (1024, 1024, 1024, 256, 512, 256),
            (768, 1024, 1024, 256, 512, 256),
            (1024, 1024, 768, 256, 512, 256),
            (768, 1024, 768, 256, 512, 256),
        ):
            _pipe_add(
                cls,
                "test_megacore_matmul",
                _params(m=m, k=k, n=n, bm=bm, bk=bk, bn=bn),
                c,
                functools.partial(_pipe_megacore_matmul, c, m, k, n, bm, bk, bn),
                lambda x, y: (_mm(x, y),),
                line=1147,
                what="blocked matmul, (i, j) parallel over the core axis",
            )
        _pipe_add(
            cls,
            "test_pipeline_axis_queries",
            "",
            c,
            functools.partial(_pipe_axis_queries, c),
            _pipe_axis_queries_ref(c),
            line=1189,
            what="program_id, num_programs, axis_size, axis_index seen inside a core-split "
            "emit_pipeline, written to SMEM blocks (f returns the 4 columns upstream checks)",
        )
        cls = "PallasCallBoundedSliceIndexingTest"
        _pipe_add(
            cls,
            "test_block_spec_bounded_slice_invalid_index",
            "",
            c,
            functools.partial(_pipe_bounded_slice_invalid_index, c),
            None,
            expect="raises_at_trace:ValueError:Must return a (pl\\.)?ds from the index_map for a "
            "BoundedSlice dimension.|when it should be pl.Slice",
            line=1327,
            what="a BoundedSlice block dimension whose index_map returns an int",
        )
        _pipe_add(
            cls,
            "test_block_spec_bounded_slice_static",
            "",
            c,
            functools.partial(_pipe_bounded_slice_static, c),
            lambda x: (x[4:12],),
            line=1367,
            what="a BoundedSlice(8) block at pl.ds(4, 8) copies rows 4..11",
        )
        _pipe_add(
            cls,
            "test_block_spec_bounded_slice_dynamic",
            "",
            c,
            functools.partial(_pipe_bounded_slice_dynamic, c),
            lambda x, slices: (x,),
            line=1408,
            what="BoundedSlice(16) blocks of varying size from an SMEM table cover x",
        )
        cls = "PallasCallPipelineTransformedRefsTest"
        for dyn in (True, False):
            dp = _params(dynamic_grid=dyn)
            for test, build, ref, line, what, only in (
                (
                    "test_transformed_refs_as_inputs",
                    _pipe_transformed_refs_as_inputs,
                    lambda x: (x[1],),
                    1733,
                    "emit_pipeline over x_ref.at[1]",
                    None,
                ),
                (
                    "test_transformed_refs_as_inputs_nested",
                    _pipe_transformed_refs_as_inputs_nested,
                    lambda x: (x[1],),
                    1758,
                    "nested emit_pipelines over x_ref.at[1]",
                    None,
                ),
                (
                    "test_transformed_refs_as_inputs_nested_uneven",
                    _pipe_transformed_refs_as_inputs_nested_uneven,
                    _pipe_nested_uneven_ref,
                    1789,
                    "the inner pipeline runs over .at[0:128].at[pl.ds(0, 64)] of the outer block",
                    None,
                ),
                (
                    "test_transformed_refs_as_inputs_nested_bitcast",
                    _pipe_transformed_refs_as_inputs_nested_bitcast,
                    _pipe_nested_bitcast_ref,
                    1826,
                    "the inner pipeline runs over int16 bitcasts of float32 blocks (upstream "
                    "skips it without the primitive)",
                    "primitive",
                ),
                (
                    "test_transformed_refs_as_inputs_nested_3level",
                    _pipe_transformed_refs_as_inputs_nested_3level,
                    lambda x: (x[1],),
                    1867,
                    "three nested emit_pipelines (upstream skips it without the primitive)",
                    "primitive",
                ),
                (
                    "test_transformed_refs_as_inputs_nested_hbm_passthrough",
                    _pipe_transformed_refs_as_inputs_nested_hbm_passthrough,
                    lambda x, y: (x[1] + 1,),
                    1909,
                    "the outer body copies y to a jax.empty_ref VMEM buffer the inner body adds",
                    None,
                ),
                (
                    "test_transformed_refs_as_inputs_nested_mixed_grids",
                    _pipe_transformed_refs_as_inputs_nested_mixed_grids,
                    lambda x: (x[1],),
                    1946,
                    "a 2-D outer grid around a 1-D inner grid",
                    None,
                ),
                (
                    "test_transformed_refs_as_inputs_nested_sequential",
                    _pipe_transformed_refs_as_inputs_nested_sequential,
                    lambda x: (x[1] * 2 + 1,),
                    1979,
                    "two inner pipelines in sequence through a jax.empty_ref VMEM temporary",
                    None,
                ),
            ):
                _pipe_add(
                    cls,
                    test,
                    dp,
                    c,
                    functools.partial(build, c, dyn),
                    ref,
                    line=line,
                    what=what,
                    only=only,
                )
        cls = "PallasCallPipelineNonFlatArgsTest"
        for dyn in (True, False):
            dp = _params(dynamic_grid=dyn)
            for test, build, line, what in (
                ("test_non_flat_args", _pipe_non_flat_args, 2032, "nested list/tuple refs"),
                (
                    "test_non_flat_args_and_scratch",
                    _pipe_non_flat_args_and_scratch,
                    2061,
                    "nested refs, jax.empty_ref scratch in the body",
                ),
                (
                    "test_non_flat_args_nested",
                    _pipe_non_flat_args_nested,
                    2100,
                    "nested refs through two pipelines",
                ),
                (
                    "test_non_flat_args_and_scratch_nested",
                    _pipe_non_flat_args_and_scratch_nested,
                    2139,
                    "nested refs and scratch in both pipelines",
                ),
            ):
                _pipe_add(
                    cls,
                    test,
                    dp,
                    c,
                    functools.partial(build, c, dyn),
                    lambda x, y, z: (x + y, z),
                    line=line,
                    what="emit_pipeline over pytrees of refs with empty tuples, out_type "
                    f"[(), (a, b)] (f returns a and b): {what}",
                )


# --------------------------------------------------------------------------------------------
# tests/pallas/tpu_fusible_matmul_test.py and tpu_fusible_matmul_with_stateful_fusions_test.py
# (the CORE_MAP and KERNEL implementations; the PALLAS_CALL one uses no mesh)
# --------------------------------------------------------------------------------------------

_FM = _UP + "tpu_fusible_matmul_test.py"
_FMS = _UP + "tpu_fusible_matmul_with_stateful_fusions_test.py"

# upstream's run_matmul is jit_no_excess_precision = partial(jax.jit, compiler_options=
# {'xla_allow_excess_precision': False}); jax refuses compiler_options on a jit traced inside
# another trace (make_jaxpr), and the option only tunes XLA's compilation, so these use jax.jit.


class KernelImpl(enum.Enum):
    PALLAS_CALL = enum.auto()  # upstream's third implementation, not ported (no mesh)
    CORE_MAP = enum.auto()
    KERNEL = enum.auto()


# Upstream's helpers, verbatim but for: the PALLAS_CALL branch dropped, and num_cores threaded
# to create_tensorcore_mesh('core'). matmul_kernel (line 42) is the same in both files;
# _fm_plain_impl and _fm_plain are tpu_fusible_matmul_test.py:84 and :293, _fm_stateful_impl
# and _fm_stateful tpu_fusible_matmul_with_stateful_fusions_test.py:84 and :372.


def _fm_matmul_kernel(
    x_scalar_prefetch,
    y_scalar_prefetch,
    z_scalar_prefetch,
    x_value_refs,
    y_value_refs,
    z_value_refs,
    o_ref,
    acc_ref,
    *,
    x_fn: Any,
    y_fn: Any,
    z_fn: Any,
    out_dtype: jnp.dtype,
):
    @pl.when(pl.program_id(2) == 0)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    pids = pl.program_id(0), pl.program_id(1), pl.program_id(2)
    scalar_prefetch = (x_scalar_prefetch, y_scalar_prefetch, z_scalar_prefetch)

    x_values = jax.tree.map(lambda ref: ref.get(), x_value_refs)
    x = x_fn(pids, scalar_prefetch, x_values)
    y_values = jax.tree.map(lambda ref: ref.get(), y_value_refs)
    y = y_fn(pids, scalar_prefetch, y_values)
    acc_ref[...] += jnp.dot(x, y, preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _():
        acc = acc_ref[...].astype(out_dtype)
        z_values = jax.tree.map(lambda ref: ref.get(), z_value_refs)
        out = z_fn(pids, scalar_prefetch, z_values, acc)
        jax.tree.map(lambda ref, x: ref.set(x), o_ref, out)


def _fm_plain_impl(
    x: fuser.Fusion[[], jax.Array],
    y: fuser.Fusion[[], jax.Array],
    z: fuser.Fusion[[jax.Array], jax.Array] | None,
    *,
    bm: int,
    bk: int,
    bn: int,
    interpret: bool,
    debug: bool,
    impl: KernelImpl,
    num_cores: int,
) -> jax.Array:
    m, k = x.shape
    k_, n = y.shape
    out_dtype = jnp.float32
    z_type = jax.ShapeDtypeStruct((m, n), dtype=out_dtype)
    if not z:
        z = lambda x: x  # noqa: E731
    if k != k_:
        raise ValueError(f"X and Y shapes must be compatible. Got {k} != {k_}")

    assert m % bm == 0
    assert k % bk == 0
    assert n % bn == 0
    grid = (m // bm, n // bn, k // bk)

    def x_index_map(i, j, k, *_):
        del j
        return i, k

    x_block_spec = pl.BlockSpec(block_shape=(bm, bk), index_map=x_index_map)

    def y_index_map(i, j, k, *_):
        del i
        return k, j

    y_block_spec = pl.BlockSpec(block_shape=(bk, bn), index_map=y_index_map)

    def z_index_map(i, j, k, *_):
        del k
        return i, j

    z_block_spec = pl.BlockSpec(block_shape=(bm, bn), index_map=z_index_map)
    dimension_semantics = (pltpu.PARALLEL, pltpu.PARALLEL, pltpu.ARBITRARY)

    z_out_type = jax.eval_shape(z, z_type)

    # First thing we do is extract the values from the fusions. These will be
    # values that are passed in directly and values that are passed in via
    # scalar prefetch.
    x_fn, x_values, x_scalar_prefetch = fuser.get_fusion_values(x)
    y_fn, y_values, y_scalar_prefetch = fuser.get_fusion_values(y)
    z_fn, z_values, z_scalar_prefetch = fuser.get_fusion_values(z, z_type)

    # We construct the set of scalar prefetch arguments that will be passed to
    # the kernel.
    scalar_prefetch = (x_scalar_prefetch, y_scalar_prefetch, z_scalar_prefetch)

    x_fn, (x_value_block_specs,), _ = fuser.pull_block_spec(
        x_fn,
        x_block_spec,
        scalar_prefetch_handler=fuser.make_scalar_prefetch_handler(0),
        grid_len=len(grid),
    )(x_values)

    y_fn, (y_value_block_specs,), _ = fuser.pull_block_spec(
        y_fn,
        y_block_spec,
        scalar_prefetch_handler=fuser.make_scalar_prefetch_handler(1),
        grid_len=len(grid),
    )(y_values)

    z_out_block_spec = fuser.push_block_spec(z, z_block_spec)(z_type)
    z_fn, (z_value_block_specs, _), _ = fuser.pull_block_spec(
        z_fn,
        z_out_block_spec,
        scalar_prefetch_handler=fuser.make_scalar_prefetch_handler(2),
        grid_len=len(grid),
    )(z_values, z_type)

    # TODO(sharadmv): This is a hack. We should be able to pass in the scalar
    # prefetch arguments directly to the kernel but don't have Mosaic support atm.
    scalar_prefetch = jax.tree.map(lambda x: x[None], scalar_prefetch)

    if impl == KernelImpl.CORE_MAP:
        out = jax.tree.map(jnp.empty_like, z_out_type)

        (x_values_refs, y_values_refs, z_values_refs, scalar_prefetch_refs, out_ref) = jax.tree.map(
            jax.new_ref, (x_values, y_values, z_values, scalar_prefetch, out)
        )

        @pl.core_map(
            pltpu.create_tensorcore_mesh("core", num_cores=num_cores),
            interpret=interpret,
            debug=debug,
        )
        def _():
            def _f(acc_ref, scalar_prefetch_smem_refs):
                pltpu.sync_copy(scalar_prefetch_refs, scalar_prefetch_smem_refs)

                def block_spec_with_prefetch(bs):
                    if bs is pl.no_block_spec:
                        return pl.BlockSpec()
                    if bs.index_map is None:
                        return bs
                    return bs.replace(
                        index_map=lambda *args: bs.index_map(*args, *scalar_prefetch_smem_refs)
                    )

                in_specs_ = jax.tree.map(
                    block_spec_with_prefetch,
                    (x_value_block_specs, y_value_block_specs, z_value_block_specs),
                )
                z_out_block_spec_ = jax.tree.map(block_spec_with_prefetch, z_out_block_spec)
                pltpu.emit_pipeline(
                    functools.partial(
                        _fm_matmul_kernel,
                        *scalar_prefetch_smem_refs,
                        acc_ref=acc_ref,
                        x_fn=x_fn,
                        y_fn=y_fn,
                        z_fn=z_fn,
                        out_dtype=out_dtype,
                    ),
                    grid=grid,
                    in_specs=in_specs_,
                    out_specs=[z_out_block_spec_],
                    core_axis_name="core",
                    dimension_semantics=dimension_semantics,
                )(x_values_refs, y_values_refs, z_values_refs, out_ref)

            pl.run_scoped(
                _f,
                pltpu.VMEM((bm, bn), jnp.float32),
                jax.tree.map(pltpu.SMEM.like, scalar_prefetch),
            )

        return jax.tree.map(lambda ref: ref.get(), out_ref)

    elif impl == KernelImpl.KERNEL:

        def body(
            x_values_refs,
            y_values_refs,
            z_values_refs,
            scalar_prefetch_refs,
            out_ref,
            acc_vmem_ref,
            scalar_prefetch_smem_refs,
        ):
            pltpu.sync_copy(scalar_prefetch_refs, scalar_prefetch_smem_refs)

            def block_spec_with_prefetch(bs):
                if bs is pl.no_block_spec:
                    return pl.BlockSpec()
                if bs.index_map is None:
                    return bs
                return bs.replace(
                    index_map=lambda *args: bs.index_map(*args, *scalar_prefetch_smem_refs)
                )

            in_specs_ = jax.tree.map(
                block_spec_with_prefetch,
                (x_value_block_specs, y_value_block_specs, z_value_block_specs),
            )
            z_out_block_spec_ = jax.tree.map(block_spec_with_prefetch, z_out_block_spec)
            pltpu.emit_pipeline(
                functools.partial(
                    _fm_matmul_kernel,
                    *scalar_prefetch_smem_refs,
                    acc_ref=acc_vmem_ref,
                    x_fn=x_fn,
                    y_fn=y_fn,
                    z_fn=z_fn,
                    out_dtype=out_dtype,
                ),
                grid=grid,
                in_specs=in_specs_,
                out_specs=(z_out_block_spec_,),
                core_axis_name="core",
                dimension_semantics=dimension_semantics,
            )(x_values_refs, y_values_refs, z_values_refs, out_ref)

        return pl.kernel(
            body,
            out_type=(z_out_type,),
            mesh=pltpu.create_tensorcore_mesh("core", num_cores=num_cores),
            scratch_types=[
                pltpu.VMEM((bm, bn), jnp.float32),
                jax.tree.map(pltpu.SMEM.like, scalar_prefetch),
            ],
            interpret=interpret,
            debug=debug,
        )(x_values, y_values, z_values, scalar_prefetch)[0]

    else:
        raise ValueError(f"Unsupported impl: {impl}")


def _fm_plain(
    x: jax.Array,
    y: jax.Array,
    *,
    bm: int = 128,
    bk: int = 128,
    bn: int = 128,
    debug: bool = False,
    interpret: bool = False,
    impl: KernelImpl = KernelImpl.CORE_MAP,
    num_cores: int = 2,
) -> jax.Array:
    return fuser.fusible(
        functools.partial(
            _fm_plain_impl,
            bm=bm,
            bk=bk,
            bn=bn,
            interpret=interpret,
            debug=debug,
            impl=impl,
            num_cores=num_cores,
        )
    )(x, y)


def _fm_stateful_impl(
    x: fuser.Fusion[[], jax.Array],
    y: fuser.Fusion[[], jax.Array],
    z: fuser.Fusion[[jax.Array], jax.Array] | None,
    *,
    bm: int,
    bk: int,
    bn: int,
    interpret: bool,
    debug: bool,
    impl: KernelImpl,
    num_cores: int,
) -> jax.Array:
    m, k = x.shape
    k_, n = y.shape
    out_dtype = jnp.float32
    z_type = jax.ShapeDtypeStruct((m, n), dtype=out_dtype)
    if not z:
        z = lambda x: x  # noqa: E731
    if k != k_:
        raise ValueError(f"X and Y shapes must be compatible. Got {k} != {k_}")

    assert m % bm == 0
    assert k % bk == 0
    assert n % bn == 0
    grid = (m // bm, n // bn, k // bk)

    def x_index_map(i, j, k, *_):
        del j
        return i, k

    x_block_spec = pl.BlockSpec(block_shape=(bm, bk), index_map=x_index_map)

    def y_index_map(i, j, k, *_):
        del i
        return k, j

    y_block_spec = pl.BlockSpec(block_shape=(bk, bn), index_map=y_index_map)

    def z_index_map(i, j, k, *_):
        del k
        return i, j

    z_block_spec = pl.BlockSpec(block_shape=(bm, bn), index_map=z_index_map)
    dimension_semantics = (pltpu.PARALLEL, pltpu.PARALLEL, pltpu.ARBITRARY)

    # First thing we do is extract the values from the fusions. These will be
    # values that are passed in directly and values that are passed in via
    # scalar prefetch.
    #
    # NOTE: If the fusions read and write from Refs, then `x_values`, `y_values`,
    # and `z_values` will contain Refs.  But `x_fn`, `y_fn`, and `z_fn` will be
    # pure versions of the fusions -- i.e., taking array arguments instead of
    # Refs.  `z_fn` will return additional outputs with the updated values for
    # any Refs modified by the original, stateful fusions, and we will use
    # `z_output_input_aliases` to ensure these updates are written to the
    # correct Refs.
    x_fn, x_values, x_scalar_prefetch = fuser.get_stateful_input_fusion_values(x)
    y_fn, y_values, y_scalar_prefetch = fuser.get_stateful_input_fusion_values(y)
    z_fn, z_values, z_scalar_prefetch, z_output_input_aliases = (
        fuser.get_stateful_output_fusion_values(z, z_type)
    )

    # Check if either input fusion reads from a Ref that is also written by the
    # output fusion.  We forbid this, as the kernel would give unexpected results
    # that depend on the exact order in which we visit blocks (and on details of
    # the pipelining).
    written_refs = [z_values[o] for o in z_output_input_aliases.keys()]
    if any(any(v is w for v in x_values + y_values) for w in written_refs):
        raise ValueError(
            "fusible_matmul does not support an input fusion reading "
            "from a Ref that is also written by the output fusion"
        )

    def types_without_refs(values):
        return jax.tree.map(
            lambda v: v.inner_aval if isinstance(v, jax.ref.AbstractRef) else v,
            jax.tree.map(jax.typeof, values),
        )

    z_out_type = jax.eval_shape(z_fn, types_without_refs(z_values), z_type)

    # We construct the set of scalar prefetch arguments that will be passed to
    # the kernel.
    scalar_prefetch = (x_scalar_prefetch, y_scalar_prefetch, z_scalar_prefetch)

    x_fn, (x_value_block_specs,), _ = fuser.pull_block_spec(
        x_fn,
        x_block_spec,
        scalar_prefetch_handler=fuser.make_scalar_prefetch_handler(0),
        grid_len=len(grid),
    )(types_without_refs(x_values))

    y_fn, (y_value_block_specs,), _ = fuser.pull_block_spec(
        y_fn,
        y_block_spec,
        scalar_prefetch_handler=fuser.make_scalar_prefetch_handler(1),
        grid_len=len(grid),
    )(types_without_refs(y_values))

    z_out_block_spec = fuser.push_block_spec(
        z_fn, tuple([pl.no_block_spec] * len(z_values)), z_block_spec
    )(types_without_refs(z_values), z_type)
    z_fn, (z_value_block_specs, _), _ = fuser.pull_block_spec(
        z_fn,
        z_out_block_spec,
        scalar_prefetch_handler=fuser.make_scalar_prefetch_handler(2),
        grid_len=len(grid),
    )(types_without_refs(z_values), z_type)

    # TODO(sharadmv): This is a hack. We should be able to pass in the scalar
    # prefetch arguments directly to the kernel but don't have Mosaic support atm.
    scalar_prefetch = jax.tree.map(lambda x: x[None], scalar_prefetch)

    if impl == KernelImpl.CORE_MAP:
        z_out_leaves, z_out_tree = jax.tree.flatten(z_out_type)
        out = z_out_tree.unflatten(
            z_values[z_output_input_aliases[i]]
            if i in z_output_input_aliases
            else jnp.empty_like(v)
            for i, v in enumerate(z_out_leaves)
        )

        def ref(x):
            if isinstance(x, jax.ref.Ref):
                return x
            return jax.new_ref(x)

        (x_values_refs, y_values_refs, z_values_refs, scalar_prefetch_refs, out_ref) = jax.tree.map(
            ref, (x_values, y_values, z_values, scalar_prefetch, out)
        )

        @pl.core_map(
            pltpu.create_tensorcore_mesh("core", num_cores=num_cores),
            interpret=interpret,
            debug=debug,
        )
        def _():
            def _f(acc_ref, scalar_prefetch_smem_refs):
                pltpu.sync_copy(scalar_prefetch_refs, scalar_prefetch_smem_refs)

                def block_spec_with_prefetch(bs):
                    if bs is pl.no_block_spec:
                        return pl.BlockSpec()
                    if bs.index_map is None:
                        return bs
                    return bs.replace(
                        index_map=lambda *args: bs.index_map(*args, *scalar_prefetch_smem_refs)
                    )

                in_specs_ = jax.tree.map(
                    block_spec_with_prefetch,
                    (x_value_block_specs, y_value_block_specs, z_value_block_specs),
                )
                z_out_block_spec_ = jax.tree.map(block_spec_with_prefetch, z_out_block_spec)
                pltpu.emit_pipeline(
                    functools.partial(
                        _fm_matmul_kernel,
                        *scalar_prefetch_smem_refs,
                        acc_ref=acc_ref,
                        x_fn=x_fn,
                        y_fn=y_fn,
                        z_fn=z_fn,
                        out_dtype=out_dtype,
                    ),
                    grid=grid,
                    in_specs=in_specs_,
                    out_specs=[z_out_block_spec_],
                    core_axis_name="core",
                    dimension_semantics=dimension_semantics,
                )(x_values_refs, y_values_refs, z_values_refs, out_ref)

            pl.run_scoped(
                _f,
                pltpu.VMEM((bm, bn), jnp.float32),
                jax.tree.map(pltpu.SMEM.like, scalar_prefetch),
            )

        out = tuple(
            r.get()
            for o, r in enumerate(jax.tree.leaves(out_ref))
            if o not in z_output_input_aliases
        )
        if z_output_input_aliases:
            return out
        else:
            return z_out_tree.unflatten(out)

    elif impl == KernelImpl.KERNEL:
        z_out_leaves, z_out_tree = jax.tree.flatten(z_out_type)
        out = z_out_tree.unflatten(
            z_values[z_output_input_aliases[i]]
            if i in z_output_input_aliases
            else jnp.empty_like(v)
            for i, v in enumerate(z_out_leaves)
        )

        def ref(x):
            if isinstance(x, jax.ref.Ref):
                return x
            return jax.new_ref(x)

        # NOTE: We have to close over these values instead of passing them to
        # `pl.kernel(body, ...)` because the same Ref may appear multiple times
        # across x_values, ..., out, which is not supported in
        # `pl.kernel(...)` args.
        (x_values_refs, y_values_refs, z_values_refs, out_ref) = jax.tree.map(
            ref, (x_values, y_values, z_values, out)
        )

        def body(scalar_prefetch_refs, acc_vmem_ref, scalar_prefetch_smem_refs):
            pltpu.sync_copy(scalar_prefetch_refs, scalar_prefetch_smem_refs)

            def block_spec_with_prefetch(bs):
                if bs is pl.no_block_spec:
                    return pl.BlockSpec()
                if bs.index_map is None:
                    return bs
                return bs.replace(
                    index_map=lambda *args: bs.index_map(*args, *scalar_prefetch_smem_refs)
                )

            in_specs_ = jax.tree.map(
                block_spec_with_prefetch,
                (x_value_block_specs, y_value_block_specs, z_value_block_specs),
            )
            z_out_block_spec_ = jax.tree.map(block_spec_with_prefetch, z_out_block_spec)
            pltpu.emit_pipeline(
                functools.partial(
                    _fm_matmul_kernel,
                    *scalar_prefetch_smem_refs,
                    acc_ref=acc_vmem_ref,
                    x_fn=x_fn,
                    y_fn=y_fn,
                    z_fn=z_fn,
                    out_dtype=out_dtype,
                ),
                grid=grid,
                in_specs=in_specs_,
                out_specs=[z_out_block_spec_],
                core_axis_name="core",
                dimension_semantics=dimension_semantics,
            )(x_values_refs, y_values_refs, z_values_refs, out_ref)

        pl.kernel(
            body,
            mesh=pltpu.create_tensorcore_mesh("core", num_cores=num_cores),
            scratch_types=[
                pltpu.VMEM((bm, bn), jnp.float32),
                jax.tree.map(pltpu.SMEM.like, scalar_prefetch),
            ],
            interpret=interpret,
            debug=debug,
        )(scalar_prefetch)

        out = tuple(
            r.get()
            for o, r in enumerate(jax.tree.leaves(out_ref))
            if o not in z_output_input_aliases
        )
        if z_output_input_aliases:
            return out
        else:
            return z_out_tree.unflatten(out)

    else:
        raise ValueError(f"Unsupported impl: {impl}")


def _fm_stateful(
    x: jax.Array,
    y: jax.Array,
    *,
    bm: int = 128,
    bk: int = 128,
    bn: int = 128,
    debug: bool = False,
    interpret: bool = False,
    impl: KernelImpl = KernelImpl.CORE_MAP,
    num_cores: int = 2,
) -> jax.Array:
    return fuser.fusible(
        functools.partial(
            _fm_stateful_impl,
            bm=bm,
            bk=bk,
            bn=bn,
            interpret=interpret,
            debug=debug,
            impl=impl,
            num_cores=num_cores,
        )
    )(x, y)


def _fm_mm_ref(x, y):
    """``mm_ref`` (jnp.dot with preferred_element_type=float32), exact for the data here."""
    return _mm(np.asarray(x, np.float32), np.asarray(y, np.float32))


def _fx(shape, seed, dtype=np.float32):
    return _ints(shape, seed, dtype=dtype)


def _fmt_matmul(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)
    f = jax.jit(fuser.fuse(functools.partial(fusible_matmul, impl=impl)))
    return f, (_fx((512, 512), 0), _fx((512, 512), 1))


def _fmt_matmul_with_activation(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)

    @jax.jit
    @fuser.fuse
    def matmul_relu(x, y):
        x = fusible_matmul(x, y, impl=impl)
        x = jnp.maximum(x, 0.0)
        return x

    return matmul_relu, (_fx((512, 512), 0), _fx((512, 512), 1))


def _fmt_matmul_reduce_sum(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)

    @jax.jit
    @fuser.fuse
    def matmul_reduce_sum(x, y):
        x = fusible_matmul(x, y, bm=512, bn=512, impl=impl)
        x = jnp.sum(x, axis=1)
        return x

    return matmul_reduce_sum, (_fx((512, 512), 0), _fx((512, 512), 1))


def _fmt_matmul_reduce_sum_broadcast(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)

    @jax.jit
    @fuser.fuse
    def matmul_sum_bcast(x, y):
        x = fusible_matmul(x, y, bm=512, bn=512, impl=impl)
        x = jnp.sum(x, axis=1, keepdims=True)
        x = jnp.broadcast_to(x, (x.shape[0], 128))
        return x

    return matmul_sum_bcast, (_fx((512, 512), 0), _fx((512, 512), 1))


def _fmt_matmul_plus_iota_custom_fusion(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)
    dtype = "float32"

    def make_iota_custom_fusion(shape, dtype):
        @fuser.custom_fusion
        def iota(start=0):
            return jnp.broadcast_to(jnp.astype(jnp.arange(shape[-1]) + start, dtype), shape)

        iota.def_pull_block_spec(lambda bss: (None,))

        @iota.def_eval_rule
        def iota_eval_rule(ctx, _):
            shape = ctx.out_block_specs[0].block_shape
            i = ctx.out_block_indices[0][-1]
            return (make_iota_custom_fusion(shape, dtype)(shape[-1] * i),)

        return iota

    iota_custom_fusion = make_iota_custom_fusion((512, 512), dtype)

    @jax.jit
    @fuser.fuse
    def matmul_plus_iota(x, y):
        return fusible_matmul(x, y, impl=impl).astype(dtype) + iota_custom_fusion()

    return matmul_plus_iota, (_fx((512, 512), 0), _fx((512, 512), 1))


def _fmt_matmul_with_bias(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)
    dtype = "float32"

    @jax.jit
    @fuser.fuse
    def matmul_bias(x, y, b):
        x = fusible_matmul(x, y, bn=256, impl=impl).astype(dtype)
        x = jnp.maximum(x + jnp.expand_dims(b, 0), 0.0)
        return x

    return matmul_bias, (_fx((512, 512), 0), _fx((512, 512), 1), _fx((512,), 2))


def _fmt_matmul_with_slice(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)

    @jax.jit
    @fuser.fuse
    def matmul_slice(x, y):
        x = fusible_matmul(x, y[1], impl=impl)
        return x

    return matmul_slice, (_fx((512, 512), 0), _fx((2, 512, 512), 1))


def _fmt_matmul_with_dynamic_slice(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)

    @jax.jit
    @fuser.fuse
    def matmul_slice(x, y, i):
        x = fusible_matmul(x, y[i], impl=impl)
        return x

    return matmul_slice, (_fx((512, 512), 0), _fx((2, 512, 512), 1), _i32(1))


def _fmt_matmul_with_dynamic_slice_bias(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)
    dtype = "float32"

    @jax.jit
    @fuser.fuse
    def matmul_slice(x, y, b, i, j):
        x = fusible_matmul(x, y[j], impl=impl).astype(dtype) + b[i]
        return x

    args = (_fx((512, 512), 0), _fx((3, 512, 512), 1), _fx((2, 512, 512), 2), _i32(1), _i32(2))
    return matmul_slice, args


def _fmt_matmul_with_multi_slice(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)

    @jax.jit
    @fuser.fuse
    def matmul_slice(x, y):
        x = fusible_matmul(x, y[1, 1], impl=impl)
        return x

    return matmul_slice, (_fx((512, 512), 0), _fx((2, 3, 512, 512), 1))


def _fmt_matmul_with_multiple_slices(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)

    @jax.jit
    @fuser.fuse
    def matmul_slice(x, y):
        x = fusible_matmul(x, y[1][1], impl=impl)
        return x

    return matmul_slice, (_fx((512, 512), 0), _fx((2, 3, 512, 512), 1))


def _fmt_matmul_with_multiple_dynamic_slices(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)

    @jax.jit
    @fuser.fuse
    def matmul_slice(x, y, i, j):
        x = fusible_matmul(x, y[i][j], impl=impl)
        return x

    return matmul_slice, (_fx((512, 512), 0), _fx((2, 3, 512, 512), 1), _i32(1), _i32(2))


def _fmt_matmul_with_mixed_slices(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)

    @jax.jit
    @fuser.fuse
    def matmul_slice(x, y, i, j):
        x = fusible_matmul(x, y[2][i, j], impl=impl)
        return x

    return matmul_slice, (_fx((512, 512), 0), _fx((4, 2, 3, 512, 512), 1), _i32(1), _i32(2))


def _fmt_matmul_with_multiple_mixed_slices_and_bias(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)
    dtype = "float32"

    @jax.jit
    @fuser.fuse
    def matmul_slice(x, y, b, i, j, k):
        x = fusible_matmul(x[k][3], y[2][i, j], impl=impl).astype(dtype)
        return x + b[i, j]

    args = (
        _fx((4, 4, 512, 512), 0),
        _fx((4, 2, 3, 512, 512), 1),
        _fx((4, 4, 1, 512), 2),
        _i32(1),
        _i32(2),
        _i32(3),
    )
    return matmul_slice, args


def _fmt_matmul_input_concat_contract(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)

    @jax.jit
    @fuser.fuse
    def matmul_concat(x, ys):
        y = jnp.concatenate(ys, axis=0)
        x = fusible_matmul(x, y, impl=impl)
        return x

    def f(x, y1, y2):
        return matmul_concat(x, [y1, y2])

    return f, (_fx((128, 256), 0), _fx((128, 128), 1), _fx((128, 128), 2))


def _fmt_matmul_double_concat(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)

    @jax.jit
    @fuser.fuse
    def matmul_concat(x, ys, y3):
        y = jnp.concatenate(ys, axis=0)
        y = jnp.concatenate([y, y3], axis=1)
        x = fusible_matmul(x, y, impl=impl)
        return x

    def f(x, y1, y2, y3):
        return matmul_concat(x, [y1, y2], y3)

    args = (_fx((128, 256), 0), _fx((128, 128), 1), _fx((128, 128), 2), _fx((256, 128), 3))
    return f, args


def _fmt_matmul_slice_concat(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)

    @jax.jit
    @fuser.fuse
    def matmul_concat(x, y1, y2):
        y = jnp.concatenate([y1, y2[3]], axis=0)
        x = fusible_matmul(x, y, impl=impl)
        return x

    return matmul_concat, (_fx((128, 256), 0), _fx((128, 128), 1), _fx((4, 128, 128), 2))


def _fmt_matmul_slice_concat_slice(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)

    @jax.jit
    @fuser.fuse
    def matmul_concat(x, y1, y2):
        y = jnp.concatenate([y1, y2[3]], axis=1)[1]
        x = fusible_matmul(x, y, impl=impl)
        return x

    return matmul_concat, (_fx((128, 256), 0), _fx((3, 128, 128), 1), _fx((4, 3, 128, 128), 2))


def _fmt_matmul_dynamic_slice_concat(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)

    @jax.jit
    @fuser.fuse
    def matmul_concat(x, y1, y2, i, j):
        y = jnp.concatenate([y1, y2[i]], axis=1)[j]
        x = fusible_matmul(x, y, impl=impl)
        return x

    args = (_fx((128, 256), 0), _fx((2, 128, 128), 1), _fx((4, 2, 128, 128), 2), _i32(3), _i32(1))
    return matmul_concat, args


def _fmt_rhs(impl, cores, transform, x_shape, y_shape, **block):
    """The rhs/lhs/out transpose tests: ``jax.jit(fuser.fuse(partial(matmul, partial(
    fusible_matmul, <block>, impl=impl))))`` where ``matmul(impl_fn, x, y)`` applies
    ``transform``."""
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)
    impl_fused = fuser.fuse(
        functools.partial(transform, functools.partial(fusible_matmul, **block, impl=impl))
    )
    return jax.jit(impl_fused), (_fx(x_shape, 0), _fx(y_shape, 1))


def _rhs_transpose_no_following_ops(impl_fn, x, y):
    # This transpose gets fused in
    z = impl_fn(x, y.T)
    return z


def _rhs_transpose_then_add(impl_fn, x, y):
    # This transpose gets fused in as well (special handling for this case)
    z = impl_fn(x, y.T + 1.0)
    return z


def _rhs_transpose_after_slice(impl_fn, x, y):
    # This transpose gets fused in as well
    z = impl_fn(x, y[1].T)
    return z


def _rhs_transpose_before_slice(impl_fn, x, y):
    # This transpose gets fused in as well
    z = impl_fn(x, y.swapaxes(-1, -2)[1])
    return z


def _rhs_transpose_major_dim(impl_fn, x, y):
    # This transpose gets fused in but the block spec takes care of it
    z = impl_fn(x, y.swapaxes(0, 1)[1, 0])
    return z


def _rhs_transpose_transpose(impl_fn, x, y):
    # This transpose gets converted into a no-op.
    z = impl_fn(x, y.T.T)
    return z


def _lhs_transpose(impl_fn, x, y):
    # This transpose gets converted into a no-op.
    z = impl_fn(x.T, y)
    return z


def _lhs_transpose_add(impl_fn, x, y):
    # This transpose gets converted into a no-op.
    z = impl_fn(x.T + 1, y)
    return z


def _out_transpose(impl_fn, x, y):
    z = impl_fn(x, y)
    # This transpose is executed.
    return z.T


def _out_transpose_mul(impl_fn, x, y):
    z = impl_fn(x, y)
    # This transpose is executed.
    return z.T * 2


def _out_custom_vjp_fwd(impl_fn, x, y):
    @jax.custom_vjp
    def act(x):
        return jax.nn.relu(x) * x

    def act_fwd(x):
        del x
        raise AssertionError("unreachable")

    def act_bwd(res, dy):
        del res, dy
        raise AssertionError("unreachable")

    act.defvjp(act_fwd, act_bwd)
    z = impl_fn(x, y)
    return act(z)


def _fmt_out_custom_vjp_bwd(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)
    dtype = "float32"

    @jax.custom_vjp
    def act(x):
        return jax.nn.relu(x) * x

    def act_fwd(x):
        return jax.nn.relu(x) * x, (x,)

    def act_bwd(res, dy):
        (x,) = res
        return (dy * x * 2.34,)

    act.defvjp(act_fwd, act_bwd)

    def matmul(impl_fn, x, y, dz):
        z = impl_fn(x, y)
        dz = dz.astype(z.dtype)
        return jax.vjp(act, z)[1](dz)[0].astype(dtype)

    impl_fused = fuser.fuse(
        functools.partial(matmul, functools.partial(fusible_matmul, bn=256, impl=impl))
    )
    return jax.jit(impl_fused), (_fx((256, 256), 0), _fx((256, 512), 1), _fx((256, 512), 2))


def _fmt_out_custom_vjp_bwd_ref(x, y, dz):
    # act_bwd's order, dy * x * 2.34, in float32 (upstream compares with tolerance against
    # dz * 2.34 * (x @ y) and against the unfused computation)
    return ((dz * _fm_mm_ref(x, y)) * np.float32(2.34),)


def _sparse_unit(shape, seed):
    """Entries in {-1, 0, 1}, 7 in 8 of them 0: a 512-long dot of two such stays within
    +-256, so a product of products is bfloat16-exact whatever the matmul precision."""
    rng = np.random.default_rng(seed)
    return (rng.integers(-1, 2, size=shape) * (rng.random(shape) < 0.125)).astype(np.float32)


def _fmt_dot_dot_fusion(impl, cores, transpose):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)
    dtype = "float32"

    def chained_matmul(x, y, w):
        out = jnp.dot(x, y, preferred_element_type=jnp.float32).astype(dtype)
        return fusible_matmul(out, w, impl=impl)

    def chained_matmul_transpose(x, y, w):
        y = y.T
        out = jnp.dot(x, y, preferred_element_type=jnp.float32).astype(dtype)
        return fusible_matmul(out, w, impl=impl)

    fused_matmul = jax.jit(fuser.fuse(chained_matmul_transpose if transpose else chained_matmul))
    x, y = _sparse_unit((512, 512), 0), _sparse_unit((512, 512), 1)
    assert np.abs(_mm(x, y.T if transpose else y)).max() <= 256
    return fused_matmul, (x, y, _fx((512, 512), 2))


def _fmt_excess_precision(impl, cores, shape_x, shape_y, downcast, **block):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)

    def matmul(impl_fn, x, y):
        z = impl_fn(x, y)
        return z.astype(x.dtype) if downcast else z

    impl_fused = fuser.fuse(
        functools.partial(matmul, functools.partial(fusible_matmul, **block, impl=impl))
    )
    bf16 = jnp.bfloat16
    return jax.jit(impl_fused), (_fx(shape_x, 0, dtype=bf16), _fx(shape_y, 1, dtype=bf16))


def _fmst_read_only_refs(impl, cores, fuse):
    fusible_matmul = functools.partial(_fm_stateful, num_cores=cores)
    dtype = "float32"

    @functools.partial(jax.jit, static_argnames=["fuse"])
    def run_matmul(x, y, a, b, fuse=True):
        # NOTE: Currently, fused functions (and kernels) can only close over Refs
        # that were created inside of jax.jit.
        a_ref = jax.new_ref(a)
        b_ref = jax.new_ref(b)

        _fusible_matmul = functools.partial(fusible_matmul, impl=impl)
        if not fuse:
            _fusible_matmul = fuser.fuse(_fusible_matmul)

        def matmul(x, y):
            x = _fusible_matmul(x + a_ref[...], y + b_ref[...] * 0.5).astype(dtype)
            return jnp.maximum(x + b_ref[...], 0.0)

        if fuse:
            matmul = fuser.fuse(matmul)

        return matmul(x, y)

    def f(x, y, a, b):
        return run_matmul(x, y, a, b, fuse=fuse)

    return f, tuple(_fx((512, 512), s) for s in range(4))


def _fmst_simple_aliased_ref(impl, cores, fuse):
    fusible_matmul = functools.partial(_fm_stateful, num_cores=cores)
    dtype = "float32"

    @functools.partial(jax.jit, static_argnames=["fuse"])
    def run_matmul(x, y, b, fuse=True):
        # NOTE: Currently, fused functions (and kernels) can only close over Refs
        # that were created inside of jax.jit.
        b_ref = jax.new_ref(b)

        _fusible_matmul = functools.partial(fusible_matmul, impl=impl)
        if not fuse:
            _fusible_matmul = fuser.fuse(_fusible_matmul)

        def matmul(x, y):
            x = _fusible_matmul(x, y).astype(dtype)
            b_ref[...] = jnp.maximum(x + b_ref[...], 0.0)

        if fuse:
            matmul = fuser.fuse(matmul)

        matmul(x, y)
        return jax.ref.freeze(b_ref)

    def f(x, y, b):
        return run_matmul(x, y, b, fuse=fuse)

    return f, tuple(_fx((512, 512), s) for s in range(3))


def _fmst_forbids_unsupported_ref_access(impl, cores):
    fusible_matmul = functools.partial(_fm_stateful, num_cores=cores)

    @jax.jit
    def run_matmul(x, y, b):
        # NOTE: Currently, fused functions (and kernels) can only close over Refs
        # that were created inside of jax.jit.
        x_ref = jax.new_ref(x)
        b_ref = jax.new_ref(b)

        @fuser.fuse
        def matmul(x, y):
            # fusible_matmul will reject this for reading x_ref in the input fusion
            # while also writing to x_ref in the output fusion.  This computation
            # would give unexpected results that would depend on the order in which
            # the kernel reads from and writes to different blocks of x_ref.
            x_ref[...] = fusible_matmul(jnp.transpose(x_ref[...]) + b_ref[...], y, impl=impl)

        matmul(x, y)
        return jax.ref.freeze(b_ref)

    return run_matmul, tuple(_fx((512, 512), s) for s in range(3))


def _fmst_writes_that_do_not_depend_on_output(impl, cores):
    fusible_matmul = functools.partial(_fm_stateful, num_cores=cores)

    @jax.jit
    def run_matmul(x, y):
        # NOTE: Currently, fused functions (and kernels) can only close over Refs
        # that were created inside of jax.jit.
        side_output_ref = jax.new_ref(jnp.empty_like(x))

        @fuser.fuse
        def matmul(x, y):
            # NOTE: This write is not allowed becuase it does not depend on the
            # output of fusible_matmul.
            side_output_ref[...] = x * 2.0
            return fusible_matmul(x, y, impl=impl)

        res = matmul(x, y)
        return res, jax.ref.freeze(side_output_ref)

    return run_matmul, tuple(_fx((512, 512), s) for s in range(2))


def _relu(v):
    return np.maximum(v, np.float32(0))


# (test name, upstream line, builder(impl, cores), reference)
_FM_TESTS = [
    ("test_matmul", 325, _fmt_matmul, lambda x, y: (_fm_mm_ref(x, y),)),
    (
        "test_matmul_with_activation",
        336,
        _fmt_matmul_with_activation,
        lambda x, y: (_relu(_fm_mm_ref(x, y)),),
    ),
    (
        "test_matmul_reduce_sum",
        357,
        _fmt_matmul_reduce_sum,
        lambda x, y: (_fm_mm_ref(x, y).sum(axis=1),),
    ),
    (
        "test_matmul_reduce_sum_broadcast",
        381,
        _fmt_matmul_reduce_sum_broadcast,
        lambda x, y: (np.broadcast_to(_fm_mm_ref(x, y).sum(axis=1, keepdims=True), (512, 128)),),
    ),
    (
        "test_matmul_plus_iota_custom_fusion",
        410,
        _fmt_matmul_plus_iota_custom_fusion,
        lambda x, y: (_fm_mm_ref(x, y) + np.arange(512, dtype=np.float32),),
    ),
    (
        "test_matmul_with_bias",
        448,
        _fmt_matmul_with_bias,
        lambda x, y, b: (_relu(_fm_mm_ref(x, y) + b[None, :]),),
    ),
    ("test_matmul_with_slice", 474, _fmt_matmul_with_slice, lambda x, y: (_fm_mm_ref(x, y[1]),)),
    (
        "test_matmul_with_dynamic_slice",
        494,
        _fmt_matmul_with_dynamic_slice,
        lambda x, y, i: (_fm_mm_ref(x, y[int(i)]),),
    ),
    (
        "test_matmul_with_dynamic_slice_bias",
        514,
        _fmt_matmul_with_dynamic_slice_bias,
        lambda x, y, b, i, j: (_fm_mm_ref(x, y[int(j)]) + b[int(i)],),
    ),
    (
        "test_matmul_with_multi_slice",
        537,
        _fmt_matmul_with_multi_slice,
        lambda x, y: (_fm_mm_ref(x, y[1, 1]),),
    ),
    (
        "test_matmul_with_multiple_slices",
        557,
        _fmt_matmul_with_multiple_slices,
        lambda x, y: (_fm_mm_ref(x, y[1][1]),),
    ),
    (
        "test_matmul_with_multiple_dynamic_slices",
        577,
        _fmt_matmul_with_multiple_dynamic_slices,
        lambda x, y, i, j: (_fm_mm_ref(x, y[int(i)][int(j)]),),
    ),
    (
        "test_matmul_with_mixed_slices",
        599,
        _fmt_matmul_with_mixed_slices,
        lambda x, y, i, j: (_fm_mm_ref(x, y[2, int(i), int(j)]),),
    ),
    (
        "test_matmul_with_multiple_mixed_slices_and_bias",
        621,
        _fmt_matmul_with_multiple_mixed_slices_and_bias,
        lambda x, y, b, i, j, k: (
            _fm_mm_ref(x[int(k)][3], y[2][int(i), int(j)]) + b[int(i), int(j)],
        ),
    ),
    (
        "test_matmul_input_concat_contract",
        679,
        _fmt_matmul_input_concat_contract,
        lambda x, y1, y2: (_fm_mm_ref(x, np.concatenate([y1, y2], axis=0)),),
    ),
    (
        "test_matmul_double_concat",
        705,
        _fmt_matmul_double_concat,
        lambda x, y1, y2, y3: (
            _fm_mm_ref(x, np.concatenate([np.concatenate([y1, y2], axis=0), y3], axis=1)),
        ),
    ),
    (
        "test_matmul_slice_concat",
        734,
        _fmt_matmul_slice_concat,
        lambda x, y1, y2: (_fm_mm_ref(x, np.concatenate([y1, y2[3]], axis=0)),),
    ),
    (
        "test_matmul_slice_concat_slice",
        759,
        _fmt_matmul_slice_concat_slice,
        lambda x, y1, y2: (_fm_mm_ref(x, np.concatenate([y1, y2[3]], axis=1)[1]),),
    ),
    (
        "test_matmul_dynamic_slice_concat",
        784,
        _fmt_matmul_dynamic_slice_concat,
        lambda x, y1, y2, i, j: (_fm_mm_ref(x, np.concatenate([y1, y2[int(i)]], axis=1)[int(j)]),),
    ),
    (
        "test_matmul_rhs_transpose_no_following_ops",
        809,
        functools.partial(
            _fmt_rhs,
            transform=_rhs_transpose_no_following_ops,
            x_shape=(128, 256),
            y_shape=(512, 256),
            bn=256,
        ),
        lambda x, y: (_fm_mm_ref(x, y.T),),
    ),
    (
        "test_matmul_rhs_transpose_then_add",
        830,
        functools.partial(
            _fmt_rhs,
            transform=_rhs_transpose_then_add,
            x_shape=(128, 256),
            y_shape=(512, 256),
            bn=256,
        ),
        lambda x, y: (_fm_mm_ref(x, y.T + 1),),
    ),
    (
        "test_matmul_rhs_transpose_after_slice",
        851,
        functools.partial(
            _fmt_rhs,
            transform=_rhs_transpose_after_slice,
            x_shape=(128, 256),
            y_shape=(2, 512, 256),
            bn=256,
        ),
        lambda x, y: (_fm_mm_ref(x, y[1].T),),
    ),
    (
        "test_matmul_rhs_transpose_before_slice",
        872,
        functools.partial(
            _fmt_rhs,
            transform=_rhs_transpose_before_slice,
            x_shape=(128, 256),
            y_shape=(2, 512, 256),
            bn=256,
        ),
        lambda x, y: (_fm_mm_ref(x, y.swapaxes(-1, -2)[1]),),
    ),
    (
        "test_matmul_rhs_transpose_major_dim",
        893,
        functools.partial(
            _fmt_rhs,
            transform=_rhs_transpose_major_dim,
            x_shape=(128, 256),
            y_shape=(2, 3, 256, 512),
            bn=256,
        ),
        lambda x, y: (_fm_mm_ref(x, y.swapaxes(0, 1)[1, 0]),),
    ),
    (
        "test_matmul_rhs_transpose_transpose",
        914,
        functools.partial(
            _fmt_rhs,
            transform=_rhs_transpose_transpose,
            x_shape=(128, 256),
            y_shape=(256, 512),
            bn=256,
        ),
        lambda x, y: (_fm_mm_ref(x, y),),
    ),
    (
        "test_matmul_lhs_transpose",
        955,
        functools.partial(
            _fmt_rhs, transform=_lhs_transpose, x_shape=(256, 512), y_shape=(256, 384), bm=256
        ),
        lambda x, y: (_fm_mm_ref(x.T, y),),
    ),
    (
        "test_matmul_lhs_transpose_add",
        976,
        functools.partial(
            _fmt_rhs, transform=_lhs_transpose_add, x_shape=(256, 512), y_shape=(256, 384), bm=256
        ),
        lambda x, y: (_fm_mm_ref(x.T + 1, y),),
    ),
    (
        "test_matmul_out_transpose",
        997,
        functools.partial(
            _fmt_rhs, transform=_out_transpose, x_shape=(256, 256), y_shape=(256, 512), bn=256
        ),
        lambda x, y: (np.ascontiguousarray(_fm_mm_ref(x, y).T),),
    ),
    (
        "test_matmul_out_custom_vjp_fwd",
        1018,
        functools.partial(
            _fmt_rhs, transform=_out_custom_vjp_fwd, x_shape=(256, 256), y_shape=(256, 512), bn=256
        ),
        lambda x, y: (_relu(_fm_mm_ref(x, y)) * _fm_mm_ref(x, y),),
    ),
    (
        "test_matmul_out_custom_vjp_bwd",
        1051,
        _fmt_out_custom_vjp_bwd,
        _fmt_out_custom_vjp_bwd_ref,
    ),
    (
        "test_matmul_out_transpose_mul",
        1097,
        functools.partial(
            _fmt_rhs, transform=_out_transpose_mul, x_shape=(256, 256), y_shape=(256, 512), bn=256
        ),
        lambda x, y: (np.ascontiguousarray(_fm_mm_ref(x, y).T) * np.float32(2),),
    ),
    (
        "test_dot_dot_fusion",
        1118,
        functools.partial(_fmt_dot_dot_fusion, transpose=False),
        lambda x, y, w: (_fm_mm_ref(_fm_mm_ref(x, y), w),),
    ),
    (
        "test_dot_transpose_dot_fusion",
        1152,
        functools.partial(_fmt_dot_dot_fusion, transpose=True),
        lambda x, y, w: (_fm_mm_ref(_fm_mm_ref(x, y.T), w),),
    ),
]

_FM_EXCESS_PRECISION_TESTS = [
    (
        "test_matmul_bf16_out",
        1225,
        functools.partial(
            _fmt_excess_precision, shape_x=(512, 256), shape_y=(256, 384), downcast=False
        ),
        lambda x, y: (_fm_mm_ref(x, y),),
    ),
    (
        "test_matmul_f32_out_simple",
        1274,
        functools.partial(
            _fmt_excess_precision,
            shape_x=(512, 256),
            shape_y=(256, 384),
            downcast=False,
            bk=256,
            bn=128,
        ),
        lambda x, y: (_fm_mm_ref(x, y),),
    ),
    (
        "test_matmul_f32_out_fused_downcast",
        1303,
        functools.partial(
            _fmt_excess_precision,
            shape_x=(2048, 2048),
            shape_y=(2048, 2048),
            downcast=True,
            bm=512,
            bk=256,
            bn=1024,
        ),
        lambda x, y: (_fm_mm_ref(x, y).astype(jnp.bfloat16),),
    ),
]


def _cases_fusible_matmul():
    for cores in (2, 1):
        for impl in (KernelImpl.CORE_MAP, KernelImpl.KERNEL):
            for test, line, build, ref in _FM_TESTS:
                _add(
                    f"FusibleMatmulTest.{test}"
                    + _params(dtype="float32", impl=impl.name, cores=cores),
                    cores,
                    functools.partial(build, impl, cores),
                    ref,
                    what="fuser.fuse of a fusible matmul whose kernel is an emit_pipeline "
                    f"(core_axis_name='core') in a {impl.name.lower()}; {_FM}:{line}",
                )
            for test, line, build, ref in _FM_EXCESS_PRECISION_TESTS:
                _add(
                    f"ExcessPrecisionTest.{test}" + _params(impl=impl.name, cores=cores),
                    cores,
                    functools.partial(build, impl, cores),
                    ref,
                    what="bfloat16 operands, float32 accumulation (upstream compares bitwise "
                    f"with an XLA blocked dot); {_FM}:{line}",
                )
            for fuse in (True, False):
                p = _params(dtype="float32", impl=impl.name, cores=cores, fuse=fuse)
                _add(
                    f"FusibleMatmulTest.test_matmul_with_bias_and_read_only_refs{p}",
                    cores,
                    functools.partial(_fmst_read_only_refs, impl, cores, fuse),
                    lambda x, y, a, b: (_relu(_fm_mm_ref(x + a, y + b * np.float32(0.5)) + b),),
                    what="input fusions read refs closed over by the fused function; upstream "
                    "runs fuse=True (the whole function fused) and fuse=False (only the "
                    f"matmul) and asserts they agree; {_FMS}:404",
                )
                _add(
                    f"FusibleMatmulTest.test_matmul_with_bias_and_simple_aliased_ref{p}",
                    cores,
                    functools.partial(_fmst_simple_aliased_ref, impl, cores, fuse),
                    lambda x, y, b: (_relu(_fm_mm_ref(x, y) + b),),
                    what="the output fusion writes relu(x @ y + b) into the ref b was read from "
                    f"(aliased output); {_FMS}:445",
                )
            p = _params(impl=impl.name, cores=cores)
            _add(
                f"FusibleMatmulTest.test_matmul_forbids_unsupported_ref_access{p}",
                cores,
                functools.partial(_fmst_forbids_unsupported_ref_access, impl, cores),
                None,
                expect="raises_at_trace:Exception:fusible_matmul does not support",
                what="an input fusion reading a ref the output fusion writes is rejected; "
                f"{_FMS}:485",
            )
            _add(
                f"FusibleMatmulTest.test_matmul_with_writes_that_do_not_depend_on_output{p}",
                cores,
                functools.partial(_fmst_writes_that_do_not_depend_on_output, impl, cores),
                None,
                expect="raises_at_trace:Exception:must depend on an output",
                what=f"a ref write in the fusion that ignores the matmul is rejected; {_FMS}:513",
            )


# --------------------------------------------------------------------------------------------
# Not ported
# --------------------------------------------------------------------------------------------

_SC = "SparseCore mesh (plsc.VectorSubcoreMesh / plsc.ScalarSubcoreMesh)"
_DIST = _UP + "tpu_pallas_distributed_test.py"

NOT_PORTED += [
    (
        f"{_STATE}:CoreMapTest.test_can_create_tensorcore_mesh",
        "no kernel: it only calls create_tensorcore_mesh",
    ),
    (
        f"{_STATE}:CoreMapTest.test_capture_scalar[core_type=SC_SCALAR_SUBCORE,...]",
        f"{_SC}; the TC parameterization is ported (SC_VECTOR_SUBCORE is skipped upstream)",
    ),
    (
        f"{_DIST}:PallasCallRemoteDMATest.test_remote_dma_regular_semaphore[_tc]",
        "pl.kernel on a TC mesh inside a 2-device shard_map: REGULAR-semaphore signals and "
        "pltpu.async_remote_copy to device_id={'x': 1 - axis_index('x')} (remote DMA across "
        "devices)",
    ),
    (f"{_DIST}:PallasCallRemoteDMATest.test_remote_dma_regular_semaphore[_sc]", _SC),
    (
        f"{_DIST}:PallasCallRemoteDMATest.test_axis_dict_with_core_multi_device[joint_axis]",
        "core_map inside a multi-device shard_map: barrier semaphore over every (device, core), "
        "make_async_remote_copy from device 0 core 0 to device 1 core 1",
    ),
    (
        f"{_DIST}:PallasCallRemoteDMATest.test_multi_device_core_local_kernel",
        "core_map inside a multi-device shard_map (the kernel itself is core-local: a REGULAR "
        "semaphore barrier over the cores, then each core copies its slice, much like "
        "CoreMapTest.test_can_signal_cores)",
    ),
    (
        f"{_UP}tpu_pallas_async_test.py:PallasCallAsyncCopyTest."
        "test_axis_dict_with_core_single_device",
        "core_map (collective_id=7) inside shard_map over a 'device' axis: the barrier "
        "semaphore is signalled with device_id={'device': i, 'core': j}, and core 0 "
        "remote-copies to core 1 (make_async_remote_copy(device_id={'core': 1})); upstream runs "
        "it on 1 device with 2 cores",
    ),
    (
        f"{_UP}tpu_pallas_interpret_distributed_test.py:InterpretDistributedTest."
        "test_that_exception_does_not_cause_dma_to_wait_forever",
        "pl.kernel on a 2-core mesh inside a multi-device shard_map, async_remote_copy to the "
        "left neighbour device (interpret mode)",
    ),
    (
        f"{_UP}tpu_pallas_interpret_distributed_test.py:InterpretDistributedTest."
        "test_shard_map_of_core_map[1,2,4]",
        "multi-device shard_map of a core_map (the kernel is InterpretTest.test_core_map's, "
        "plus num_cores * axis_index('x') of the device axis)",
    ),
    (
        f"{_MPMD}:MpmdAsyncTest.test_async_sc_tc_prefetch_vmem[SCS,SCV]",
        f"{_SC} kernel DMAs into TC VMEM/semaphore outputs (`@ tc_mesh`) that a 1-core TC "
        "pl.kernel then waits on",
    ),
    (
        f"{_MPMD}:MpmdTest.<test>[core_type=SCS|SCV] of test_mpmd_capture_scalar, "
        "test_passing_in_refs, test_passing_in_multiple_refs, test_mixed_outputs_and_refs, "
        "test_passing_in_refs_read_only, test_passing_in_refs_with_scratch, "
        "test_passing_in_duplicate_refs_errors, test_closed_over_refs, "
        "test_closed_over_refs_with_scratch",
        f"{_SC}; their core_type=TC parameterizations are ported",
    ),
    (
        f"{_MPMD}:MpmdTest.test_mismatched_core_axis_name, test_parallel_subkernels, "
        "test_parallel_subkernels_with_kernel, test_vmap, test_vmap_captured_scalar_error, "
        "test_vmap_with_refs, test_parallel_subkernels_semaphores, "
        "test_copy_with_cross_core_signaling, "
        "test_parallel_subkernels_semaphores_missing_subcore_axis, "
        "test_mpmd_map_semaphore_mesh_enforcement",
        _SC,
    ),
    (f"{_MPMD}:MpmdHijaxTest.test_parallel_subkernels_hijax", _SC),
    (
        f"{_PIPE}:PallasCallPipelineTransformedRefsTest."
        "test_transformed_refs_as_inputs_nested_bitcast / _nested_3level",
        "skipped upstream without jax_use_emit_pipeline_primitive; ported as their "
        "PallasCallPipelineTransformedRefsPrimitiveTest twins",
    ),
    (
        f"{_EINSHAPE}:EinshapeTPUKernelTest.test_hypothesis_einshape",
        "hypothesis draws the equations (up to 200 per run); the kernel is "
        "test_einshape_basic's, ported with upstream's fixed equations",
    ),
    (
        f"{_FM}:FusibleMatmulTest.<test>[dtype=bfloat16,...]",
        "only the float32 parameterization is kept: the bfloat16 one is the same kernel with "
        "bfloat16 roundings in the epilogue (ExcessPrecisionTest's bfloat16 cases are ported)",
    ),
    (
        f"{_FM}:FusibleMatmulTest.test_matmul_input_concat_output",
        "skipped upstream ('select_n does not support more than 3 elements')",
    ),
    (
        f"{_FM}:FusibleMatmulTest.test_matmul_rhs_transpose_add_transpose",
        "tanh in the input fusion: no bit-exact numpy reference (upstream compares with "
        "tolerance against XLA's tanh)",
    ),
    (
        f"{_FM}:ExcessPrecisionTest.test_matmul_bf16_activation, "
        "test_matmul_out_bf16_with_f32_activation, test_matmul_out_bf16_with_bf16_activation",
        "exp(tanh(.)) epilogue compared bitwise with XLA's own exp/tanh: no exact numpy reference",
    ),
    (
        f"{_FM} and {_FMS}: every [impl=PALLAS_CALL] parameterization",
        "pallas_call, not a mesh",
    ),
    (
        f"{_UP}tpu_sparsecore_pallas_test.py, tpu_sparsecore_pallas_distributed_test.py, "
        "tpu_sparsecore_pallas_debug_check_test.py: every test",
        _SC,
    ),
    (f"{_UP}tpu_trace_value_test.py:SparseCoreTraceValueTest.test_trace_value", _SC),
]


for _cases in (
    _cases_state,
    _cases_interpret,
    _cases_memory_space,
    _cases_mpmd,
    _cases_random_einshape,
    _cases_pipeline,
    _cases_fusible_matmul,
):
    _cases()


# --------------------------------------------------------------------------------------------
# Verification: build and trace every case on this machine
# --------------------------------------------------------------------------------------------


def _raised(e: BaseException, exc_name: str) -> bool:
    return any(c.__name__ == exc_name for c in type(e).__mro__)


def check(case: MeshCase) -> str:
    """Builds ``case``, traces ``f`` with ``jax.make_jaxpr`` and checks the reference's shapes
    and dtypes against the traced outputs (or, for ``raises_at_trace``, the error)."""
    f, args = case.build()
    assert isinstance(args, tuple) and all(isinstance(a, np.ndarray) for a in args), case.name
    if case.expect.startswith("raises_at_trace:"):
        _, exc_name, regex = case.expect.split(":", 2)
        try:
            jax.make_jaxpr(f)(*args)
        except Exception as e:  # upstream's own error, whatever its class
            if not _raised(e, exc_name) or not re.search(regex, str(e)):
                raise AssertionError(f"{case.name}: wrong error {type(e).__name__}: {e}") from e
            return f"raised {type(e).__name__}"
        raise AssertionError(f"{case.name}: traced, expected {case.expect}")
    closed = jax.make_jaxpr(f)(*args)
    if case.reference is None:
        return "traced"
    want = case.reference(*args)
    assert isinstance(want, tuple), case.name
    got = [(tuple(a.shape), np.dtype(a.dtype)) for a in closed.out_avals]
    ref = [(tuple(np.shape(r)), np.asarray(r).dtype) for r in want]
    assert got == ref, f"{case.name}: traced outputs {got}, reference {ref}"
    return "traced, reference matches"


def _same_bits(got: np.ndarray, want: np.ndarray) -> bool:
    """Equal bits, except that any NaN matches any NaN (upstream asserts isnan only)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or got.dtype != want.dtype:
        return False
    if got.dtype.kind in "biu":
        return bool(np.array_equal(got, want))
    nan_got, nan_want = np.isnan(got.astype(np.float32)), np.isnan(want.astype(np.float32))
    bits = f"u{got.dtype.itemsize}"
    return bool(
        np.array_equal(nan_got, nan_want)
        and np.array_equal(got.view(bits)[~nan_got], want.view(bits)[~nan_want])
    )


def run(case: MeshCase, interpret: bool) -> str:
    """Builds and runs ``case`` on the default device (under TPU interpret mode with
    ``interpret``, except the cases that set their own InterpretParams) and checks the outcome
    against ``expect``. ``pl.kernel`` reads the interpret-mode context when it is defined, so the
    build runs inside it too."""
    forced = interpret and _INTERP not in case.what
    ctx = pltpu.force_tpu_interpret_mode() if forced else contextlib.nullcontext()
    with ctx:
        f, args = case.build()
        if case.expect == "lower_only":
            jax.jit(f).lower(*args)
            return "lowered"
        kind, _, rest = case.expect.partition(":")
        try:
            out = jax.block_until_ready(f(*args))
        except Exception as e:  # upstream's own error, whatever its class
            if kind.startswith("raises"):
                exc_name, _, regex = rest.partition(":")
                if _raised(e, exc_name) and re.search(regex, str(e)):
                    return f"raised {type(e).__name__} as expected"
            raise
    if kind != "ok":
        raise AssertionError(f"ran, expected {case.expect}")
    got, want = jax.tree.leaves(out), case.reference(*args)
    if len(got) != len(want) or not all(_same_bits(g, w) for g, w in zip(got, want, strict=True)):
        raise AssertionError("outputs differ from the reference")
    return "ran, outputs equal the reference"


def main(argv: list[str]) -> int:
    """``python mesh_corpus_upstream.py`` traces every case (any machine);
    ``--run [REGEX]`` also runs the matching cases on the default device (a TPU: cases with
    more cores than the chip has are skipped), ``--interpret`` in TPU interpret mode."""
    names = [c.name for c in CASES]
    assert len(set(names)) == len(names), "duplicate case names"
    interpret = "--interpret" in argv
    to_run = "--run" in argv or interpret
    positional = [a for a in argv if not a.startswith("--")]
    pattern = re.compile(positional[0] if positional else "")
    chip_cores = jax.devices()[0].num_cores if jax.default_backend() == "tpu" else None
    failures = 0
    cases = [c for c in CASES if pattern.search(c.name)]
    for case in cases:
        try:
            status = check(case)
            if to_run and not case.expect.startswith("raises_at_trace"):
                if chip_cores is not None and not interpret and case.cores > chip_cores:
                    status += f"; not run (the chip has {chip_cores} core(s))"
                else:
                    status += "; " + run(case, interpret)
        except Exception as e:
            failures += 1
            status = f"FAILED {type(e).__name__}: {str(e)[:500]}"
        print(f"{case.name} (cores={case.cores}, expect={case.expect.split(':')[0]}): {status}")
    print(f"{len(cases)} cases, {failures} failed; {len(NOT_PORTED)} NOT_PORTED entries")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
