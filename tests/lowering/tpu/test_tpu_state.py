"""Reads and writes of refs in Mosaic: vector.load / tpu.vector_store in VMEM, memref.load /
memref.store in SMEM, index arithmetic with clamps only where they can fire, and views."""

# ruff: noqa: E501  (FileCheck patterns quote whole MLIR lines)

import pytest
from filecheck_util import filecheck
from tpu_util import kernel, spec

import minipallas as mp
import minipallas.numpy as jnp
from minipallas.ir.errors import PassError
from minipallas.ir.types import ANY, TPU_SMEM
from minipallas.lowering.tpu import lower_to_mosaic
from minipallas.tpu import VMEM

F32 = "float32"


def text(k) -> str:
    return lower_to_mosaic(k).as_text(debug_info=False)


def row_block():
    return spec((32, 128), F32, (8, 128), lambda i: (i, 0))


def test_whole_block_read_and_write():
    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    filecheck(
        text(kernel(body, (4,), [row_block()], [row_block()])),
        """
        CHECK: %[[C0:.*]] = arith.constant 0 : index
        CHECK: %[[V:.*]] = vector.load %arg1[%[[C0]], %[[C0]]] : memref<8x128xf32, #tpu.memory_space<vmem>>, vector<8x128xf32>
        CHECK: tpu.vector_store %arg2[%[[C0]], %[[C0]]], %[[V]] {strides = array<i32>}
        """,
    )


def test_dynamic_start_in_range_needs_no_clamp():
    def body(x_ref, o_ref):
        def step(r, acc):
            return acc + x_ref[mp.ds(r * 8, 8), :]

        o_ref[...] = mp.fori_loop(0, 4, step, jnp.zeros((8, 128), jnp.float32))

    big = spec((32, 128), F32)
    out = text(kernel(body, (1,), [big], [spec((8, 128), F32)]))
    filecheck(
        out,
        """
        CHECK: scf.for %[[R:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args
        CHECK: %[[S:.*]] = arith.muli %[[R]], %{{.*}} : i32
        CHECK: %[[I:.*]] = arith.index_cast %[[S]] : i32 to index
        CHECK: vector.load %arg1[%[[I]], %{{.*}}] : {{.*}}, vector<8x128xf32>
        """,
    )
    assert "maxsi" not in out and "minsi" not in out


def test_dynamic_start_of_unknown_range_wraps_then_clamps_into_dim_minus_span():
    def body(s_ref, x_ref, o_ref):
        o_ref[...] = x_ref[mp.ds(s_ref[0], 8), :]

    smem = spec((2,), "int32", space=TPU_SMEM)
    k = kernel(body, (1,), [smem, spec((32, 128), F32)], [spec((8, 128), F32)])
    filecheck(
        text(k),
        """
        CHECK-DAG: %[[C24:.*]] = arith.constant 24 : i32
        CHECK-DAG: %[[C32:.*]] = arith.constant 32 : i32
        CHECK-DAG: %[[Z:.*]] = arith.constant 0 : i32
        CHECK: %[[N:.*]] = memref.load %arg1[%{{.*}}] : memref<2xi32, #tpu.memory_space<smem>>
        CHECK: %[[NEG:.*]] = arith.cmpi slt, %[[N]], %[[Z]] : i32
        CHECK: %[[UP:.*]] = arith.addi %[[N]], %[[C32]] : i32
        CHECK: %[[W:.*]] = arith.select %[[NEG]], %[[UP]], %[[N]] : i32
        CHECK: %[[LO:.*]] = arith.maxsi %[[W]], %[[Z]] : i32
        CHECK: %[[HI:.*]] = arith.minsi %[[LO]], %[[C24]] : i32
        CHECK: %[[I:.*]] = arith.index_cast %[[HI]] : i32 to index
        CHECK: vector.load %arg2[%[[I]], %{{.*}}]
        """,
    )


