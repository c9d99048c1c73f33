# ruff: noqa: E501  (FileCheck patterns quote whole MLIR lines)
# Fast mode sums a sequential axis that only accumulates: a blocked matmul's eight k steps of
# 128-wide dots become one dot contracting over all 1024 of k, with no loop left.
# RUN: minipallas-opt %s --emit=stablehlo | filecheck %s

# CHECK-LABEL: func.func @main(%arg0: tensor<256x1024xf32>{{.*}}, %arg1: tensor<1024x256xf32>{{.*}}) -> tensor<256x256xf32>
# CHECK-NOT: stablehlo.while
# CHECK: stablehlo.dot_general {{.*}} contracting_dims = [1] x [0]{{.*}} : (tensor<256x1024xf32>, tensor<1024x256xf32>) -> tensor<256x256xf32>
# CHECK-NOT: stablehlo.dot_general
# CHECK-NOT: stablehlo.while

import minipallas as mp
import minipallas.numpy as mnp

x = mp.ArrayType((256, 1024), "float32")
y = mp.ArrayType((1024, 256), "float32")


def matmul(x_ref, y_ref, o_ref, acc_ref):
    @mp.when(mp.program_id(2) == 0)
    def _():
        acc_ref[...] = mnp.zeros(acc_ref.shape, mnp.float32)

    acc_ref[...] += mnp.dot(x_ref[...], y_ref[...])

    @mp.when(mp.program_id(2) == mp.num_programs(2) - 1)
    def _():
        o_ref[...] = acc_ref[...]


KERNEL = mp.pallas_call(
    matmul,
    mp.ArrayType((256, 256), "float32"),
    grid=(2, 2, 8),
    in_specs=[
        mp.BlockSpec((128, 128), lambda i, j, k: (i, k)),
        mp.BlockSpec((128, 128), lambda i, j, k: (k, j)),
    ],
    out_specs=mp.BlockSpec((128, 128), lambda i, j, k: (i, j)),
    scratch_shapes=[mp.tpu.VMEM((128, 128), "float32")],
    match_upstream=False,
)
ARGS = (x, y)
