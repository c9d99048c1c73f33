"""Sum orders a correct XLA:CPU may pick, written in numpy, to model what another CPU computes.

Each order sums the last axis of ``products`` (float32 terms ``a_i * b_i``, given as the two
factors so an FMA can fuse them): a sequential loop with or without FMA (XLA's loop emitter
for short rows; Eigen's and YNNPACK's microkernels along K), 8 or 16 float32 lanes joined by a
tree (AVX2's and AVX-512's vector accumulators), 128-term tiles added in turn (a blocked K),
and numpy's pairwise sum. ``ORDERS`` names them; ``dot(a, b, order)`` and ``total(x, order)``
apply one to a matrix product and to a row sum.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

F32 = np.float32


def _fma(a, b, c):
    """``a * b + c`` rounded once: the float32 product is exact in float64 (the float64 sum's
    double rounding is at most a float32 ulp away, far inside every bound here)."""
    return (a.astype(np.float64) * b + c).astype(F32)


def _lanes(a, b, lanes, fused):
    """``lanes`` accumulators over strided terms, then a tree over the lanes."""
    acc = np.zeros((*a.shape[:-1], lanes), F32)
    for i in range(0, a.shape[-1], lanes):
        x, y = a[..., i : i + lanes], b[..., i : i + lanes]
        w = x.shape[-1]
        acc[..., :w] = _fma(x, y, acc[..., :w]) if fused else acc[..., :w] + x * y
    while acc.shape[-1] > 1:
        half = acc.shape[-1] // 2
        acc = acc[..., :half] + acc[..., half : 2 * half]
    return acc[..., 0]


def _tiles(a, b, tile, lanes):
    total = np.zeros(a.shape[:-1], F32)
    for i in range(0, a.shape[-1], tile):
        total = total + _lanes(a[..., i : i + tile], b[..., i : i + tile], lanes, True)
    return total


ORDERS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "sequential": lambda a, b: _lanes(a, b, 1, False),
    "sequential_fma": lambda a, b: _lanes(a, b, 1, True),
    "avx2_8_lanes": lambda a, b: _lanes(a, b, 8, True),
    "avx512_16_lanes": lambda a, b: _lanes(a, b, 16, True),
    "tiles_128": lambda a, b: _tiles(a, b, 128, 8),
    "pairwise": lambda a, b: np.sum(a * b, axis=-1, dtype=F32),
}


def dot(a: np.ndarray, b: np.ndarray, order: str) -> np.ndarray:
    """``a @ b`` (float32) with each element's sum in ``order``."""
    return ORDERS[order](*np.broadcast_arrays(a[:, None, :], b.T[None, :, :]))


def total(x: np.ndarray, order: str) -> np.ndarray:
    """The sum of each row of ``x`` (float32) in ``order``."""
    return ORDERS[order](x, np.ones_like(x))
