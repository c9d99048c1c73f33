"""Async copies in Mosaic: ``dma_start`` is ``tpu.enqueue_dma`` and ``dma_wait`` is
``tpu.wait_dma2`` on the memrefs the views slice out, with DMA semaphores as memrefs of
``!tpu.dma_semaphore`` (kernel scratch operands, or ``tpu.sem_alloc`` in a ``run_scoped``).
Each kernel of ``dma_cases`` is lowered by minipallas and by upstream: their DMA ops name the
same memrefs in the same order (upstream slices each ref again at every use, minipallas once
per view: the only difference), and libtpu compiles every module (``tests/mosaic_compile.py``).
"""

# ruff: noqa: E501  (FileCheck patterns quote whole MLIR lines)

import pathlib
import re
import sys

import jax
import numpy as np
import pytest
from filecheck_util import filecheck
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import minipallas as mp
import minipallas.numpy as jnp
from minipallas import tpu
from minipallas.interop.importer.rules.kernel_call import kernel_from_jaxpr
from minipallas.ir.errors import PassError
from minipallas.kernels.pallas_call import lower_for_target as lower_call
from minipallas.tools.difftest.mosaic import UpstreamError, normalized_text, upstream_mosaic

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "kernels"))

from minipallas.tools.corpora.dma_cases import DMA_CASES  # noqa: E402

SEM = "memref<!tpu.dma_semaphore, #tpu.memory_space<semaphore_mem>>"
ANY8 = "memref<8x128xf32, #tpu.memory_space<any>>"
VMEM8 = "memref<8x128xf32, #tpu.memory_space<vmem>>"
_DMA = re.compile(r"tpu\.(?:enqueue_dma|wait_dma2) .*")


def dma_ops(module) -> list[str]:
    """Each DMA op of the module, in order, with its SSA names dropped: what it copies where."""
    return [re.sub(r"%\w+", "%", m) for m in _DMA.findall(normalized_text(module))]


@pytest.mark.parametrize("case", DMA_CASES, ids=lambda c: c.name)
def test_the_dma_ops_are_upstreams(case):
    args = case.inputs()
    ours = case.minipallas().lower(*args, target="tpu").module
    assert ours.operation.verify()
    theirs = upstream_mosaic(case.upstream(interpret=False), *args)
    assert dma_ops(ours) == dma_ops(theirs) and dma_ops(ours)


@pytest.mark.parametrize("case", DMA_CASES, ids=lambda c: c.name)
def test_an_imported_upstream_kernel_lowers_to_upstreams_dma_ops(case):
    """The upstream kernel itself, imported (``kernel_from_jaxpr``) rather than re-traced."""
    args = case.inputs()
    jaxpr = jax.make_jaxpr(case.upstream(interpret=False))(*args)
    module = lower_call(kernel_from_jaxpr(jaxpr, memory_space=tpu.VMEM), "tpu").module
    assert module.operation.verify()
    assert dma_ops(module) == dma_ops(upstream_mosaic(case.upstream(interpret=False), *args))


def test_a_copy_from_hbm_slices_the_window_and_signals_the_scratch_semaphore():
    case = next(c for c in DMA_CASES if c.name == "dma_hbm_rows")
    text = case.minipallas().lower(*case.inputs(), target="tpu").as_text(debug_info=False)
    filecheck(
        text,
        f"""
        CHECK: func.func @dma_hbm_rows(%arg0: i32, %arg1: memref<32x128xf32, #tpu.memory_space<any>>, %arg2: {VMEM8}, %arg3: {VMEM8}, %arg4: {SEM})
        CHECK-SAME: scratch_operands = 2
        CHECK-SAME: window_params = [{{}}, {{transform_indices = @transform_1
        CHECK: %[[I:.*]] = arith.muli %arg0, %c8_i32 : i32
        CHECK-NEXT: %[[W:.*]] = tpu.memref_slice %arg1[%[[I]], %c0_i32] : memref<32x128xf32, #tpu.memory_space<any>> -> {ANY8}
        CHECK-NEXT: tpu.enqueue_dma source(%[[W]] : {ANY8}) target(%arg3 : {VMEM8}) target_semaphore(%arg4 : {SEM})
        CHECK-NEXT: tpu.wait_dma2 semaphore(%arg4 : {SEM}) src(%[[W]] : {ANY8}) dst(%arg3 : {VMEM8})
        CHECK-NEXT: vector.load %arg3
        """,
    )


