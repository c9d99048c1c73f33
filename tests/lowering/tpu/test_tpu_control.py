"""Control flow and scoped scratch in Mosaic: scf.for / scf.while / scf.if cascades, inlined
calls, and run_scoped as a tpu.region of memref.allocas."""

# ruff: noqa: E501  (FileCheck patterns quote whole MLIR lines)

import pytest
from filecheck_util import filecheck
from tpu_util import kernel, spec

import minipallas as mp
import minipallas.numpy as jnp
from minipallas.ir.collectives import CollectiveAxesUnsupported
from minipallas.ir.types import TPU_SMEM
from minipallas.lowering.tpu import lower_to_mosaic
from minipallas.tpu import SMEM, VMEM

F = spec((8, 128), "float32")
N = spec((4,), "int32", space=TPU_SMEM)


def emit(body, ins, outs, grid=(4,)) -> str:
    return lower_to_mosaic(kernel(body, grid, ins, outs)).as_text(debug_info=False)


def test_fori_loop_is_scf_for_over_i32_with_carries():
    def body(n_ref, x_ref, o_ref):
        o_ref[...] = mp.fori_loop(0, n_ref[0], lambda i, acc: acc * 2.0, x_ref[...])

    filecheck(
        emit(body, [N, F], [F]),
        """
        CHECK: %[[N:.*]] = memref.load %arg1
        CHECK: %[[X:.*]] = vector.load %arg2
        CHECK: %[[R:.*]] = scf.for %{{.*}} = %{{.*}} to %[[N]] step %{{.*}} iter_args(%[[ACC:.*]] = %[[X]]) -> (vector<8x128xf32>) : i32 {
        CHECK: %[[Y:.*]] = arith.mulf %[[ACC]], %{{.*}}
        CHECK: scf.yield %[[Y]]
        CHECK: tpu.vector_store %arg3[%{{.*}}, %{{.*}}], %[[R]]
        """,
    )


def test_while_loop_is_scf_while():
    def body(n_ref, x_ref, o_ref):
        n = n_ref[0]
        _, y = mp.while_loop(
            lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] + 1.0), (jnp.int32(0), x_ref[...])
        )
        o_ref[...] = y

    filecheck(
        emit(body, [N, F], [F]),
        """
        CHECK: %[[N:.*]] = memref.load %arg1
        CHECK: scf.while (%[[I:.*]] = %{{.*}}, %[[V:.*]] = %{{.*}}) : (i32, vector<8x128xf32>)
        CHECK: %[[P:.*]] = arith.cmpi slt, %[[I]], %[[N]] : i32
        CHECK: scf.condition(%[[P]]) %[[I]], %[[V]]
        CHECK: } do {
        CHECK: arith.addi
        CHECK: arith.addf
        CHECK: scf.yield
        """,
    )


def test_when_on_a_grid_index_is_a_plain_scf_if():
    def body(x_ref, o_ref):
        @mp.when(mp.program_id(0) == 0)
        def _():
            o_ref[...] = x_ref[...]

    out = emit(body, [F], [F])
    filecheck(
        out,
        """
        CHECK: %[[P:.*]] = arith.cmpi eq, %arg0, %{{.*}} : i32
        CHECK-NEXT: scf.if %[[P]] {
        CHECK-NEXT: vector.load
        """,
    )
    assert "maxsi" not in out and "sgt" not in out  # the index is known to be 0 or 1


