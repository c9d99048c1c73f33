# ruff: noqa: E501  (FileCheck patterns quote whole lines)
# reassociate-sums (optimize="fast"): a float sum added into one output every grid step becomes
# partial sums in a block-shaped scratch buffer, zeroed at the first step and reduced into the
# output at the last (CHECK); with window_bytes, 16 blocks a step (WINDOW). The call is at
# optimize="fast", so its Mosaic module has the partial sums as scratch, fused (MOSAIC).
# RUN: minipallas-opt %s --pass-pipeline='reassociate-sums' | filecheck %s
# RUN: minipallas-opt %s --pass-pipeline='reassociate-sums{window_bytes=65536}' | filecheck %s --check-prefix=WINDOW
# RUN: minipallas-opt %s --emit=tpu | filecheck %s --check-prefix=MOSAIC

# CHECK: kernel sum_1d: grid (64,)
# CHECK-LABEL: func @sum_1d(%0: Ref{f32[1024]}, %1: Ref{f32[1]}, %2: Ref{f32[1024]})
# CHECK: %[[PID:.*]] = program_id axis 0 : i32[]
# CHECK-NEXT: %[[ZERO:.*]] = constant 0 : i32[]
# CHECK-NEXT: %[[FIRST:.*]] = eq %[[PID]], %[[ZERO]] : bool[]
# CHECK: cond %{{.*}} (%2) [{
# CHECK: broadcast_in_dim %{{.*}}, dims () : f32[1024]
# CHECK-NEXT: swap %{{.*}}[:], %{{.*}} : f32[1024]
# CHECK: %[[X:.*]] = get %0[:] : f32[1024]
# CHECK-NEXT: %[[ACC:.*]] = get %2[:] : f32[1024]
# CHECK-NEXT: %[[SUM:.*]] = add %[[ACC]], %[[X]] : f32[1024]
# CHECK-NEXT: swap %2[:], %[[SUM]] : f32[1024]
# CHECK-NEXT: program_id axis 0
# CHECK-NEXT: constant 63 : i32[]
# CHECK: cond %{{.*}} (%1, %2) [{
# CHECK: }, {
# CHECK-NEXT: ^(%[[O:.*]]: Ref{f32[1]}, %[[A:.*]]: Ref{f32[1024]}):
# CHECK-NEXT: %[[ALL:.*]] = get %[[A]][:] : f32[1024]
# CHECK-NEXT: %[[TOTAL:.*]] = reduce_sum %[[ALL]], axes (0) : f32[]
# CHECK-NEXT: %[[ONE:.*]] = reshape %[[TOTAL]] : f32[1]
# CHECK-NEXT: %[[HELD:.*]] = get %[[O]][:] : f32[1]
# CHECK-NEXT: %[[NEW:.*]] = add %[[HELD]], %[[ONE]] : f32[1]
# CHECK-NEXT: swap %[[O]][:], %[[NEW]] : f32[1]
# CHECK-NOT: reduce_sum

# WINDOW: kernel sum_1d: grid (4,)
# WINDOW-NEXT: input 0: f32[65536] in blocks [16384], index map:
# WINDOW-LABEL: func @sum_1d(%0: Ref{f32[16384]}, %1: Ref{f32[1]}, %2: Ref{f32[16384]})
# WINDOW: %[[X:.*]] = get %0[:] : f32[16384]
# WINDOW-NEXT: %[[ACC:.*]] = get %2[:] : f32[16384]
# WINDOW-NEXT: add %[[ACC]], %[[X]] : f32[16384]
# WINDOW: constant 3 : i32[]
# WINDOW: reduce_sum %{{.*}}, axes (0) : f32[]

# MOSAIC: func.func @sum_1d({{.*}}, %arg3: memref<1024xf32, #tpu.memory_space<vmem>>)
# MOSAIC-SAME: scratch_operands = 1
# MOSAIC: arith.addf %{{.*}}, %{{.*}} : vector<1024xf32>
# MOSAIC: vector.multi_reduction <add>, %{{.*}}, %{{.*}} [1] : vector<1x1024xf32> to vector<1xf32>

import minipallas as mp
import minipallas.numpy as jnp


def sum_1d(x_ref, o_ref):
    @mp.when(mp.program_id(0) == 0)
    def _():
        o_ref[...] = jnp.zeros(o_ref.shape, jnp.float32)

    o_ref[...] += x_ref[...].sum(keepdims=True)


KERNEL = mp.pallas_call(
    sum_1d,
    mp.ArrayType((1,), "float32"),
    grid=(64,),
    in_specs=[mp.BlockSpec((1024,), lambda i: (i,))],
    out_specs=mp.BlockSpec((1,), lambda i: (0,)),
    optimize="fast",  # what --emit=tpu lowers at
)
ARGS = (mp.ArrayType((64 * 1024,), "float32"),)