def test_int_index_reads_a_unit_row_then_drops_it():
    def body(x_ref, o_ref):
        o_ref[...] = jnp.broadcast_to(x_ref[3, :][None, :], (8, 128))

    filecheck(
        text(kernel(body, (4,), [row_block()], [row_block()])),
        """
        CHECK: %[[C3:.*]] = arith.constant 3 : index
        CHECK: %[[ROW:.*]] = vector.load %arg1[%[[C3]], %{{.*}}] : {{.*}}, vector<1x128xf32>
        CHECK: vector.broadcast %[[ROW]] : vector<1x128xf32> to vector<8x128xf32>
        """,
    )


def test_scalar_read_from_vmem_extracts_the_element():
    def body(x_ref, o_ref):
        o_ref[...] = jnp.full((8, 128), x_ref[2, 5], jnp.float32)

    filecheck(
        text(kernel(body, (4,), [row_block()], [row_block()])),
        """
        CHECK: %[[W:.*]] = vector.load %arg1[%{{.*}}, %{{.*}}] : {{.*}}, vector<1x1xf32>
        CHECK: %[[S:.*]] = vector.extract %[[W]][0, 0] : f32 from vector<1x1xf32>
        CHECK: vector.broadcast %[[S]] : f32 to vector<8x128xf32>
        """,
    )


def test_squeezed_block_dimension_is_one_in_the_memref():
    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0

    blk = spec((4, 16, 128), F32, (None, 8, 128), lambda b, i: (b, i, 0))
    filecheck(
        text(kernel(body, (4, 2), [blk], [blk])),
        """
        CHECK: func.func @body(%arg0: i32, %arg1: i32, %arg2: memref<1x8x128xf32, #tpu.memory_space<vmem>>
        CHECK-SAME: window_bounds = array<i64: 1, 8, 128>
        CHECK: %[[V:.*]] = vector.load %arg2[%{{.*}}, %{{.*}}, %{{.*}}] : {{.*}}, vector<1x8x128xf32>
        CHECK: vector.shape_cast %[[V]] : vector<1x8x128xf32> to vector<8x128xf32>
        CHECK: vector.shape_cast %{{.*}} : vector<8x128xf32> to vector<1x8x128xf32>
        CHECK: tpu.vector_store %arg3
        """,
    )


def test_smem_scalars_use_memref_load_and_store():
    def body(s_ref, o_ref):
        o_ref[0] = s_ref[1] * 2.0
        o_ref[1] = s_ref[0]

    s = spec((4,), F32, space=TPU_SMEM)
    filecheck(
        text(kernel(body, (1,), [s], [s])),
        """
        CHECK: memref<4xf32, #tpu.memory_space<smem>>, %arg2: memref<4xf32, #tpu.memory_space<smem>>
        CHECK: %[[A:.*]] = memref.load %arg1[%{{.*}}] : memref<4xf32, #tpu.memory_space<smem>>
        CHECK: %[[B:.*]] = arith.mulf %[[A]], %{{.*}} : f32
        CHECK: memref.store %[[B]], %arg2[%{{.*}}]
        CHECK: memref.load %arg1
        CHECK: memref.store
        """,
    )


def test_strided_read_is_a_strided_load():
    def body(x_ref, o_ref):
        o_ref[...] = x_ref[mp.ds(0, 8, stride=2), :]

    k = kernel(body, (1,), [spec((16, 128), F32)], [spec((8, 128), F32)])
    filecheck(
        text(k),
        """
        CHECK: tpu.strided_load %arg1[%{{.*}}, %{{.*}}] {strides = array<i32: 2, 1>} : {{.*}}, vector<8x128xf32>
        """,
    )