def test_switch_on_an_unknown_index_clamps_then_cascades():
    def body(n_ref, x_ref, o_ref):
        x = x_ref[...]
        o_ref[...] = mp.switch(n_ref[0], [lambda: x, lambda: x * 2.0, lambda: jnp.sin(x)])

    filecheck(
        emit(body, [N, F], [F]),
        """
        CHECK: %[[N:.*]] = memref.load %arg1
        CHECK: %[[LO:.*]] = arith.maxsi %[[N]], %{{.*}} : i32
        CHECK: %[[I:.*]] = arith.minsi %[[LO]], %{{.*}} : i32
        CHECK: %[[P:.*]] = arith.cmpi ne, %[[I]], %{{.*}} : i32
        CHECK: scf.if %[[P]] -> (vector<8x128xf32>) {
        CHECK: %[[J:.*]] = arith.subi %[[I]], %{{.*}} : i32
        CHECK: %[[Q:.*]] = arith.cmpi ne, %[[J]], %{{.*}} : i32
        CHECK: scf.if %[[Q]] -> (vector<8x128xf32>) {
        CHECK: math.sin
        CHECK: } else {
        CHECK: arith.mulf
        CHECK: } else {
        """,
    )


def test_two_way_cond_on_an_unknown_index_tests_greater_than_zero():
    def body(n_ref, x_ref, o_ref):
        x = x_ref[...]
        o_ref[...] = mp.switch(n_ref[0], [lambda: x, lambda: x * 2.0])

    filecheck(
        emit(body, [N, F], [F]),
        """
        CHECK: %[[N:.*]] = memref.load %arg1
        CHECK: %[[P:.*]] = arith.cmpi sgt, %[[N]], %{{.*}} : i32
        CHECK: scf.if %[[P]]
        """,
    )


def test_constant_index_picks_its_branch_and_calls_are_inlined():
    def helper(v):
        return jnp.tanh(v)

    def body(x_ref, o_ref):
        x = x_ref[...]
        o_ref[...] = mp.switch(7, [lambda: x, lambda: mp.call(helper, x)])

    out = emit(body, [F], [F])
    filecheck(out, "CHECK: vector.load\nCHECK-NEXT: math.tanh\nCHECK-NEXT: tpu.vector_store")
    assert "scf.if" not in out and "func.call" not in out


def test_run_scoped_is_a_region_of_allocas():
    def body(x_ref, o_ref):
        def scoped(vmem_ref, smem_ref, plain_ref):
            vmem_ref[...] = x_ref[...]
            smem_ref[0] = 1.0
            plain_ref[...] = x_ref[...]
            return vmem_ref[...] + smem_ref[0] + plain_ref[...]

        o_ref[...] = mp.run_scoped(
            scoped, VMEM((8, 128), jnp.float32), SMEM((2,), jnp.float32),
            mp.RefType((8, 128), jnp.float32),
        )  # fmt: skip

    filecheck(
        emit(body, [F], [F]),
        """
        CHECK: %[[R:.*]] = "tpu.region"() ({
        CHECK-NEXT: %[[A:.*]] = memref.alloca() : memref<8x128xf32, #tpu.memory_space<vmem>>
        CHECK-NEXT: %[[B:.*]] = memref.alloca() : memref<2xf32, #tpu.memory_space<smem>>
        CHECK-NEXT: %[[C:.*]] = memref.alloca() : memref<8x128xf32, #tpu.memory_space<vmem>>
        CHECK: tpu.vector_store %[[A]]
        CHECK: memref.store %{{.*}}, %[[B]]
        CHECK: tpu.yield %{{.*}} : vector<8x128xf32>
        CHECK-NEXT: }) : () -> vector<8x128xf32>
        CHECK: tpu.vector_store %arg2[%{{.*}}, %{{.*}}], %[[R]]
        """,
    )


def test_run_scoped_with_collective_axes_raises_upstream_mosaics_error():
    def body(x_ref, o_ref):
        def scoped(t):
            t[...] = x_ref[...]
            o_ref[...] = t[...]

        mp.run_scoped(scoped, VMEM((8, 128), jnp.float32), collective_axes=("x",))

    k = kernel(body, (2,), [F], [F])
    with pytest.raises(NotImplementedError) as info:
        lower_to_mosaic(k)
    assert isinstance(info.value, CollectiveAxesUnsupported)
    assert str(info.value) == "run_scoped lowering does not support collective axes"
    (note,) = info.value.__notes__
    assert "test_tpu_control.py" in note and "Mosaic" in note and "('x',)" in note
