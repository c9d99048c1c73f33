"""A float corpus for the difftest harness: Pallas kernels and jnp programs in f32 and bf16,
each with siblings carrying a small planted difference the harness must flag.

The kernels are upstream ``pl.pallas_call(..., interpret=True)`` calls (the import reads the
kernel, its grid and block specs): a tiled matmul accumulating in f32 scratch across the K
axis, a row softmax, a layer norm, flash-attention-style online softmax (running max and sum
in scratch across the KV axis), a 1-D sum across the grid and a masked ``tanh`` on a grid
whose block does not divide the array. The jnp programs read refs: softmax, logsumexp (ours,
max-subtracting, and ``jax.nn``'s), layer norm, attention and a matmul chain.

Inputs are standard normal from seeded generators; bf16 programs take bf16 inputs and
compute as jnp does. A base case runs its program on the inputs of each of ``SEEDS`` (one
program, every seed's results compared) and must agree with the interpreter, bit for bit or
within XLA's envelope. Each case (but jax.nn's, whose plants ours share) has one sibling whose
``plant`` (``plants.py``) changes the program the ``compile`` way runs: result 0 scaled by
1 + 2**-17 (bf16: 1 + 2**-4), layer norm's eps 1e-5 made 1e-6, or the first ``reduce_sum``
off by 0.01 (bf16: 0.25), sizes ``plants.SIZES`` explains. The harness must flag every
sibling: the envelope is tight.

This file is also a module of programs for the command line:
``minipallas-difftest minipallas/tools/corpora/float_corpus.py``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from minipallas.tools.corpora.plants import change_constant, offset_after, scale_result, sizes
from minipallas.tools.difftest import Case, ref

F32, BF16 = np.dtype(np.float32), np.dtype(ml_dtypes.bfloat16)
DTYPES = {"f32": F32, "bf16": BF16}
EPS = 1e-5


# -- the kernels ---------------------------------------------------------------------------


def _call(kernel, out, grid, in_specs, out_specs, scratch=(), name=None):
    """A jitted upstream ``pallas_call(..., interpret=True)``."""
    return jax.jit(
        pl.pallas_call(
            kernel,
            out,
            grid=grid,
            in_specs=in_specs,
            out_specs=out_specs,
            scratch_shapes=list(scratch),
            interpret=True,
            name=name or kernel.__name__,
        )
    )


def matmul_kernel(x_ref, y_ref, o_ref, acc_ref):
    """One (i, j) output tile, summed over k in f32 scratch; written out at the last k."""
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _():
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(2) - 1)
    def _():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def tiled_matmul(x, y):
    (m, kk), n, b = x.shape, y.shape[1], 32
    call = _call(
        matmul_kernel,
        jax.ShapeDtypeStruct((m, n), x.dtype),
        (m // b, n // b, kk // b),
        [
            pl.BlockSpec((b, b), lambda i, j, k: (i, k)),
            pl.BlockSpec((b, b), lambda i, j, k: (k, j)),
        ],
        pl.BlockSpec((b, b), lambda i, j, k: (i, j)),
        [pltpu.VMEM((b, b), jnp.float32)],
    )
    return call(x, y)


def softmax_kernel(x_ref, o_ref):
    """Softmax of each row of the block, in f32."""
    x = x_ref[...].astype(jnp.float32)
    e = jnp.exp(x - jnp.max(x, axis=1, keepdims=True))
    o_ref[...] = (e / jnp.sum(e, axis=1, keepdims=True)).astype(o_ref.dtype)


def row_softmax(x):
    spec = pl.BlockSpec((8, x.shape[1]), lambda i: (i, 0))
    out = jax.ShapeDtypeStruct(x.shape, x.dtype)
    return _call(softmax_kernel, out, (x.shape[0] // 8,), [spec], spec)(x)


def layer_norm_kernel(x_ref, g_ref, b_ref, o_ref):
    """Normalize each row (mean, then variance of the centred row), then scale and shift."""
    x = x_ref[...].astype(jnp.float32)
    n = x.shape[1]
    centred = x - jnp.sum(x, axis=1, keepdims=True) / n
    var = jnp.sum(centred * centred, axis=1, keepdims=True) / n
    y = centred * jax.lax.rsqrt(var + EPS)
    o_ref[...] = (y * g_ref[...].astype(jnp.float32) + b_ref[...].astype(jnp.float32)).astype(
        o_ref.dtype
    )


def layer_norm_pallas(x, g, b):
    rows = pl.BlockSpec((8, x.shape[1]), lambda i: (i, 0))
    whole = pl.BlockSpec((1, x.shape[1]), lambda i: (0, 0))
    out = jax.ShapeDtypeStruct(x.shape, x.dtype)
    return _call(layer_norm_kernel, out, (x.shape[0] // 8,), [rows, whole, whole], rows)(x, g, b)


def flash_kernel(q_ref, k_ref, v_ref, o_ref, m_ref, l_ref, acc_ref):
    """Online softmax over KV blocks: running max ``m``, running sum ``l`` and the weighted
    values ``acc`` in scratch, rescaled by ``exp(m_old - m_new)`` at each block."""
    kv = pl.program_id(1)

    @pl.when(kv == 0)
    def _():
        m_ref[...] = jnp.full(m_ref.shape, -jnp.inf, jnp.float32)
        l_ref[...] = jnp.zeros(l_ref.shape, jnp.float32)
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

    q, k = q_ref[...], k_ref[...]
    s = jax.lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
    s = s * (1.0 / np.sqrt(q.shape[1]))
    m_old = m_ref[...]
    m_new = jnp.maximum(m_old, jnp.max(s, axis=1, keepdims=True))
    p = jnp.exp(s - m_new)
    alpha = jnp.exp(m_old - m_new)
    l_ref[...] = alpha * l_ref[...] + jnp.sum(p, axis=1, keepdims=True)
    pv = jnp.dot(p.astype(v_ref.dtype), v_ref[...], preferred_element_type=jnp.float32)
    acc_ref[...] = alpha * acc_ref[...] + pv
    m_ref[...] = m_new

    @pl.when(kv == pl.num_programs(1) - 1)
    def _():
        o_ref[...] = (acc_ref[...] / l_ref[...]).astype(o_ref.dtype)


def flash_attention(q, k, v):
    (nq, d), nk, bq, bk = q.shape, k.shape[0], 16, 16
    call = _call(
        flash_kernel,
        jax.ShapeDtypeStruct(q.shape, q.dtype),
        (nq // bq, nk // bk),
        [
            pl.BlockSpec((bq, d), lambda i, j: (i, 0)),
            pl.BlockSpec((bk, d), lambda i, j: (j, 0)),
            pl.BlockSpec((bk, d), lambda i, j: (j, 0)),
        ],
        pl.BlockSpec((bq, d), lambda i, j: (i, 0)),
        [pltpu.VMEM((bq, 1), jnp.float32)] * 2 + [pltpu.VMEM((bq, d), jnp.float32)],
    )
    return call(q, k, v)


def sum_kernel(x_ref, o_ref):
    """The sum of the whole array, accumulated in the resident f32 output across the grid."""

    @pl.when(pl.program_id(0) == 0)
    def _():
        o_ref[...] = jnp.zeros(o_ref.shape, jnp.float32)

    o_ref[...] += jnp.sum(x_ref[...].astype(jnp.float32), keepdims=True)


def grid_sum(x):
    b = 32
    out = jax.ShapeDtypeStruct((1,), jnp.float32)
    call = _call(
        sum_kernel,
        out,
        (x.shape[0] // b,),
        [pl.BlockSpec((b,), lambda i: (i,))],
        pl.BlockSpec((1,), lambda i: (0,)),
    )
    return call(x)


N_MASKED = 100  # not a multiple of the block (32): the last block is partial


def masked_tanh_kernel(x_ref, o_ref):
    """``tanh(2x) * 0.5`` where the element is in the array, 0 in the last block's padding."""
    b = x_ref.shape[0]
    pos = pl.program_id(0) * b + jax.lax.broadcasted_iota(jnp.int32, (b,), 0)
    x = x_ref[...]
    y = jnp.tanh(x * 2.0) * 0.5
    o_ref[...] = jnp.where(pos < N_MASKED, y, jnp.zeros_like(y))


