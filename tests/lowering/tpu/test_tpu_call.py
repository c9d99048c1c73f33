"""A ``jax.jit`` helper called with refs inside an upstream kernel: imported as a ``call`` whose
callee's refs keep the memory space of the caller's (VMEM blocks, SMEM operands, scoped VMEM
scratch); the Mosaic module then agrees with upstream Pallas's own lowering."""

# ruff: noqa: E501  (FileCheck patterns quote whole MLIR lines)

import jax
import jax.numpy as jjnp
from filecheck_util import filecheck
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import minipallas as mp
from minipallas.interop.importer.rules.kernel_call import kernel_from_jaxpr
from minipallas.ir.types import TPU_SMEM, TPU_VMEM, RefType
from minipallas.kernels.pallas_call import lower_for_target
from minipallas.tools.difftest.mosaic import compare, upstream_mosaic

F32 = jax.ShapeDtypeStruct((8, 128), jjnp.float32)


@jax.jit
def _scale_into(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0


@jax.jit
def _corner(r):
    return r[0, 0]


def _staged(s_ref, x_ref, o_ref):
    def body(tmp_ref):
        _scale_into(x_ref, tmp_ref)
        o_ref[...] = tmp_ref[...] + s_ref[0]

    pl.run_scoped(body, pltpu.VMEM((8, 128), jjnp.float32))


STAGED = pl.pallas_call(
    _staged,
    jax.ShapeDtypeStruct((16, 128), jjnp.float32),
    grid=(2,),
    in_specs=[
        pl.BlockSpec(memory_space=pltpu.SMEM),
        pl.BlockSpec((8, 128), lambda i: (i, 0)),
    ],
    out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
)
STAGED_ARGS = (
    jax.ShapeDtypeStruct((1,), jjnp.float32),
    jax.ShapeDtypeStruct((16, 128), jjnp.float32),
)


def _corners(s_ref, x_ref, o_ref):
    o_ref[...] = x_ref[...] * _corner(s_ref) + _corner(x_ref)


CORNERS = pl.pallas_call(
    _corners,
    F32,
    in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec(memory_space=pltpu.VMEM)],
)


def _kernel(call, args):
    return kernel_from_jaxpr(jax.make_jaxpr(call)(*args), memory_space=mp.tpu.VMEM)


def _callees(kernel):
    return [op.attrs["callee"] for op in kernel.body.walk() if op.name == "call"]


def test_jitted_helper_refs_are_in_the_callers_memory_spaces():
    (callee,) = _callees(_kernel(STAGED, STAGED_ARGS))
    assert [p.type for p in callee.body.params] == [RefType((8, 128), "float32", TPU_VMEM)] * 2
    first, second = _callees(_kernel(CORNERS, (F32, F32)))
    assert first.body.params[0].type == RefType((8, 128), "float32", TPU_SMEM)
    assert second.body.params[0].type == RefType((8, 128), "float32", TPU_VMEM)


def test_jitted_helper_on_scratch_emits_vmem_memrefs():
    lowered = lower_for_target(_kernel(STAGED, STAGED_ARGS), "tpu")
    assert lowered.module.operation.verify()
    filecheck(
        lowered.as_text(debug_info=False),
        """
        CHECK: func.func @_staged(%arg0: i32, %arg1: memref<1xf32, #tpu.memory_space<smem>>, %arg2: memref<8x128xf32, #tpu.memory_space<vmem>>, %arg3: memref<8x128xf32, #tpu.memory_space<vmem>>)
        CHECK: %[[T:.*]] = memref.alloca() : memref<8x128xf32, #tpu.memory_space<vmem>>
        CHECK: %[[X:.*]] = vector.load %arg2[%c0, %c0] : memref<8x128xf32, #tpu.memory_space<vmem>>, vector<8x128xf32>
        CHECK: %[[Y:.*]] = arith.mulf %[[X]], %{{.*}} : vector<8x128xf32>
        CHECK: tpu.vector_store %[[T]][%c0, %c0], %[[Y]] {{.*}} : memref<8x128xf32, #tpu.memory_space<vmem>>, vector<8x128xf32>,
        CHECK: memref.load %arg1[%c0] : memref<1xf32, #tpu.memory_space<smem>>
        """,
    )


def test_jitted_helper_on_smem_and_vmem_refs_reads_each_its_own_way():
    lowered = lower_for_target(_kernel(CORNERS, (F32, F32)), "tpu")
    assert lowered.module.operation.verify()
    filecheck(
        lowered.as_text(debug_info=False),
        """
        CHECK: memref.load %arg0[%c0, %c0] : memref<8x128xf32, #tpu.memory_space<smem>>
        CHECK: %[[V:.*]] = vector.load %arg1[%c0, %c0] : memref<8x128xf32, #tpu.memory_space<vmem>>, vector<1x1xf32>
        CHECK: vector.extract %[[V]][0, 0] : f32 from vector<1x1xf32>
        """,
    )


def test_modules_match_upstreams_lowering():
    for call, args, semantics in [(STAGED, STAGED_ARGS, True), (CORNERS, (F32, F32), False)]:
        diff = compare(
            lower_for_target(_kernel(call, args), "tpu").module, upstream_mosaic(call, *args)
        )
        assert (diff.signature, diff.memrefs, diff.ops) == (None, {}, {})
        # the grid axis: minipallas infers parallel, upstream defaults to arbitrary
        assert set(diff.attributes) == ({"dimension_semantics"} if semantics else set())
        assert diff.same_text
