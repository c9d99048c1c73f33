"""The order XLA:CPU adds up a short float sum in, so the interpreter's sum has its bits.

XLA keeps a reduction under ``YNN_MIN_ELEMENTS`` elements (operand and result) for its own code,
and splits a long reduced dimension into windows of 32 (``TreeReductionRewriter``). A sum over
one dimension of at most ``WINDOW`` elements is then one window: each output starts from +0 and
adds the elements left to right, one rounding (and FTZ flush) a step; so a sum of -0s is +0.
numpy's pairwise order (what the interpreter used) differs in most rows of 8 or more elements
(ring attention's ``sum(p, axis=1)`` of 8: issue 47).

Measured against ``jax.jit`` of ``lax.reduce_sum`` (jaxlib 0.10.2, AMD EPYC, AVX-512), normal
values: rows of 7 to 32 along the last dimension, a middle one or the first (``(8,8)``,
``(16,32)``, ``(32,16)`` over 0, ``(4,17,9)`` over 0 and 2, ``(2,3,32,5)`` over 2, ``(120,9)``,
``(9,120)`` over 0, ``(31,)``, ``(32,)``): every bit; bfloat16 and float16 sums (a float32
sum between converts, rounded once) of four of those shapes too. Longer windows (33 or 100
elements) and sums over several dimensions are added in another order not modelled here: those
keep numpy's.
"""

from __future__ import annotations

import math

import numpy as np

from minipallas.ir.interpret.xla.extremes import YNN_MIN_ELEMENTS
from minipallas.ir.interpret.xla.numerics import F32, flush

WINDOW = 32  # XLA's TreeReductionRewriter window


def in_order(shape: tuple[int, ...], axes: tuple[int, ...]) -> bool:
    """Whether XLA:CPU adds a float32 sum of ``shape`` over ``axes`` as ``ordered_sum`` does."""
    size = math.prod(shape)
    return len(axes) == 1 and shape[axes[0]] <= WINDOW and size < YNN_MIN_ELEMENTS


def ordered_sum(x: np.ndarray, axis: int) -> np.ndarray:
    """The float32 sum of ``x`` (float32, flushed) over ``axis``: from +0, left to right."""
    rows = np.moveaxis(np.asarray(x, dtype=F32), axis, -1)
    acc = np.zeros(rows.shape[:-1], F32)
    for i in range(rows.shape[-1]):
        acc = flush(np.add(acc, rows[..., i], dtype=F32))
    return acc
