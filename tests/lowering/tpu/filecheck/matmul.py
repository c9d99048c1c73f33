# ruff: noqa: E501  (FileCheck patterns quote whole MLIR lines)
# A blocked matmul as a kernel file for minipallas-opt.
# RUN: minipallas-opt %s --emit=tpu | filecheck %s
# RUN: minipallas-opt %s --emit=tpu --locations | filecheck %s --check-prefix=LOC
# RUN: minipallas-opt %s --emit=stablehlo | filecheck %s --check-prefix=CPU

# CHECK-LABEL: func.func @matmul(%arg0: i32, %arg1: i32, %arg2: i32, %arg3: memref<128x128xbf16, #tpu.memory_space<vmem>>
# CHECK-SAME: dimension_semantics = [#tpu.dimension_semantics<parallel>, #tpu.dimension_semantics<parallel>, #tpu.dimension_semantics<arbitrary>]
# CHECK-SAME: iteration_bounds = array<i64: 2, 2, 4>
# CHECK-SAME: scratch_operands = 1 : i64
# CHECK: scf.if
# CHECK: tpu.matmul {{.*}} : vector<128x128xbf16>, vector<128x128xbf16>, vector<128x128xf32> -> vector<128x128xf32>
# CHECK: arith.truncf {{.*}} : vector<128x128xf32> to vector<128x128xbf16>
# CHECK-LABEL: func.func @transform_0
# CHECK-NEXT: return %arg0, %arg2

# LOC: tpu.matmul {{.*}} loc(#[[DOT:loc[0-9]+]])
# LOC: #[[LINE:loc[0-9]+]] = loc("{{.*}}matmul.py":34:0)
# LOC: #[[DOT]] = loc("dot"(#[[LINE]]))

# CPU: func.func @main(%arg0: tensor<256x512xbf16>, %arg1: tensor<512x256xbf16>) -> tensor<256x256xbf16>
# CPU: stablehlo.dot_general

import minipallas as mp
import minipallas.numpy as jnp
from minipallas import tpu


def matmul(x_ref, y_ref, o_ref, acc_ref):
    @mp.when(mp.program_id(2) == 0)
    def _():
        acc_ref[...] = jnp.zeros((128, 128), jnp.float32)

    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

    @mp.when(mp.program_id(2) == mp.num_programs(2) - 1)
    def _():
        o_ref[...] = acc_ref[...].astype(jnp.bfloat16)


KERNEL = mp.pallas_call(
    matmul,
    mp.ArrayType((256, 256), "bfloat16"),
    grid=(2, 2, 4),
    in_specs=[
        mp.BlockSpec((128, 128), lambda i, j, k: (i, k)),
        mp.BlockSpec((128, 128), lambda i, j, k: (k, j)),
    ],
    out_specs=mp.BlockSpec((128, 128), lambda i, j, k: (i, j)),
    scratch_shapes=[tpu.VMEM((128, 128), jnp.float32)],
)
ARGS = (mp.ArrayType((256, 512), "bfloat16"), mp.ArrayType((512, 256), "bfloat16"))
