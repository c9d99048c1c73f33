# ruff: noqa: E501  (FileCheck patterns quote whole MLIR lines)
# 20x300 in 8x128 blocks: loads read the fill value past the end, stores are masked.
# RUN: minipallas-opt %s --emit=gpu | filecheck %s

# CHECK: arith.cmpi slt
# CHECK: %[[M:.*]] = arith.andi %{{.*}}, %{{.*}} : tensor<8x128xi1>
# CHECK: %[[NAN:.*]] = arith.bitcast %{{.*}} : i32 to f32
# CHECK: tt.load %{{.*}}, %[[M]], %{{.*}} : tensor<8x128x!tt.ptr<f32>>
# CHECK: tt.load %{{.*}}, %[[M]], %{{.*}} : tensor<8x128x!tt.ptr<f32>>
# CHECK: tt.store %{{.*}}, %{{.*}}, %[[M]] : tensor<8x128x!tt.ptr<f32>>

import minipallas as mp


def add(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


f32 = mp.ArrayType((20, 300), "float32")
spec = mp.BlockSpec((8, 128), lambda i, j: (i, j))
KERNEL = mp.pallas_call(add, f32, grid=(3, 3), in_specs=[spec, spec], out_specs=spec)
ARGS = (f32, f32)
