"""Kernels beyond the shared suite that the GPU path is tested on: scratch in registers (the
two kinds upstream's Triton backend rejects) and masked loads/stores written in the IR."""

from __future__ import annotations

import numpy as np

import minipallas as mp
from minipallas.tools.corpora.suite import Case

INF = float("inf")


def softmax_scratch(ns, x_ref, o_ref, e_ref):
    """Softmax staged through a scratch buffer (one grid step uses it)."""
    x = x_ref[...]
    e_ref[...] = ns.np.exp(x - x.max(axis=1, keepdims=True))
    o_ref[...] = e_ref[...] / e_ref[...].sum(axis=1, keepdims=True)


def logsumexp_online(ns, x_ref, o_ref, m_ref, s_ref):
    """Row-wise logsumexp over column blocks: running max and sum in scratch, carried across
    grid axis 1 (the output block is revisited), written at the last step."""
    j = ns.program_id(1)

    @ns.when(j == 0)
    def _():
        m_ref[...] = ns.np.full(m_ref.shape, -INF, ns.np.float32)
        s_ref[...] = ns.np.zeros(s_ref.shape, ns.np.float32)

    x = x_ref[...]
    m_new = ns.np.maximum(m_ref[...], x.max(axis=1, keepdims=True))
    s_ref[...] = s_ref[...] * ns.np.exp(m_ref[...] - m_new) + ns.np.exp(x - m_new).sum(
        axis=1, keepdims=True
    )
    m_ref[...] = m_new

    @ns.when(j == ns.num_programs(1) - 1)
    def _():
        o_ref[...] = m_ref[...] + ns.np.log(s_ref[...])


def _normal(*shape):
    return lambda rng: (rng.standard_normal(shape, dtype=np.float32),)


EXTRA = [
    Case(
        "softmax_scratch", softmax_scratch, ((32, 128), "float32"), _normal(32, 128),
        grid=(4,), in_specs=[((8, 128), lambda i: (i, 0))], out_specs=((8, 128), lambda i: (i, 0)),
        scratch=(((8, 128), "float32"),),
    ),
    Case(
        "logsumexp_online", logsumexp_online, ((32, 1), "float32"), _normal(32, 512),
        grid=(2, 4), in_specs=[((16, 128), lambda i, j: (i, j))],
        out_specs=((16, 1), lambda i, j: (i, 0)),
        scratch=(((16, 1), "float32"), ((16, 1), "float32")),
    ),
]  # fmt: skip

NUMPY = {
    "softmax_scratch": lambda x: (
        (np.exp(x - x.max(1, keepdims=True)))
        / np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True)
    ),
    "logsumexp_online": lambda x: np.log(np.exp(x.astype(np.float64)).sum(1, keepdims=True)),
}


def masked_io_call() -> mp.kernels.pallas_call.PallasCall:
    """Masked ``load``/``store`` in the IR: the lanes past ``limit`` read ``other`` and are not
    written, on top of the overhanging last block (100 elements in blocks of 64)."""

    def kernel(x_ref, o_ref):
        cols = mp.numpy.broadcasted_iota(mp.numpy.int32, (64,), 0)
        keep = cols < 40
        x = mp.load(x_ref, (slice(None),), mask=keep, other=-1.0)
        mp.store(o_ref, (slice(None),), x * 2.0, mask=cols % 2 == 0)

    f32 = mp.ArrayType((100,), "float32")
    spec = mp.BlockSpec((64,), lambda i: (i,))
    return mp.pallas_call(kernel, f32, grid=(2,), in_specs=[spec], out_specs=spec)


def control_mix_call() -> mp.kernels.pallas_call.PallasCall:
    """``while_loop``, a three-way ``switch`` and partial, dynamic writes of scoped scratch: the
    control-flow rules and the register-array windows (``tt.gather`` + ``arith.select``)."""

    def kernel(x_ref, o_ref):
        i = mp.program_id(0)

        def body(c):
            k, acc = c
            return k + 1, acc * 0.5 + x_ref[...]

        zeros = mp.numpy.zeros((8, 128), mp.numpy.float32)
        _, acc = mp.while_loop(lambda c: c[0] < i + 2, body, (mp.numpy.int32(0), zeros))
        y = mp.switch(i, [lambda a: a + 1.0, lambda a: a * 2.0, lambda a: a - 3.0], acc)

        def scoped(t):
            t[...] = y
            t[2:4, :] = t[0:2, :] * 10.0
            t[mp.ds(i, 1), :] = t[6:7, :]
            o_ref[...] = t[...]

        mp.run_scoped(scoped, mp.tpu.VMEM((8, 128), "float32"))

    f32 = mp.ArrayType((32, 128), "float32")
    spec = mp.BlockSpec((8, 128), lambda i: (i, 0))
    return mp.pallas_call(kernel, f32, grid=(4,), in_specs=[spec], out_specs=spec)
