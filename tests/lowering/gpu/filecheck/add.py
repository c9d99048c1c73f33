# ruff: noqa: E501  (FileCheck patterns quote whole MLIR lines)
# Elementwise add over 8x128 blocks of a 64x256 array: operands are !tt.ptr arguments, a block
# is a tensor of pointers (the block offset plus a broadcast range), loaded, added and stored.
# RUN: minipallas-opt %s --emit=gpu | filecheck %s

# CHECK: tt.func public @add(%[[X:[a-z0-9]+]]: !tt.ptr<f32> {tt.divisibility = 32 : i32},
# CHECK-SAME: %[[Y:[a-z0-9]+]]: !tt.ptr<f32> {tt.divisibility = 32 : i32},
# CHECK-SAME: %[[O:[a-z0-9]+]]: !tt.ptr<f32> {tt.divisibility = 32 : i32})
# CHECK-NEXT: %[[I:.*]] = tt.get_program_id x : i32
# CHECK-NEXT: %[[J:.*]] = tt.get_program_id y : i32
# CHECK: tt.make_range {end = 8 : i32, start = 0 : i32} : tensor<8xi32>
# CHECK: tt.expand_dims
# CHECK: tt.broadcast
# CHECK: %[[PX:.*]] = tt.addptr %[[X]], %[[OFF:.*]] : !tt.ptr<f32>, i32
# CHECK-NEXT: tt.splat %[[PX]] : !tt.ptr<f32> -> tensor<8x128x!tt.ptr<f32>>
# CHECK: %[[A:.*]] = tt.load %{{.*}} : tensor<8x128x!tt.ptr<f32>>
# CHECK: tt.addptr %[[Y]], %[[OFF]]
# CHECK: %[[B:.*]] = tt.load
# CHECK: %[[S:.*]] = arith.addf %[[A]], %[[B]] : tensor<8x128xf32>
# CHECK: tt.addptr %[[O]], %[[OFF]]
# CHECK-NOT: tt.load
# CHECK: tt.store %{{.*}}, %[[S]] : tensor<8x128x!tt.ptr<f32>>
# CHECK-NEXT: tt.return

import minipallas as mp


def add(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


f32 = mp.ArrayType((64, 256), "float32")
spec = mp.BlockSpec((8, 128), lambda i, j: (i, j))
KERNEL = mp.pallas_call(add, f32, grid=(8, 2), in_specs=[spec, spec], out_specs=spec)
ARGS = (f32, f32)
