# ruff: noqa: E501  (FileCheck patterns quote whole MLIR lines)
# Independent grid points run as one program: the blocks stay where they lie in memory, viewed
# as (blocks, block) pairs, so a bias-add kernel is a reshape, one broadcast and one add.
# RUN: minipallas-opt %s --emit=stablehlo | filecheck %s

# CHECK-LABEL: func.func @main(%arg0: tensor<64x256xf32>{{.*}}, %arg1: tensor<1x256xf32>{{.*}}) -> tensor<64x256xf32>
# CHECK-NOT: stablehlo.while
# CHECK: stablehlo.reshape %arg0 : (tensor<64x256xf32>) -> tensor<8x8x2x128xf32>
# CHECK: stablehlo.reshape %arg1 : (tensor<1x256xf32>) -> tensor<1x2x128xf32>
# CHECK: call @bias_add_batched
# CHECK: stablehlo.reshape {{.*}} : (tensor<8x8x2x128xf32>) -> tensor<64x256xf32>
# CHECK-LABEL: func.func private @bias_add_batched
# CHECK-NOT: stablehlo.transpose
# CHECK: stablehlo.broadcast_in_dim %arg3, dims = [1, 2, 3] : (tensor<1x2x128xf32>) -> tensor<8x8x2x128xf32>
# CHECK-NEXT: stablehlo.add %arg2, {{.*}} : tensor<8x8x2x128xf32>

import minipallas as mp

x = mp.ArrayType((64, 256), "float32")
b = mp.ArrayType((1, 256), "float32")


def bias_add(x_ref, b_ref, o_ref):
    o_ref[...] = x_ref[...] + b_ref[...]


KERNEL = mp.pallas_call(
    bias_add,
    x,
    grid=(8, 2),
    in_specs=[
        mp.BlockSpec((8, 128), lambda i, j: (i, j)),
        mp.BlockSpec((1, 128), lambda i, j: (0, j)),
    ],
    out_specs=mp.BlockSpec((8, 128), lambda i, j: (i, j)),
)
ARGS = (x, b)
