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
- every ``f`` runs its body under ``_assume_tpu_chip()``: upstream asks ``get_tpu_info()`` while
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

Run ``python tests/interop/mesh_corpus_upstream.py`` to trace every case.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.ad_checkpoint
import jax.numpy as jnp
import numpy as np
from jax import random as jax_random
from jax._src import config as jax_config
from jax._src import core as jax_core
from jax._src import hijax
from jax._src import state
from jax._src.pallas.fuser import fusible_dtype
from jax._src.pallas.mosaic import tpu_info
from jax._src.state import utils as state_utils
from jax.experimental import pallas as pl
from jax.experimental.pallas import fuser
from jax.experimental.pallas import tpu as pltpu


@dataclasses.dataclass(frozen=True)
class MeshCase:
    name: str  # "upstream/<TestClass>.<test_name>[param]"
    cores: int  # num_cores of the mesh
    build: Callable[[], tuple[Callable, tuple[np.ndarray, ...]]]  # -> (f, numpy args)
    reference: Callable[..., tuple[np.ndarray, ...]] | None  # None if expect != "ok"
    expect: str = "ok"
    what: str = ""  # what the upstream test checks, and the upstream file:line


CASES: list[MeshCase] = []
NOT_PORTED: list[tuple[str, str]] = []

_UP = "tests/pallas/"


@contextlib.contextmanager
def _assume_tpu_chip(chip: str = "TPU_V5E") -> Iterator[None]:
    """Registers ``chip``'s TPU info for the local device kind when it is not a TPU's."""
    kind = tpu_info.get_device_kind()
    if tpu_info.chip_version_from_device_kind(kind) is not None or kind in tpu_info.registry:
        yield
        return
    version = getattr(tpu_info.ChipVersion, chip)
    tpu_info.registry[kind] = lambda: tpu_info.get_tpu_info_for_chip(version, 1)
    try:
        yield
    finally:
        del tpu_info.registry[kind]
        tpu_info.get_tpu_info.cache_clear()


def _on_any_device(build):
    """``build`` with its ``f`` run under ``_assume_tpu_chip()``."""

    @functools.wraps(build)
    def wrapped():
        f, args = build()

        @functools.wraps(f)
        def g(*a):
            with _assume_tpu_chip():
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
            what="core c DMAs its 16/cores rows to VMEM, adds axis_index, DMAs back; "
            f"{_STATE}:325",
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
            what="x -> VMEM scratch (dict scratch_types), +1, -> output; " f"{_STATE}:429",
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
                p = _params(first_core_to_copy=first, dma_execution_mode=mode, hbm_memory_space=space)
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
            name = f"{cls}.test_basic_ref_memory_space_constraint{_params(memory_space=space)}"
            name += _params(cores=cores)
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


def _cases_random_einshape():
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