def test_masked_load_selects_other_or_the_fill_value():
    def body(x_ref, o_ref):
        m = jnp.broadcasted_iota(jnp.int32, (8, 128), 1) < 64
        idx = (slice(None), slice(None))
        o_ref[...] = mp.load(x_ref, idx, mask=m, other=1.0) + mp.load(x_ref, idx, mask=m)

    filecheck(
        text(kernel(body, (4,), [row_block()], [row_block()])),
        """
        CHECK-DAG: %[[ONE:.*]] = arith.constant dense<1.000000e+00> : vector<8x128xf32>
        CHECK-DAG: %[[NAN:.*]] = arith.constant dense<0x7FC00000> : vector<8x128xf32>
        CHECK: %[[M:.*]] = arith.cmpi slt
        CHECK: %[[V:.*]] = vector.load %arg1
        CHECK: arith.select %[[M]], %[[V]], %[[ONE]]
        CHECK: arith.select %[[M]], %{{.*}}, %[[NAN]]
        """,
    )


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_masked_store(dtype):
    def body(x_ref, o_ref):
        m = jnp.broadcasted_iota(jnp.int32, (16, 128), 0) < 5
        mp.store(o_ref, (slice(None), slice(None)), x_ref[...], mask=m)

    blk = spec((32, 128), dtype, (16, 128), lambda i: (i, 0))
    out = text(kernel(body, (2,), [blk], [blk]))
    if dtype == "float32":  # 32-bit data: the store itself is masked
        filecheck(out, "CHECK: tpu.vector_store %arg2[%{{.*}}, %{{.*}}], %{{.*}} masked %{{.*}}")
    else:  # narrower: read, merge, write back
        filecheck(
            out,
            """
            CHECK: %[[OLD:.*]] = vector.load %arg2
            CHECK: %[[NEW:.*]] = arith.select %{{.*}}, %{{.*}}, %[[OLD]] : vector<16x128xi1>, vector<16x128xbf16>
            CHECK: tpu.vector_store %arg2[%{{.*}}, %{{.*}}], %[[NEW]] {strides
            """,
        )


def test_addupdate_reads_adds_and_writes():
    def body(x_ref, o_ref):
        @mp.when(mp.program_id(0) == 0)  # a TPU never loads an output block: write it first
        def _():
            o_ref[...] = jnp.zeros((8, 128), jnp.float32)

        mp.addupdate(o_ref, (mp.ds(0, 8), slice(None)), x_ref[...])

    filecheck(
        text(kernel(body, (4,), [row_block()], [spec((8, 128), F32)])),
        """
        CHECK: %[[X:.*]] = vector.load %arg1
        CHECK: %[[O:.*]] = vector.load %arg2
        CHECK: %[[S:.*]] = arith.addf %[[O]], %[[X]]
        CHECK: tpu.vector_store %arg2[%{{.*}}, %{{.*}}], %[[S]]
        """,
    )


def test_bool_refs_hold_i32():
    def body(x_ref, b_ref, o_ref):
        o_ref[...] = jnp.where(b_ref[...], x_ref[...], 0.0)
        b_ref[...] = x_ref[...] > 0.0

    b = spec((8, 128), "bool")
    filecheck(
        text(kernel(body, (1,), [spec((8, 128), F32), b], [spec((8, 128), F32)])),
        """
        CHECK: %arg2: memref<8x128xi32, #tpu.memory_space<vmem>>
        CHECK: %[[B:.*]] = vector.load %arg2{{.*}} vector<8x128xi32>
        CHECK: arith.cmpi ne, %[[B]], %{{.*}} : vector<8x128xi32>
        CHECK: %[[P:.*]] = arith.cmpf ogt
        CHECK: %[[W:.*]] = arith.extui %[[P]] : vector<8x128xi1> to vector<8x128xi32>
        CHECK: tpu.vector_store %arg2[%{{.*}}, %{{.*}}], %[[W]]
        """,
    )


