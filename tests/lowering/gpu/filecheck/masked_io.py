# ruff: noqa: E501  (FileCheck patterns quote whole MLIR lines)
# Masked load/store in the IR map onto Triton's masks: the lanes past 40 read `other` and the
# odd lanes are not written, each mask and-ed with the overhanging last block's bound (100
# elements in blocks of 64).
# RUN: minipallas-opt %s --emit=gpu | filecheck %s

# CHECK: %[[KEEP:.*]] = arith.cmpi slt, %{{.*}} : tensor<64xi32>
# CHECK: %[[BOTH:.*]] = arith.andi %[[KEEP]], %[[BOUND:.*]] : tensor<64xi1>
# CHECK: tt.load %{{.*}}, %[[BOTH]], %{{.*}} : tensor<64x!tt.ptr<f32>>
# CHECK: %[[W:.*]] = arith.andi %{{.*}}, %[[BOUND]] : tensor<64xi1>
# CHECK-NEXT: tt.store %{{.*}}, %{{.*}}, %[[W]] : tensor<64x!tt.ptr<f32>>

import minipallas as mp


def kernel(x_ref, o_ref):
    cols = mp.numpy.broadcasted_iota(mp.numpy.int32, (64,), 0)
    keep = cols < 40
    x = mp.load(x_ref, (slice(None),), mask=keep, other=-1.0)
    mp.store(o_ref, (slice(None),), x * 2.0, mask=cols % 2 == 0)


f32 = mp.ArrayType((100,), "float32")
spec = mp.BlockSpec((64,), lambda i: (i,))
KERNEL = mp.pallas_call(kernel, f32, grid=(2,), in_specs=[spec], out_specs=spec)
ARGS = (f32,)
