# ruff: noqa: E501  (FileCheck patterns quote whole IR lines)
# minipallas-opt on a kernel file without --emit prints the kernel body's IR (block-shaped
# refs, program_id for the grid), and the text-IR flags work on it: --pass-pipeline,
# --print-ir-after-all, --print-effects. With --emit the target's own pipeline runs, so
# --pass-pipeline is refused (exit 2) rather than ignored; --print-effects still reports,
# the kernel body's effects and then those after each pass of the target's pipeline.
# RUN: minipallas-opt %s | filecheck %s
# RUN: minipallas-opt %s --print-effects | filecheck %s --check-prefix=EFF
# RUN: minipallas-opt %s --pass-pipeline=discharge,cleanup --print-ir-after-all \
# RUN:   | filecheck %s --check-prefix=PIPE
# RUN: minipallas-opt %s | minipallas-opt - | filecheck %s
# RUN: minipallas-opt %s --emit=stablehlo --print-effects | filecheck %s --check-prefix=HLO
# RUN: not minipallas-opt %s --emit=stablehlo --pass-pipeline=cleanup 2>&1 \
# RUN:   | filecheck %s --check-prefix=REFUSE

# CHECK-LABEL: func @scale(%0: Ref{f32[8,128]}, %1: Ref{f32[8,128]}) -> () effects {read 0, write 1} {
# CHECK: %[[X:.*]] = get %0[:, :] : f32[8,128]
# CHECK: program_id axis 0 : i32[]
# CHECK: %[[Y:.*]] = mul %[[X]], {{.*}} : f32[8,128]
# CHECK: swap %1[:, :], %[[Y]] : f32[8,128]

# EFF: // effects of @scale: {read 0, write 1}
# EFF-NEXT: func @scale(

# PIPE: // -----// IR Dump After discharge //----- //
# PIPE-NEXT: func @scale(%0: f32[8,128], %1: f32[8,128]) -> (f32[8,128], f32[8,128]) {
# PIPE: // -----// IR Dump After cleanup //----- //
# PIPE-NOT: Ref{
# PIPE: %[[Y:.*]] = mul %0, {{.*}} : f32[8,128]
# PIPE-NEXT: return %0, %[[Y]]

# HLO: // effects of @scale: {read 0, write 1}
# HLO: // -----// Effects After cleanup //----- //
# HLO: module {
# HLO-NEXT: func.func @main(%arg0: tensor<64x256xf32>)

# REFUSE: minipallas-opt: --pass-pipeline runs on the kernel's IR; --emit=stablehlo runs the target's own pipeline

import minipallas as mp

f32 = mp.ArrayType((64, 256), "float32")
spec = mp.BlockSpec((8, 128), lambda i, j: (i, j))


def scale(x_ref, o_ref):
    o_ref[...] = x_ref[...] * (mp.program_id(0) + 1).astype("float32")


KERNEL = mp.pallas_call(scale, f32, grid=(8, 2), in_specs=[spec], out_specs=spec)
ARGS = (f32,)