def test_views_are_memref_slices_squeezes_reshapes_and_bitcasts():
    def body(x_ref, o_ref, i_ref):
        top = x_ref.at[mp.ds(0, 8), :]
        row = x_ref.at[3]
        o_ref[...] = top[...] + row[...][None, :]
        i_ref[...] = x_ref.bitcast(jnp.int32)[mp.ds(8, 8), :]
        o_ref.reshape(4, 256)[...] = jnp.zeros((4, 256), jnp.float32)

    out = text(
        kernel(body, (1,), [spec((16, 128), F32)], [spec((8, 128), F32), spec((8, 128), "int32")])
    )
    filecheck(
        out,
        """
        CHECK: %[[TOP:.*]] = tpu.memref_slice %arg1[%{{.*}}, %{{.*}}] : memref<16x128xf32, #tpu.memory_space<vmem>> -> memref<8x128xf32, #tpu.memory_space<vmem>>
        CHECK: %[[ROW1:.*]] = tpu.memref_slice %arg1{{.*}} -> memref<1x128xf32, #tpu.memory_space<vmem>>
        CHECK: %[[ROW:.*]] = tpu.memref_squeeze %[[ROW1]] : memref<1x128xf32, {{.*}}> -> memref<128xf32, #tpu.memory_space<vmem>>
        CHECK: vector.load %[[TOP]]
        CHECK: vector.load %[[ROW]]
        CHECK: %[[INT:.*]] = tpu.memref_bitcast %arg1 : memref<16x128xf32, {{.*}}> -> memref<16x128xi32, #tpu.memory_space<vmem>>
        CHECK: vector.load %[[INT]]
        CHECK: %[[FLAT:.*]] = tpu.memref_reshape %arg2 : memref<8x128xf32, {{.*}}> -> memref<4x256xf32, #tpu.memory_space<vmem>>
        CHECK: tpu.vector_store %[[FLAT]]
        """,
    )


def test_any_operands_are_not_windowed_and_not_loadable():
    def copy(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    hbm = spec((8, 128), F32, space=ANY)
    with pytest.raises(PassError, match="ANY memory space can only be accessed using async_copy"):
        lower_to_mosaic(kernel(copy, (2,), [hbm], [spec((8, 128), F32)]))

    def untouched(x_ref, o_ref):
        o_ref[...] = jnp.zeros((8, 128), jnp.float32)

    filecheck(
        text(kernel(untouched, (2,), [hbm], [spec((8, 128), F32)])),
        """
        CHECK: %arg1: memref<8x128xf32, #tpu.memory_space<any>>
        CHECK-SAME: window_params = [{}, {pipeline_mode = #tpu.pipeline_mode<synchronous>, transform_indices = @transform_1
        CHECK-NOT: func.func @transform_0
        CHECK: func.func @transform_1
        """,
    )


@pytest.mark.parametrize(
    "body, message",
    [
        (lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref.T[0:8, 0:16]), "transposed views"),
        (
            lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref.at[mp.ds(0, 8, stride=2), 0:16][...]),
            "strided views",
        ),
        (
            lambda x_ref, o_ref: o_ref.__setitem__(
                ..., x_ref[jnp.broadcasted_iota(jnp.int32, (8,), 0), 0:16]
            ),
            "integer-array indexing",
        ),
    ],
    ids=["transpose-view", "strided-view", "gather"],
)
def test_views_and_indexers_mosaic_cannot_express(body, message):
    k = kernel(body, (1,), [spec((16, 128), F32)], [spec((8, 16), F32)])
    with pytest.raises(PassError, match=message):
        lower_to_mosaic(k)


def test_vector_from_smem_and_scalar_vmem_refs_are_rejected():
    def vector_from_smem(s_ref, o_ref):
        o_ref[...] = jnp.broadcast_to(s_ref[...][None, :], (8, 128))

    smem = spec((128,), F32, space=TPU_SMEM)
    with pytest.raises(PassError, match="can only move scalars to or from SMEM"):
        lower_to_mosaic(kernel(vector_from_smem, (1,), [smem], [spec((8, 128), F32)]))

    def scalar_scratch(o_ref):
        mp.run_scoped(lambda t: t.__setitem__((), 1.0), VMEM((), jnp.float32))

    with pytest.raises(PassError, match=r"\(\)-shaped VMEM ref"):
        lower_to_mosaic(kernel(scalar_scratch, (1,), [], [spec((8, 128), F32)]))
