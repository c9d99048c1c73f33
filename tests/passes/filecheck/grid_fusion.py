# ruff: noqa: E501  (FileCheck patterns quote whole MLIR lines)
# fuse-grid-steps in the TPU target's pipeline: a softmax in 8-row blocks over 64 grid steps
# runs as 2 steps over windows of 256 rows, the body called once per old step with its rows.
# RUN: minipallas-opt %s --emit=tpu | filecheck %s
# RUN: minipallas-opt %s --emit=tpu --print-ir-after-all 2>&1 | filecheck %s --check-prefix=STAGES
# RUN: minipallas-opt %s --pass-pipeline='fuse-grid-steps{max_unroll=4}' | filecheck %s --check-prefix=KERNEL

# CHECK-LABEL: func.func @softmax(%arg0: i32, %arg1: memref<256x256xf32, #tpu.memory_space<vmem>>, %arg2: memref<256x256xf32, #tpu.memory_space<vmem>>)
# CHECK-SAME: dimension_semantics = [#tpu.dimension_semantics<parallel>]
# CHECK-SAME: iteration_bounds = array<i64: 2>
# CHECK-SAME: window_bounds = array<i64: 256, 256>
# CHECK: %[[IN:.*]] = tpu.memref_slice %arg1[%c0_i32, %c0_i32] : memref<256x256xf32, #tpu.memory_space<vmem>> -> memref<8x256xf32, #tpu.memory_space<vmem>>
# CHECK: vector.load %[[IN]][%c0, %c0] : memref<8x256xf32, #tpu.memory_space<vmem>>, vector<8x256xf32>
# CHECK: math.exp
# CHECK: tpu.vector_store {{.*}} : memref<8x256xf32, #tpu.memory_space<vmem>>, vector<8x256xf32>
# CHECK: tpu.memref_slice %arg1[%c8_i32, %c0_i32]
# CHECK-COUNT-31: math.exp
# CHECK-NOT: math.exp
# CHECK-LABEL: func.func @transform_0(%arg0: i32) -> (i32, i32)

# STAGES: IR Dump After fuse-grid-steps
# STAGES: func @softmax(%0: Ref{f32[256,256], tpu.vmem}, %1: Ref{f32[256,256], tpu.vmem})
# STAGES-NEXT: %2 = ref.at %0[0:8, :] : Ref{f32[8,256], tpu.vmem}
# STAGES-NEXT: %3 = ref.at %1[0:8, :] : Ref{f32[8,256], tpu.vmem}
# STAGES-NEXT: call @softmax_substep(%2, %3)
# STAGES-NEXT: %4 = ref.at %0[8:16, :] : Ref{f32[8,256], tpu.vmem}

# KERNEL: kernel softmax: grid (16,)
# KERNEL-NEXT: input 0: f32[512,256] in blocks [32x256], index map:
# KERNEL: %[[FIRST:.*]] = mul %0, %[[FOUR:.*]] : i32[]
# KERNEL: div %[[FIRST]], %[[FOUR]] : i32[]
# KERNEL: output 0: f32[512,256] in blocks [32x256], index map:
# KERNEL: func @softmax(%0: Ref{f32[32,256]}, %1: Ref{f32[32,256]})
# KERNEL-COUNT-4: call @softmax_substep(

import minipallas as mp
import minipallas.numpy as jnp


def softmax(x_ref, o_ref):
    x = x_ref[...]
    e = jnp.exp(x - x.max(axis=1, keepdims=True))
    o_ref[...] = e / e.sum(axis=1, keepdims=True)


SPEC = mp.BlockSpec((8, 256), lambda i: (i, 0))
KERNEL = mp.pallas_call(
    softmax, mp.ArrayType((512, 256), "float32"), grid=(64,), in_specs=[SPEC], out_specs=SPEC
)
ARGS = (mp.ArrayType((512, 256), "float32"),)