def masked_tanh(x):
    b = 32
    spec = pl.BlockSpec((b,), lambda i: (i,))
    out = jax.ShapeDtypeStruct(x.shape, x.dtype)
    return _call(masked_tanh_kernel, out, (pl.cdiv(x.shape[0], b),), [spec], spec)(x)


# -- jnp programs over refs ----------------------------------------------------------------


def softmax(x):
    """Max-subtracting softmax over the last axis, in the input's dtype (as jnp computes)."""
    e = jnp.exp(x - jnp.max(x, axis=-1, keepdims=True))
    return e / jnp.sum(e, axis=-1, keepdims=True)


def logsumexp(x):
    m = jnp.max(x, axis=-1, keepdims=True)
    return (jnp.log(jnp.sum(jnp.exp(x - m), axis=-1, keepdims=True)) + m)[..., 0]


def layer_norm(x, g, b):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + EPS) * g + b


def attention(q, k, v):
    return softmax(q @ k.T / np.sqrt(q.shape[-1]).astype(q.dtype)) @ v


def matmul_chain(a, b, c):
    return a @ b @ c


def _reading(fn):
    """``fn`` of the values its ref arguments hold: a program over refs."""

    @functools.wraps(fn)
    def program(*refs):
        return fn(*(r[...] for r in refs))

    return program


