"""Kernels as people write them, at the sizes they run them (issue 13's speed table), and two
small ones a prototyping user calls many times (<= 8 grid steps, <= 1 MiB: issue 27).

Each is a suite ``Case`` (tests/kernels/suite.py: one kernel source for minipallas and
upstream, through the ``ns`` namespace) with its plain ``jnp`` equivalent for ``jax.jit``:

- ``matmul_1024``: 1024³ in 128-blocks, an f32 scratch accumulator over the k axis (512 steps);
- ``softmax_4096``: rows of 4096×1024, 8 rows a block (512 steps);
- ``layer_norm_4096``: 4096×1024 with a gain row, 16 rows a block (256 steps);
- ``flash_attention``: S=2048, D=64, 128-blocks of queries × keys, online softmax in scratch
  (256 steps, the key axis sequential);
- ``reduce_1d``: a sum of 2²⁰ floats, 1024 at a step, into one resident output (1024 steps);
- ``masked_tanh``: tanh of 10⁶ floats, 1024 at a step, the partial last block masked with an
  iota (977 steps);
- ``matmul_small``: 256×384×512 in 128-blocks (24 steps, 3 along k);
- ``reduce_8k``: a sum of 8192 floats, 1024 at a step (8 steps).
"""

from __future__ import annotations

import numpy as np
from suite import Case, inputs, layer_norm, matmul, normal, softmax

N_TANH = 10**6


def flash_attention(ns, q_ref, k_ref, v_ref, o_ref, m_ref, l_ref, acc_ref):
    """One query block against one key block; running max, sum and output in scratch."""
    kv = ns.program_id(1)

    @ns.when(kv == 0)
    def _():
        m_ref[...] = ns.np.full(m_ref.shape, -np.inf, ns.np.float32)
        l_ref[...] = ns.np.zeros(l_ref.shape, ns.np.float32)
        acc_ref[...] = ns.np.zeros(acc_ref.shape, ns.np.float32)

    q = q_ref[...] * (1.0 / np.sqrt(q_ref.shape[1]))
    s = ns.np.dot(q, k_ref[...].T, preferred_element_type=ns.np.float32)
    m_old = m_ref[...]
    m_new = ns.np.maximum(m_old, s.max(axis=1, keepdims=True))
    p = ns.np.exp(s - m_new)
    rescale = ns.np.exp(m_old - m_new)
    l_ref[...] = l_ref[...] * rescale + p.sum(axis=1, keepdims=True)
    acc_ref[...] = acc_ref[...] * rescale + ns.np.dot(
        p, v_ref[...], preferred_element_type=ns.np.float32
    )
    m_ref[...] = m_new

    @ns.when(kv == ns.num_programs(1) - 1)
    def _():
        o_ref[...] = acc_ref[...] / l_ref[...]


def reduce_1d(ns, x_ref, o_ref):
    @ns.when(ns.program_id(0) == 0)
    def _():
        o_ref[...] = ns.np.zeros(o_ref.shape, ns.np.float32)

    o_ref[...] += x_ref[...].sum(keepdims=True)


def masked_tanh(ns, x_ref, o_ref):
    """The last block runs past the array's end: its padding is masked to 0 (and dropped)."""
    n = x_ref.shape[0]
    index = ns.broadcasted_iota(ns.np.int32, x_ref.shape, 0) + ns.program_id(0) * n
    o_ref[...] = ns.np.where(index < N_TANH, ns.np.tanh(x_ref[...]), 0.0)


def realistic_cases() -> list[Case]:
    n, s, d = 1024, 2048, 64
    return [
        Case(
            "matmul_1024",
            matmul,
            ((n, n), "float32"),
            inputs(normal(n, n), normal(n, n)),
            grid=(8, 8, 8),
            in_specs=[((128, 128), lambda i, j, k: (i, k)), ((128, 128), lambda i, j, k: (k, j))],
            out_specs=((128, 128), lambda i, j, k: (i, j)),
            scratch=(((128, 128), "float32"),),
        ),
        Case(
            "softmax_4096",
            softmax,
            ((4096, n), "float32"),
            inputs(normal(4096, n)),
            grid=(512,),
            in_specs=[((8, n), lambda i: (i, 0))],
            out_specs=((8, n), lambda i: (i, 0)),
        ),
        Case(
            "layer_norm_4096",
            layer_norm,
            ((4096, n), "float32"),
            inputs(normal(4096, n), normal(1, n)),
            grid=(256,),
            in_specs=[((16, n), lambda i: (i, 0)), ((1, n), lambda i: (0, 0))],
            out_specs=((16, n), lambda i: (i, 0)),
        ),
        Case(
            "flash_attention",
            flash_attention,
            ((s, d), "float32"),
            inputs(normal(s, d), normal(s, d), normal(s, d)),
            grid=(s // 128, s // 128),
            in_specs=[
                ((128, d), lambda i, j: (i, 0)),
                ((128, d), lambda i, j: (j, 0)),
                ((128, d), lambda i, j: (j, 0)),
            ],
            out_specs=((128, d), lambda i, j: (i, 0)),
            scratch=(((128, 1), "float32"), ((128, 1), "float32"), ((128, d), "float32")),
        ),
        Case(
            "reduce_1d",
            reduce_1d,
            ((1,), "float32"),
            inputs(normal(2**20)),
            grid=(1024,),
            in_specs=[((1024,), lambda i: (i,))],
            out_specs=((1,), lambda i: (0,)),
        ),
        Case(
            "masked_tanh",
            masked_tanh,
            ((N_TANH,), "float32"),
            inputs(normal(N_TANH)),
            grid=(-(-N_TANH // 1024),),
            in_specs=[((1024,), lambda i: (i,))],
            out_specs=((1024,), lambda i: (i,)),
        ),
        Case(
            "matmul_small",
            matmul,
            ((256, 512), "float32"),
            inputs(normal(256, 384), normal(384, 512)),
            grid=(2, 4, 3),
            in_specs=[((128, 128), lambda i, j, k: (i, k)), ((128, 128), lambda i, j, k: (k, j))],
            out_specs=((128, 128), lambda i, j, k: (i, j)),
            scratch=(((128, 128), "float32"),),
        ),
        Case(
            "reduce_8k",
            reduce_1d,
            ((1,), "float32"),
            inputs(normal(8192)),
            grid=(8,),
            in_specs=[((1024,), lambda i: (i,))],
            out_specs=((1,), lambda i: (0,)),
        ),
    ]


def _attention(jnp, q, k, v):
    s = (q * (1.0 / np.sqrt(q.shape[1]))) @ k.T
    e = jnp.exp(s - s.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)) @ v


REFERENCES = {
    "flash_attention": _attention,
    "reduce_1d": lambda jnp, x: x.sum(keepdims=True),
    "reduce_8k": lambda jnp, x: x.sum(keepdims=True),
    "masked_tanh": lambda jnp, x: jnp.tanh(x),
}
