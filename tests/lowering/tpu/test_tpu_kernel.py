"""The kernel function's calling convention, attributes and index-map functions; source
locations; block-shape rules; the entry point through ``pallas_call(...).lower``."""

# ruff: noqa: E501  (FileCheck patterns quote whole MLIR lines)

import pytest
from filecheck_util import filecheck
from tpu_util import BY_NAME, kernel, lower_case, spec

import minipallas as mp
import minipallas.numpy as jnp
from minipallas.ir.errors import PassError
from minipallas.ir.types import ANY
from minipallas.lowering.lowered import Lowered
from minipallas.lowering.tpu import lower_to_mosaic
from minipallas.tpu import VMEM


def matmul_kernel(dimension_semantics=None):
    def body(x_ref, y_ref, o_ref, acc_ref):
        @mp.when(mp.program_id(2) == 0)
        def _():
            acc_ref[...] = jnp.zeros((128, 128), jnp.float32)

        acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

        @mp.when(mp.program_id(2) == mp.num_programs(2) - 1)
        def _():
            o_ref[...] = acc_ref[...]

    x = spec((256, 512), "float32", (128, 128), lambda i, j, k: (i, k))
    y = spec((512, 256), "float32", (128, 128), lambda i, j, k: (k, j))
    o = spec((256, 256), "float32", (128, 128), lambda i, j, k: (i, j))
    scratch = [VMEM((128, 128), jnp.float32)]
    return kernel(body, (2, 2, 4), [x, y], [o], scratch, dimension_semantics)


def test_calling_convention_and_attributes():
    lowered = lower_to_mosaic(matmul_kernel(("parallel", "parallel", "arbitrary")))
    assert isinstance(lowered, Lowered) and lowered.target == "tpu"
    filecheck(
        lowered.as_text(debug_info=False),
        """
        CHECK-LABEL: func.func @body(
        CHECK-SAME: %arg0: i32, %arg1: i32, %arg2: i32,
        CHECK-SAME: %arg3: memref<128x128xf32, #tpu.memory_space<vmem>>, %arg4: memref<128x128xf32, #tpu.memory_space<vmem>>, %arg5: memref<128x128xf32, #tpu.memory_space<vmem>>,
        CHECK-SAME: %arg6: memref<128x128xf32, #tpu.memory_space<vmem>>)
        CHECK-SAME: dimension_semantics = [#tpu.dimension_semantics<parallel>, #tpu.dimension_semantics<parallel>, #tpu.dimension_semantics<arbitrary>]
        CHECK-SAME: iteration_bounds = array<i64: 2, 2, 4>
        CHECK-SAME: scalar_prefetch = 0 : i64, scratch_operands = 1 : i64, tpu.core_type = #tpu.core_type<tc>
        CHECK-SAME: window_params = [{transform_indices = @transform_0, window_bounds = array<i64: 128, 128>}, {transform_indices = @transform_1, window_bounds = array<i64: 128, 128>}, {transform_indices = @transform_2, window_bounds = array<i64: 128, 128>}]
        CHECK: %[[FIRST:.*]] = arith.cmpi eq, %arg2, %{{.*}} : i32
        CHECK: scf.if %[[FIRST]] {
        CHECK: tpu.matmul
        CHECK: %[[LAST:.*]] = arith.cmpi eq, %arg2, %c3_i32 : i32
        CHECK-LABEL: func.func @transform_0(%arg0: i32, %arg1: i32, %arg2: i32) -> (i32, i32)
        CHECK-NEXT: return %arg0, %arg2 : i32, i32
        CHECK-LABEL: func.func @transform_1(
        CHECK-NEXT: return %arg2, %arg1 : i32, i32
        CHECK-LABEL: func.func @transform_2(
        CHECK-NEXT: return %arg0, %arg1 : i32, i32
        """,
    )


def test_source_locations_name_the_op_and_the_users_line():
    text = str(lower_to_mosaic(matmul_kernel()))
    line = matmul_kernel.__code__.co_firstlineno + 6  # the `acc_ref[...] += jnp.dot(...)` line
    filecheck(
        text,
        f"""
        CHECK: tpu.matmul {{{{.*}}}} loc(#[[DOT:loc[0-9]+]])
        CHECK: #[[FILE:loc[0-9]+]] = loc("{__file__}":{line}:0)
        CHECK: #[[DOT]] = loc("dot"(#[[FILE]]))
        """,
    )


def test_no_grid_means_no_windows_and_no_grid_arguments():
    case = BY_NAME["whole_array"]
    filecheck(
        lower_case(case).as_text(debug_info=False),
        """
        CHECK: func.func @whole_array(%arg0: memref<16x64xf32, #tpu.memory_space<vmem>>
        CHECK-SAME: dimension_semantics = []
        CHECK-NOT: window_params
        CHECK-NOT: iteration_bounds
        CHECK-NOT: func.func @transform
        """,
    )


def test_pallas_call_lower_reaches_the_emitter_with_vmem_blocks():
    lowered = mp.pallas_call(
        lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref[...] * 2.0),
        mp.ArrayType((16, 128), "float32"),
        grid=(2,),
        in_specs=[mp.BlockSpec((8, 128), lambda i: (i, 0))],
        out_specs=mp.BlockSpec((8, 128), lambda i: (i, 0)),
    ).lower(mp.ArrayType((16, 128), "float32"), target="tpu")
    filecheck(str(lowered), "CHECK: memref<8x128xf32, #tpu.memory_space<vmem>>")
    assert lowered.info["dimension_semantics"].values == ("parallel",)
    assert lowered.info["promotion"] is None


def test_program_id_without_a_grid_axis_is_an_error():
    def body(o_ref):
        o_ref[...] = jnp.full((8, 128), mp.program_id(0), jnp.int32)

    with pytest.raises(PassError, match=r"grid axis 0, but the kernel's grid \(\) has 0 axes"):
        lower_to_mosaic(kernel(body, (), [], [spec((8, 128), "int32")]))


@pytest.mark.parametrize(
    "out, grid, message",
    [
        (spec((64, 128), "float32", (4, 128), lambda i: (i, 0)), (16,), "divisible by 8 and 128"),
        (spec((512,), "float32", (96,), lambda i: (i,)), (4,), "rank-1 block"),
        (spec((16, 128), "float32", (8, 128), lambda: (0, 0)), (), "without a grid"),
        (spec((16, 128), "float32", (8, 128), lambda i: (i, 0), ANY), (2,), "memory space ANY"),
    ],
    ids=["tiling", "rank-1", "gridless-window", "any-window"],
)
def test_block_shapes_mosaic_rejects(out, grid, message):
    def body(o_ref):
        o_ref[...] = jnp.zeros(o_ref.shape, jnp.float32)

    with pytest.raises(PassError, match=message):
        lower_to_mosaic(kernel(body, grid, [], [out]))


def test_lower_to_mosaic_takes_a_kernel():
    with pytest.raises(PassError, match="takes a traced Kernel"):
        lower_to_mosaic(mp.trace(lambda: None))