# -- the corpus ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Program:
    """A program of the corpus: its function and input shapes.

    ``refs``: the inputs are refs (jnp programs) rather than arrays (kernels). ``plant`` names
    the sibling's plant (``plant``; None: no sibling), ``bf16_plant`` the bf16 sibling's where
    it differs. ``kernel``: a Pallas kernel.
    """

    name: str
    fn: Callable
    shapes: tuple[tuple[int, ...], ...]
    plant: str | None = "scale"
    refs: bool = False
    kernel: bool = False
    bf16_plant: str | None = None


NN_SOFTMAX = functools.partial(jax.nn.softmax, axis=-1)
NN_LOGSUMEXP = functools.partial(jax.nn.logsumexp, axis=-1)

# One sibling per case (each harness run costs about half a second), the three plants spread
# over kernels and jnp programs in both dtypes; jax.nn's softmax and logsumexp have none, as
# ours have the same plants.
PROGRAMS = (
    Program("tiled_matmul", tiled_matmul, ((64, 64), (64, 64)), kernel=True),
    Program("row_softmax", row_softmax, ((32, 64),), "sum", kernel=True),
    Program(
        "layer_norm_kernel", layer_norm_pallas, ((32, 64), (1, 64), (1, 64)), "eps", kernel=True
    ),
    Program("flash_attention", flash_attention, ((32, 16), (64, 16), (64, 16)), "sum", kernel=True),
    Program("grid_sum", grid_sum, ((256,),), kernel=True),
    Program("masked_tanh", masked_tanh, ((N_MASKED,),), kernel=True),
    Program("softmax", _reading(softmax), ((16, 64),), refs=True),
    Program("jax_nn_softmax", _reading(NN_SOFTMAX), ((16, 64),), None, True),
    # bf16: log(s + 0.25) - log(s) is within two ulps of logsumexp's result (within the
    # envelope), so the bf16 sibling scales
    Program("logsumexp", _reading(logsumexp), ((16, 64),), "sum", True, bf16_plant="scale"),
    Program("jax_nn_logsumexp", _reading(NN_LOGSUMEXP), ((16, 64),), None, True),
    # bf16: var + eps rounds to var (eps is far below half an ulp of var ~ 1) for 1e-5 and
    # 1e-6 alike, so an eps plant computes the very same bits (a test checks it)
    Program(
        "layer_norm", _reading(layer_norm), ((16, 64), (64,), (64,)), "eps", True, bf16_plant="sum"
    ),
    Program("attention", _reading(attention), ((16, 32), (32, 32), (32, 32)), "sum", refs=True),
    Program("matmul_chain", _reading(matmul_chain), ((16, 32), (32, 48), (48, 16)), refs=True),
)


