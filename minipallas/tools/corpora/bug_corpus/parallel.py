"""Races across the points of a "parallel" grid axis: points that accumulate into one output
block, carry scratch from one point to the next, or write halves of one block. A v5e has one
TensorCore and runs every point in order, so these are latent there; a chip with two cores
(v4, v5p, v7x) splits a parallel axis between them."""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from .common import Entry, S, call, matmul_ref, normal
from .undefined import tiled_matmul

ROWS = pl.BlockSpec((8, 128), lambda i: (i, 0))


def _params(semantics: str) -> pltpu.CompilerParams:
    return pltpu.CompilerParams(dimension_semantics=(semantics,))


# ----- every point accumulates into block (0, 0) -----


def _sum_kernel(x_ref, o_ref):
    @pl.when(pl.program_id(0) == 0)
    def _():
        o_ref[...] = jnp.zeros_like(o_ref)

    o_ref[...] += x_ref[...]


def block_sum(x, *, interpret=False, semantics: str = "parallel"):
    """The sum of ``x``'s (8, 128) row blocks, accumulated in the output block."""
    return call(
        _sum_kernel,
        S((8, 128), x.dtype),
        interpret,
        grid=(x.shape[0] // 8,),
        in_specs=[ROWS],
        out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)),
        compiler_params=_params(semantics),
    )(x)


def block_sum_want(x):
    return x.reshape(-1, 8, 128).sum(0)


# ----- a running prefix sum carried in scratch from point to point -----


def _prefix_kernel(x_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(0) == 0)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += x_ref[...]
    o_ref[...] = acc_ref[...]


def prefix_sums(x, *, interpret=False, semantics: str = "parallel"):
    """Block ``i`` of the output: the sum of input blocks ``0..i``."""
    return call(
        _prefix_kernel,
        S(x.shape, x.dtype),
        interpret,
        grid=(x.shape[0] // 8,),
        in_specs=[ROWS],
        out_specs=ROWS,
        scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)],
        compiler_params=_params(semantics),
    )(x)


def prefix_sums_want(x):
    return np.cumsum(x.reshape(-1, 8, 128), axis=0).reshape(x.shape)


# ----- two points of a 2-D parallel grid write the two halves of one block -----


def _halves_kernel(x_ref, o_ref):
    j = pl.program_id(1)

    @pl.when(j == 0)
    def _():
        o_ref[:, 0:128] = x_ref[...] + 1.0

    @pl.when(j == 1)
    def _():
        o_ref[:, 128:256] = x_ref[...] + 1.0


def _halves(x, *, interpret=False):
    return call(
        _halves_kernel,
        S(x.shape, x.dtype),
        interpret,
        grid=(x.shape[0] // 8, x.shape[1] // 128),
        in_specs=[pl.BlockSpec((8, 128), lambda i, j: (i, j))],
        out_specs=pl.BlockSpec((8, 256), lambda i, j: (i, 0)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")),
    )(x)


X = normal(41, 32, 128)
A, B = normal(42, 16, 256), normal(43, 256, 128)
W = normal(44, 16, 256)

ENTRIES = [
    Entry(
        "parallel_shared_block",
        block_sum,
        (X,),
        block_sum_want,
        "race",
        "latent",
        "every point of the parallel axis accumulates into output block (0, 0)",
    ),
    Entry(
        "parallel_carried_scratch",
        prefix_sums,
        (X,),
        prefix_sums_want,
        "race",
        "latent",
        "the prefix sum is carried in scratch from one point of a parallel axis to the next",
    ),
    Entry(
        "matmul_k_parallel",
        functools.partial(tiled_matmul, k_semantics="parallel"),
        (A, B),
        matmul_ref,
        "race",
        "latent",
        "the k (reduction) axis is marked parallel: its points share the accumulator and the "
        "output block",
    ),
    Entry(
        "parallel_2d_block_halves",
        _halves,
        (W,),
        lambda x: x + 1.0,
        "race",
        "latent",
        "points (i, 0) and (i, 1) of a 2-D parallel grid each write half of one output block",
    ),
]
