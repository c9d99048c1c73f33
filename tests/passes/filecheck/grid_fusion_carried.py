# ruff: noqa: E501  (FileCheck patterns quote whole lines)
# fuse-grid-steps on flash attention, whose running max, sum and accumulator pass from step to
# step in scratch (%4, %5, %6). By default (VALUES) sub-step 0 runs as written (its pl.when
# resets the scratch in memory), then the fused step reads each buffer once, threads the values
# through the later sub-steps' calls (each a discharged copy of the old body, its pl.when a cond
# returning them) and writes each back once. Through VMEM (discharge_carried=false, LOOP)
# sub-step 0 is called and the rest run in a for loop; with the values in a loop (LOOPVALUES)
# they are the loop's carries.
# RUN: minipallas-opt %s --pass-pipeline='fuse-grid-steps{max_unroll=2,max_carried=0}' | filecheck %s --check-prefix=VALUES
# RUN: minipallas-opt %s --pass-pipeline='fuse-grid-steps{max_unroll=4,discharge_carried=false}' | filecheck %s --check-prefix=LOOP
# RUN: minipallas-opt %s --pass-pipeline='fuse-grid-steps{max_unroll=4,substep_loop=true,max_carried=0}' | filecheck %s --check-prefix=LOOPVALUES
# RUN: minipallas-opt %s --emit=tpu | filecheck %s --check-prefix=MOSAIC

# VALUES: kernel flash: grid (8, 4)
# VALUES-LABEL: func @flash_substep0(%0: Ref{f32[128,64]}, %1: Ref{f32[128,64]}, %2: Ref{f32[128,64]}, %3: Ref{f32[128,64]}, %4: Ref{f32[128,1], tpu.vmem}, %5: Ref{f32[128,1], tpu.vmem}, %6: Ref{f32[128,64], tpu.vmem}) -> () effects
# VALUES-LABEL: func @flash_substep1(%0: Ref{f32[128,64]}, %1: Ref{f32[128,64]}, %2: Ref{f32[128,64]}, %3: Ref{f32[128,64]}, %4: f32[128,1], %5: f32[128,1], %6: f32[128,64]) -> (f32[128,1], f32[128,1], f32[128,64]) effects {read 0, read 1, read 2, write 3} {
# VALUES: %[[M:.*]], %[[L:.*]], %[[ACC:.*]] = cond %{{.*}} (%4, %5, %6) [{
# VALUES-NEXT: ^(%[[M0:.*]]: f32[128,1], %[[L0:.*]]: f32[128,1], %[[A0:.*]]: f32[128,64]):
# VALUES-NEXT: yield %[[M0]], %[[L0]], %[[A0]]
# VALUES: }] : f32[128,1], f32[128,1], f32[128,64]
# VALUES-NOT: swap
# VALUES: cond
# VALUES: swap %{{.*}}[:, :], %{{.*}} : f32[128,64]
# VALUES-LABEL: func @flash(
# VALUES: call @flash_substep0(%0, %{{.*}}, %{{.*}}, %3, %4, %5, %6)
# VALUES-NEXT: %[[M:.*]] = get %4[:, :] : f32[128,1]
# VALUES-NEXT: %[[L:.*]] = get %5[:, :] : f32[128,1]
# VALUES-NEXT: %[[ACC:.*]] = get %6[:, :] : f32[128,64]
# VALUES-NOT: get
# VALUES: %[[M2:.*]], %[[L2:.*]], %[[ACC2:.*]] = call @flash_substep1(%0, %{{.*}}, %{{.*}}, %3, %[[M]], %[[L]], %[[ACC]])
# VALUES-NEXT: swap %4[:, :], %[[M2]] : f32[128,1]
# VALUES-NEXT: swap %5[:, :], %[[L2]] : f32[128,1]
# VALUES-NEXT: swap %6[:, :], %[[ACC2]] : f32[128,64]
# VALUES-NEXT: return

