# ruff: noqa: E501  (FileCheck patterns quote whole IR lines)
# A kernel's way to its CPU program, stage by stage: --print-ir-after-all names each registered
# pass the kernel path runs (bind-grid, discharge, cleanup, drop-inputs, cleanup,
# hoist-invariant), then batch-grid and cpu-program, then the target's own pipeline. The row sum
# reads its input block and no state, so hoist-invariant cuts it out of the loop over j, whose
# four steps of adds are then traced one after another (unrolling); the same passes from the command line print the same body. Without --emit (and no
# --pass-pipeline) the stages down to the CPU program are shown, then the program.
# RUN: minipallas-opt %s --emit=stablehlo --print-ir-after-all | filecheck %s
# RUN: minipallas-opt %s --print-ir-after-all | filecheck %s --check-prefix=BARE
# RUN: minipallas-opt %s --pass-pipeline="bind-grid{grid=2x4},discharge,cleanup,drop-inputs{count=1},cleanup,hoist-invariant{grid=2x4,inputs=1}" \
# RUN:   | filecheck %s --check-prefix=PIPE

# CHECK:      // -----// IR Dump After bind-grid //----- //
# CHECK-NEXT: func @row_sum(%0: i32[], %1: i32[], %2: Ref{f32[8,1024]}, %3: Ref{f32[8,1]}) -> ()
# CHECK:      // -----// IR Dump After discharge //----- //
# CHECK-NEXT: func @row_sum(%0: i32[], %1: i32[], %2: f32[8,1024], %3: f32[8,1]) -> (f32[8,1024], f32[8,1]) {
# CHECK:      // -----// IR Dump After cleanup //----- //
# CHECK:      // -----// IR Dump After drop-inputs //----- //
# CHECK-NEXT: func @row_sum(%0: i32[], %1: i32[], %2: f32[8,1024], %3: f32[8,1]) -> (f32[8,1]) {
# CHECK:      // -----// IR Dump After cleanup //----- //
# CHECK:      // -----// IR Dump After hoist-invariant //----- //
# CHECK-NEXT: func @row_sum_pre(%0: i32[], %1: i32[], %2: f32[8,1024]) -> (f32[8,1]) {
# CHECK:      func @row_sum(%0: i32[], %1: i32[], %2: f32[8,1024], %3: f32[8,1]) -> (f32[8,1]) {
# CHECK-NEXT:   call @row_sum_pre(%0, %1, %2)
# CHECK-NEXT:   call @row_sum_post(%0, %1, %2, %3, %4)
# CHECK:      // -----// IR Dump After batch-grid //----- //
# CHECK-NEXT: func @row_sum_post_batched(%0: i32[2], %1: i32[], %2: f32[2,8,1024], %3: f32[2,8,1], %4: f32[2,8,1]) -> (f32[2,8,1]) {
# CHECK:      // -----// IR Dump After cpu-program //----- //
# CHECK:      func @row_sum_pre_batched(%0: i32[2], %1: i32[4], %2: f32[2,8,4,1024]) -> (f32[2,4,8,1]) {
# CHECK:      func @row_sum_grid(%0: f32[16,4096]) -> (f32[16,1]) {
# CHECK:        call @row_sum_pre_batched
# CHECK-NOT:    for
# CHECK-COUNT-4: call @row_sum_post_batched
# CHECK-NOT:    for
# CHECK:      // -----// IR Dump After collectives //----- //
# CHECK:      // -----// IR Dump After discharge //----- //
# CHECK:      // -----// IR Dump After cleanup //----- //
# CHECK:      module

# BARE:      // -----// IR Dump After bind-grid //----- //
# BARE:      // -----// IR Dump After discharge //----- //
# BARE:      // -----// IR Dump After cleanup //----- //
# BARE:      // -----// IR Dump After drop-inputs //----- //
# BARE:      // -----// IR Dump After cleanup //----- //
# BARE:      // -----// IR Dump After hoist-invariant //----- //
# BARE:      // -----// IR Dump After batch-grid //----- //
# BARE:      // -----// IR Dump After cpu-program //----- //
# BARE:      func @row_sum_grid(%0: f32[16,4096]) -> (f32[16,1]) {
# BARE-NOT:  IR Dump
# BARE:      func @row_sum_grid(%0: f32[16,4096]) -> (f32[16,1]) {

# PIPE-LABEL: func @row_sum_pre(%0: i32[], %1: i32[], %2: f32[8,1024]) -> (f32[8,1]) {
# PIPE-NEXT:    reduce_sum %2, axes (1) : f32[8]
# PIPE-LABEL: func @row_sum_post(
# PIPE-LABEL: func @row_sum(
# PIPE-NEXT:    call @row_sum_pre(%0, %1, %2)

import minipallas as mp
import minipallas.numpy as mnp


def row_sum(x_ref, o_ref):
    @mp.when(mp.program_id(1) == 0)
    def _():
        o_ref[...] = mnp.zeros(o_ref.shape, mnp.float32)

    o_ref[...] += x_ref[...].sum(axis=1, keepdims=True)


KERNEL = mp.pallas_call(
    row_sum,
    mp.ArrayType((16, 1), "float32"),
    grid=(2, 4),
    in_specs=[mp.BlockSpec((8, 1024), lambda i, j: (i, j))],
    out_specs=mp.BlockSpec((8, 1), lambda i, j: (i, 0)),
)
ARGS = (mp.ArrayType((16, 4096), "float32"),)