SEEDS = (0, 1, 2)
PLANTED = "compile disagrees with interpret"  # the finding a caught plant gives


def inputs(program: Program, dtype: np.dtype, seed: int) -> list:
    """Standard normal inputs of the program's shapes in ``dtype``, refs for jnp programs."""
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s, dtype=np.float32).astype(dtype) for s in program.shapes]
    return [ref(a) for a in arrays] if program.refs else arrays


def on_seeds(fn: Callable, n_inputs: int, n_seeds: int) -> Callable:
    """``fn`` run on each of ``n_seeds`` input sets in turn: one program, every seed's
    results compared (one trace and compile for all of them)."""

    def program(*args):
        out = [fn(*args[k * n_inputs : (k + 1) * n_inputs]) for k in range(n_seeds)]
        return tuple(out)

    program.__name__ = fn.__name__
    return program


def plant(name: str, dtype: np.dtype):
    """The rewrite of a sibling of a ``dtype`` program (see the module docstring)."""
    if name == "scale":
        return scale_result()  # its factor follows the result's dtype (a kernel's may be f32)
    if name == "eps":
        return change_constant(EPS, 1e-6)
    return offset_after("reduce_sum", sizes(dtype).offset)


def build(seeds: tuple[int, ...] = SEEDS) -> tuple[list[Case], list[Case]]:
    """The base cases (every program in both dtypes, on inputs from each of ``seeds``) and
    the planted siblings (on the first seed's inputs) of the programs with a plant."""
    base, siblings = [], []
    for p in PROGRAMS:
        for tag, dtype in DTYPES.items():
            args = [a for seed in seeds for a in inputs(p, dtype, seed)]
            fn = on_seeds(p.fn, len(p.shapes), len(seeds))
            base.append(Case(f"{p.name}_{tag}", fn, tuple(args)))
            name = (p.bf16_plant if tag == "bf16" else None) or p.plant
            if name is not None:
                first = tuple(inputs(p, dtype, seeds[0]))
                siblings.append(
                    Case(
                        f"{p.name}_{tag}_planted_{name}",
                        p.fn,
                        first,
                        expect=PLANTED,  # so the command line counts a caught plant as expected
                        plant=plant(name, dtype),
                    )
                )
    return base, siblings


BASE, SIBLINGS = build()
CASES = BASE + SIBLINGS


BK = 128  # the K block of the tiled matmul (k_matmul)


def k_matmul(x, y, b=32):
    """The issue's tiled matmul (f32 scratch accumulated over the K grid axis, 128-blocks of
    K), on ``b`` x ``b`` output tiles: the issue's 128, 32 so that a test can afford it."""
    (m, kk), n = x.shape, y.shape[1]
    return _call(
        matmul_kernel,
        jax.ShapeDtypeStruct((m, n), x.dtype),
        (m // b, n // b, kk // BK),
        [
            pl.BlockSpec((b, BK), lambda i, j, k: (i, k)),
            pl.BlockSpec((BK, b), lambda i, j, k: (k, j)),
        ],
        pl.BlockSpec((b, b), lambda i, j, k: (i, j)),
        [pltpu.VMEM((b, b), jnp.float32)],
    )(x, y)


def row_layer_norm(x, g, b):
    """The issue's layer norm: 16-row blocks, gain and bias."""
    rows = pl.BlockSpec((16, x.shape[1]), lambda i: (i, 0))
    whole = pl.BlockSpec((1, x.shape[1]), lambda i: (0, 0))
    out = jax.ShapeDtypeStruct(x.shape, x.dtype)
    return _call(layer_norm_kernel, out, (x.shape[0] // 16,), [rows, whole, whole], rows)(x, g, b)