# LOOP: kernel flash: grid (8, 2)
# LOOP-LABEL: func @flash(
# LOOP-NEXT: ref.at %1[0:128, :]
# LOOP-NEXT: ref.at %2[0:128, :]
# LOOP-NEXT: call @flash_substep0(%0, %{{.*}}, %{{.*}}, %3, %4, %5, %6)
# LOOP-NEXT: %[[LO:.*]] = constant 1 : i32[]
# LOOP-NEXT: %[[HI:.*]] = constant 4 : i32[]
# LOOP-NEXT: for %[[LO]] to %[[HI]] (%0, %1, %2, %3, %4, %5, %6) {
# LOOP-NEXT: ^(%[[S:[0-9]+]]: i32[], {{.*}}):
# LOOP: ref.at %{{.*}}[ds(%{{.*}}, 128), :] : Ref{f32[128,64]}
# LOOP: program_id axis 1
# LOOP-NEXT: constant 4
# LOOP-NEXT: mul
# LOOP-NEXT: add %{{.*}}, %[[S]] : i32[]

# LOOPVALUES-LABEL: func @flash(
# LOOPVALUES: call @flash_substep0(%0, %{{.*}}, %{{.*}}, %3, %4, %5, %6)
# LOOPVALUES-NEXT: %[[M:.*]] = get %4[:, :] : f32[128,1]
# LOOPVALUES-NEXT: %[[L:.*]] = get %5[:, :] : f32[128,1]
# LOOPVALUES-NEXT: %[[ACC:.*]] = get %6[:, :] : f32[128,64]
# LOOPVALUES: %[[M2:.*]], %[[L2:.*]], %[[ACC2:.*]] = for %{{.*}} to %{{.*}} (%0, %1, %2, %3, %4, %5, %6) iter (%[[M]], %[[L]], %[[ACC]]) {
# LOOPVALUES: } : f32[128,1], f32[128,1], f32[128,64]
# LOOPVALUES-NEXT: swap %4[:, :], %[[M2]] : f32[128,1]
# LOOPVALUES-NEXT: swap %5[:, :], %[[L2]] : f32[128,1]
# LOOPVALUES-NEXT: swap %6[:, :], %[[ACC2]] : f32[128,64]

# By default: the 8 key steps whole, unrolled with the scratch in values, then 4 query blocks
# a step as sub-steps of their own
# MOSAIC: iteration_bounds = array<i64: 2, 1>
# MOSAIC-NOT: scf.for
# MOSAIC: tpu.memref_slice %arg3[%{{.*}}, %c0_i32] : memref<1024x64xf32, #tpu.memory_space<vmem>> -> memref<128x64xf32, #tpu.memory_space<vmem>>
# MOSAIC: tpu.matmul

import numpy as np

import minipallas as mp
import minipallas.numpy as jnp


def flash(q_ref, k_ref, v_ref, o_ref, m_ref, l_ref, acc_ref):
    kv = mp.program_id(1)

    @mp.when(kv == 0)
    def _():
        m_ref[...] = jnp.full(m_ref.shape, -np.inf, jnp.float32)
        l_ref[...] = jnp.zeros(l_ref.shape, jnp.float32)
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

    s = jnp.dot(q_ref[...], k_ref[...].T, preferred_element_type=jnp.float32)
    m_old = m_ref[...]
    m_new = jnp.maximum(m_old, s.max(axis=1, keepdims=True))
    p = jnp.exp(s - m_new)
    rescale = jnp.exp(m_old - m_new)
    l_ref[...] = l_ref[...] * rescale + p.sum(axis=1, keepdims=True)
    pv = jnp.dot(p, v_ref[...], preferred_element_type=jnp.float32)
    acc_ref[...] = acc_ref[...] * rescale + pv
    m_ref[...] = m_new

    @mp.when(kv == mp.num_programs(1) - 1)
    def _():
        o_ref[...] = acc_ref[...] / l_ref[...]


Q = mp.BlockSpec((128, 64), lambda i, j: (i, 0))
KV = mp.BlockSpec((128, 64), lambda i, j: (j, 0))
KERNEL = mp.pallas_call(
    flash,
    mp.ArrayType((1024, 64), "float32"),
    grid=(8, 8),
    in_specs=[Q, KV, KV],
    out_specs=Q,
    scratch_shapes=[mp.tpu.VMEM((128, 1), "float32")] * 2 + [mp.tpu.VMEM((128, 64), "float32")],
)
ARGS = (mp.ArrayType((1024, 64), "float32"),) * 3