def test_run_scoped_dma_semaphores_are_a_sem_alloc():
    case = next(c for c in DMA_CASES if c.name == "dma_vmem_chain")
    text = case.minipallas().lower(*case.inputs(), target="tpu").as_text(debug_info=False)
    filecheck(
        text,
        """
        CHECK: "tpu.region"() ({
        CHECK: tpu.sem_alloc : memref<2x!tpu.dma_semaphore, #tpu.memory_space<semaphore_mem>>
        CHECK-COUNT-2: tpu.enqueue_dma
        CHECK: tpu.yield
        """,
    )


def _squeezed(ns, x_ref, o_ref, buf, sem):
    copy = ns.make_async_copy(x_ref, buf, sem)
    copy.start()
    copy.wait()
    o_ref[...] = buf[...]


def test_a_squeezed_block_dimension_is_squeezed_out_of_the_copy():
    """The block (None, 8, 128) is a 1x8x128 memref; the copy sees the kernel's 8x128.
    Upstream hands Mosaic the 1x8x128 memref, which its verifier refuses."""
    from minipallas.tools.corpora.dma_cases import OURS, upstream

    call = mp.pallas_call(
        lambda *refs: _squeezed(OURS, *refs),
        mp.ArrayType((8, 128), jnp.float32),
        grid=(1,),
        in_specs=[mp.BlockSpec((None, 8, 128), lambda i: (1, 0, 0))],
        out_specs=mp.BlockSpec((8, 128), lambda i: (0, 0)),
        scratch_shapes=[tpu.VMEM((8, 128), jnp.float32), tpu.SemaphoreType.DMA],
    )
    x = np.random.default_rng(1).standard_normal((2, 8, 128)).astype(np.float32)
    np.testing.assert_array_equal(call(x), x[1])
    text = call.lower(x, target="tpu").as_text(debug_info=False)
    filecheck(
        text,
        f"""
        CHECK: %[[S:.*]] = tpu.memref_squeeze %arg1 : memref<1x8x128xf32, #tpu.memory_space<vmem>> -> {VMEM8}
        CHECK-NEXT: tpu.enqueue_dma source(%[[S]] : {VMEM8}) target(%arg3 : {VMEM8})
        """,
    )
    theirs = pl.pallas_call(
        lambda *refs: _squeezed(upstream(), *refs),
        jax.ShapeDtypeStruct((8, 128), np.float32),
        grid=(1,),
        in_specs=[pl.BlockSpec((None, 8, 128), lambda i: (1, 0, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)),
        scratch_shapes=[pltpu.VMEM((8, 128), np.float32), pltpu.SemaphoreType.DMA],
    )
    with pytest.raises(UpstreamError, match="DMA source and target shape mismatch"):
        upstream_mosaic(theirs, x)


def test_a_bool_copy_is_refused_with_upstreams_message():
    def kernel(x_ref, o_ref):
        mp.run_scoped(lambda sem: tpu.async_copy(x_ref, o_ref, sem).wait(), tpu.SemaphoreType.DMA)

    call = mp.pallas_call(kernel, mp.ArrayType((8, 128), jnp.bool_))
    x = np.zeros((8, 128), np.bool_)
    np.testing.assert_array_equal(call(x), x)  # the CPU path copies bools
    with pytest.raises(PassError, match="DMAs with bool dtypes are not supported") as e:
        call.lower(x, target="tpu")
    assert e.value.op == "dma_start" and "int32" in e.value.fix
    assert "test_tpu_dma.py" in str(e.value.loc)


def test_upstream_refuses_a_bool_copy_too():
    def kernel(x_ref, o_ref):
        pl.run_scoped(
            lambda sem: pltpu.async_copy(x_ref, o_ref, sem).wait(), pltpu.SemaphoreType.DMA
        )

    call = pl.pallas_call(kernel, jax.ShapeDtypeStruct((8, 128), jax.numpy.bool_))
    with pytest.raises(UpstreamError, match="DMAs with bool dtypes are not supported"):
        upstream_mosaic(call, np.zeros((8, 128), np.bool_))
