# ruff: noqa: E501  (FileCheck patterns quote whole MLIR lines)
# A blocked matmul's four k-steps are traced one after another, not as a loop (unrolling): each
# step is a dot of 512x128x512 and an add, and XLA runs the four dots side by side.
# RUN: minipallas-opt %s --emit=stablehlo | filecheck %s

# CHECK-LABEL: func.func @main
# CHECK-NOT: stablehlo.while
# Each step's index reaches the body through an optimization barrier, as a loop variable would:
# XLA folds no float arithmetic with it that upstream's loop keeps.
# CHECK: %[[K0:[0-9]+]] = stablehlo.optimization_barrier %c{{[_0-9]*}} : tensor<i32>
# CHECK: call @matmul_batched(%{{[0-9]+}}, %{{[0-9]+}}, %[[K0]], {{.*}}tensor<4x128x128xf32>, tensor<128x4x128xf32>, tensor<4x128x4x128xf32>, tensor<4x128x4x128xf32>)
# CHECK: %[[K1:[0-9]+]] = stablehlo.optimization_barrier %c{{[_0-9]*}} : tensor<i32>
# CHECK: call @matmul_batched(%{{[0-9]+}}, %{{[0-9]+}}, %[[K1]],
# CHECK: %[[K2:[0-9]+]] = stablehlo.optimization_barrier %c{{[_0-9]*}} : tensor<i32>
# CHECK: call @matmul_batched(%{{[0-9]+}}, %{{[0-9]+}}, %[[K2]],
# CHECK: %[[K3:[0-9]+]] = stablehlo.optimization_barrier %c{{[_0-9]*}} : tensor<i32>
# CHECK: call @matmul_batched(%{{[0-9]+}}, %{{[0-9]+}}, %[[K3]],
# CHECK-NOT: call @matmul_batched
# CHECK: return
# CHECK-LABEL: func.func private @matmul_batched
# CHECK: stablehlo.dot_general

import minipallas as mp

x = mp.ArrayType((512, 512), "float32")


def matmul(x_ref, y_ref, o_ref, acc_ref):
    @mp.when(mp.program_id(2) == 0)
    def _():
        acc_ref[...] = mp.numpy.zeros(acc_ref.shape, mp.numpy.float32)

    acc_ref[...] += mp.numpy.dot(x_ref[...], y_ref[...])

    @mp.when(mp.program_id(2) == mp.num_programs(2) - 1)
    def _():
        o_ref[...] = acc_ref[...]


KERNEL = mp.pallas_call(
    matmul,
    x,
    grid=(4, 4, 4),
    in_specs=[
        mp.BlockSpec((128, 128), lambda i, j, k: (i, k)),
        mp.BlockSpec((128, 128), lambda i, j, k: (k, j)),
    ],
    out_specs=mp.BlockSpec((128, 128), lambda i, j, k: (i, j)),
    scratch_shapes=[mp.tpu.VMEM((128, 128), mp.numpy.float32)],
)
ARGS = (x, x)
