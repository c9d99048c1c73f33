# ruff: noqa: E501  (FileCheck patterns quote whole MLIR lines)
# Row-wise logsumexp over column blocks, the running max and sum in scratch: axis 0 is
# launched, the revisited output's axis 1 is a loop carrying both scratch buffers.
# RUN: minipallas-opt %s --emit=gpu | filecheck %s

# CHECK: tt.get_program_id x
# CHECK: scf.for {{.*}} iter_args({{.*}}) -> (tensor<16x1xf32>, tensor<16x1xf32>)
# CHECK: tt.reduce
# CHECK: tt.extern_elementwise {{.*}}symbol = "__nv_expf"
# CHECK: scf.yield

import minipallas as mp
import minipallas.numpy as jnp
from minipallas import tpu


def logsumexp_online(x_ref, o_ref, m_ref, s_ref):
    j = mp.program_id(1)

    @mp.when(j == 0)
    def _():
        m_ref[...] = jnp.full(m_ref.shape, -float("inf"), jnp.float32)
        s_ref[...] = jnp.zeros(s_ref.shape, jnp.float32)

    x = x_ref[...]
    m_new = jnp.maximum(m_ref[...], x.max(axis=1, keepdims=True))
    s_ref[...] = s_ref[...] * jnp.exp(m_ref[...] - m_new) + jnp.exp(x - m_new).sum(
        axis=1, keepdims=True
    )
    m_ref[...] = m_new

    @mp.when(j == mp.num_programs(1) - 1)
    def _():
        o_ref[...] = m_ref[...] + jnp.log(s_ref[...])


KERNEL = mp.pallas_call(
    logsumexp_online,
    mp.ArrayType((32, 1), "float32"),
    grid=(2, 4),
    in_specs=[mp.BlockSpec((16, 128), lambda i, j: (i, j))],
    out_specs=mp.BlockSpec((16, 1), lambda i, j: (i, 0)),
    scratch_shapes=[tpu.VMEM((16, 1), jnp.float32), tpu.VMEM((16, 1), jnp.float32)],
)
ARGS = (mp.ArrayType((32, 512), "float32"),)
