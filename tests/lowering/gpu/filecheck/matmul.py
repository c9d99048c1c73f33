# ruff: noqa: E501  (FileCheck patterns quote whole MLIR lines)
# Grid (i, j, k), k 'arbitrary': i, j are launched, k is a loop carrying the scratch
# accumulator as an iter_arg; the k == 0 init and the last-k store are scf.if.
# RUN: minipallas-opt %s --emit=gpu | filecheck %s

# CHECK: tt.get_program_id x
# CHECK: tt.get_program_id y
# CHECK-NOT: tt.get_program_id
# CHECK: %[[INIT:.*]] = tt.splat %{{.*}} : f32 -> tensor<32x128xf32>
# CHECK: scf.for %[[K:[a-z0-9]+]] = %{{[a-z0-9_]+}} to %{{[a-z0-9_]+}} step %{{[a-z0-9_]+}}
# CHECK-SAME: iter_args(%[[ACC:.*]] = %[[INIT]]) -> (tensor<32x128xf32>)  : i32
# CHECK: scf.if
# CHECK: tt.dot %{{.*}}, %{{.*}}, %{{.*}} : tensor<32x32xf32> * tensor<32x128xf32>
# CHECK: scf.if
# CHECK: tt.store
# CHECK: scf.yield
# CHECK-NOT: tt.load
# CHECK: tt.return

import minipallas as mp
import minipallas.numpy as jnp
from minipallas import tpu


def matmul(x_ref, y_ref, o_ref, acc_ref):
    @mp.when(mp.program_id(2) == 0)
    def _():
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

    @mp.when(mp.program_id(2) == mp.num_programs(2) - 1)
    def _():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


KERNEL = mp.pallas_call(
    matmul,
    mp.ArrayType((64, 256), "float32"),
    grid=(2, 2, 4),
    in_specs=[
        mp.BlockSpec((32, 32), lambda i, j, k: (i, k)),
        mp.BlockSpec((32, 128), lambda i, j, k: (k, j)),
    ],
    out_specs=mp.BlockSpec((32, 128), lambda i, j, k: (i, j)),
    scratch_shapes=[tpu.VMEM((32, 128), jnp.float32)],
    dimension_semantics=("parallel", "parallel", "arbitrary"),
)
ARGS = (mp.ArrayType((64, 128), "float32"), mp.ArrayType((128, 256), "float32"))
