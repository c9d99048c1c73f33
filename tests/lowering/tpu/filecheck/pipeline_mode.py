# ruff: noqa: E501  (FileCheck patterns quote whole MLIR lines)
# A block spec's pipeline_mode in the Mosaic module's window_params, as upstream's lowering emits
# it: Buffered(1) is synchronous, Buffered(2) double_buffered, a revisit mode its own entry, and
# a whole-array VMEM block (input 1) is synchronous whatever its spec says (Buffered(3) here:
# upstream forces Buffered(1) there, so it never refuses it). fuse-grid-steps (on by default for
# the TPU) makes the windows longer and keeps each mode; the CPU program ignores them all.
# RUN: minipallas-opt %s --emit=tpu | filecheck %s
# RUN: minipallas-opt %s --pass-pipeline='fuse-grid-steps{max_unroll=4}' | filecheck %s --check-prefix=KERNEL
# RUN: minipallas-opt %s --emit=stablehlo | filecheck %s --check-prefix=CPU

# CHECK-LABEL: func.func @scaled
# CHECK-SAME: window_params = [{pipeline_mode = #tpu.pipeline_mode<synchronous>, transform_indices = @transform_0, window_bounds = array<i64: {{[0-9]+}}, 128>}, {pipeline_mode = #tpu.pipeline_mode<synchronous>, transform_indices = @transform_1, window_bounds = array<i64: 1, 128>}, {pipeline_mode = #tpu.pipeline_mode<double_buffered>, revisit_mode = #tpu.revisit_mode<immediate>, transform_indices = @transform_2, window_bounds = array<i64: {{[0-9]+}}, 128>}]

# KERNEL: kernel scaled: grid (16,)
# KERNEL-NEXT: input 0: f32[512,128] in blocks [32x128] Buffered(1), index map:
# KERNEL: input 1: f32[1,128] in blocks [1x128] Buffered(3), index map:
# KERNEL: output 0: f32[512,128] in blocks [32x128] Buffered(2, revisit=IMMEDIATE), index map:

# CPU: func.func @main(%arg0: tensor<512x128xf32>, %arg1: tensor<1x128xf32>) -> tensor<512x128xf32>
# CPU-NOT: pipeline

import minipallas as mp


def scaled(x_ref, s_ref, o_ref):
    o_ref[...] = x_ref[...] * s_ref[...]


ROWS = mp.BlockSpec((8, 128), lambda i: (i, 0), pipeline_mode=mp.Buffered(1))
SCALE = mp.BlockSpec((1, 128), lambda i: (0, 0), pipeline_mode=mp.Buffered(3))
OUT = mp.BlockSpec(
    (8, 128), lambda i: (i, 0), pipeline_mode=mp.Buffered(2, revisit=mp.RevisitMode.IMMEDIATE)
)
KERNEL = mp.pallas_call(
    scaled, mp.ArrayType((512, 128), "float32"), grid=(64,), in_specs=[ROWS, SCALE], out_specs=OUT
)
ARGS = (mp.ArrayType((512, 128), "float32"), mp.ArrayType((1, 128), "float32"))
