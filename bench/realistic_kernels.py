"""Kernels as people write them, at the sizes they run them (issue 13's speed table), and two
small ones a prototyping user calls many times (<= 8 grid steps, <= 1 MiB: issue 27).

Each is a suite ``Case`` (minipallas/tools/corpora/suite.py: one kernel source for minipallas and
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

from minipallas.tools.corpora.suite import Case, inputs, layer_norm, matmul, normal, softmax

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


def masked_tanh_of(length: int):
    """tanh of ``length`` floats: the last block runs past the array's end, its padding masked
    to 0 (and dropped)."""

    def masked_tanh(ns, x_ref, o_ref):
        n = x_ref.shape[0]
        index = ns.broadcasted_iota(ns.np.int32, x_ref.shape, 0) + ns.program_id(0) * n
        o_ref[...] = ns.np.where(index < length, ns.np.tanh(x_ref[...]), 0.0)

    return masked_tanh


masked_tanh = masked_tanh_of(N_TANH)
# (matmul n, softmax/layer norm rows, attention S, reduce length, tanh length): the sizes above,
# and the chip bench's ``--large`` ones: the same kernels and blocks over 8-16x the grid steps,
# so the chip's per-call cost (~0.11 ms) does not hide them
SIZES = {False: (1024, 4096, 2048, 2**20, N_TANH), True: (2048, 32768, 8192, 2**24, 16 * N_TANH)}


def realistic_cases(large: bool = False) -> list[Case]:
    """The eight kernels (module doc); ``large``: the first six at ``SIZES[True]``."""
    n, rows, s, reduced, tanh = SIZES[large]
    made = [*_blocked_rows(n, rows), *_long_axes(s, reduced, tanh, large)]
    return made if large else [*made, *_small()]


def _blocked_rows(n: int, rows: int) -> list[Case]:
    """The matmul, softmax and layer norm."""
    return [
        Case(
            f"matmul_{n}",
            matmul,
            ((n, n), "float32"),
            inputs(normal(n, n), normal(n, n)),
            grid=(n // 128,) * 3,
            in_specs=[((128, 128), lambda i, j, k: (i, k)), ((128, 128), lambda i, j, k: (k, j))],
            out_specs=((128, 128), lambda i, j, k: (i, j)),
            scratch=(((128, 128), "float32"),),
        ),
        Case(
            f"softmax_{rows}",
            softmax,
            ((rows, 1024), "float32"),
            inputs(normal(rows, 1024)),
            grid=(rows // 8,),
            in_specs=[((8, 1024), lambda i: (i, 0))],
            out_specs=((8, 1024), lambda i: (i, 0)),
        ),
        Case(
            f"layer_norm_{rows}",
            layer_norm,
            ((rows, 1024), "float32"),
            inputs(normal(rows, 1024), normal(1, 1024)),
            grid=(rows // 16,),
            in_specs=[((16, 1024), lambda i: (i, 0)), ((1, 1024), lambda i: (0, 0))],
            out_specs=((16, 1024), lambda i: (i, 0)),
        ),
    ]


def _long_axes(s: int, reduced: int, tanh: int, large: bool) -> list[Case]:
    """Flash attention over ``s`` positions, a sum and a masked tanh over long vectors."""
    d = 64
    return [
        Case(
            "flash_attention" if not large else f"flash_attention_d64_{s}",
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
            "reduce_1d" if not large else f"reduce_1d_{reduced}",
            reduce_1d,
            ((1,), "float32"),
            inputs(normal(reduced)),
            grid=(reduced // 1024,),
            in_specs=[((1024,), lambda i: (i,))],
            out_specs=((1,), lambda i: (0,)),
        ),
        Case(
            "masked_tanh" if not large else f"masked_tanh_{tanh}",
            masked_tanh if not large else masked_tanh_of(tanh),
            ((tanh,), "float32"),
            inputs(normal(tanh)),
            grid=(-(-tanh // 1024),),
            in_specs=[((1024,), lambda i: (i,))],
            out_specs=((1024,), lambda i: (i,)),
        ),
    ]


def _small() -> list[Case]:
    """Two small kernels, as a prototyping user calls them (module doc)."""
    return [
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
