"""The order XLA:CPU sums a ``dot`` of bfloat16 operands into float32 in, so the interpreter
gives its bits.

XLA:CPU (jaxlib 0.10.2) hands such a dot to YNNPACK as it is, bfloat16 in, float32 out, when
``native`` holds for its shape, unless an operand is a ``transpose`` 's result (XLA lays it
out column-major) or the left side is ``(batch..., k, m)``: those it converts to float32
first. The importer spells those conversions out and the lowering folds its own transposes
into the ``dot_general``, so a bfloat16 ``dot`` here is one XLA runs in YNNPACK; anything else,
and a bfloat16 result, is a float32 dot of the converted operands, numpy's ``matmul`` order.

YNNPACK's kernel walks the contracted axis in pairs, each pair's odd element first (the pair
layout of ``vdpbf16ps``), one fused multiply-add a product into float32 (the product exact,
one rounding, subnormals flushed), in blocks of ``k_block(n)`` elements: the first block's
sum is the result, each later one's is added to it. Measured against ``jax.jit`` of
``lax.dot_general`` on an AMD EPYC with AVX-512 and AVX512-BF16 (and, by a probe script, on
one with AVX2 only): both forms (``ik,kj`` and ``ik,jk``), batched or not, odd depths, depths
to 16384, products near the float32 range's ends, every bit equal, where numpy's ``matmul``
differs in a fifth to nine tenths of the elements. Only the block differs between the two
CPUs: 65536 elements of the right side's tile, which is two vectors of float32 lanes wide
(one for a narrow right side).
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from minipallas.ir.interpret.xla.numerics import F32, flush
from minipallas.ir.interpret.xla.transcendental import fma

_BLOCK_ELEMENTS = 65536  # a K block times the right side's tile width
_LARGEST = 2.0**127  # a product of magnitudes under this is finite in float32
_QUANTUM = 2.0**-110  # products at least this large sum to no float32 subnormal


def native(m: int, k: int, n: int) -> bool:
    """Whether XLA:CPU runs an ``(m, k) x (k, n)`` bfloat16 dot into float32 unconverted
    (measured on 900 shapes, dims from 1 to 33): YNNPACK takes no vector and no dot
    this small."""
    return min(m, n) >= 2 and max(m, n) >= 4 and k >= 4 and max(m, k, n) >= 8


@functools.cache
def lanes() -> int:
    """float32 lanes of this CPU's vectors: 16 with AVX-512, else 8 (AVX2)."""
    cpuinfo = Path("/proc/cpuinfo")
    text = cpuinfo.read_text() if cpuinfo.exists() else ""
    flags = next((line for line in text.splitlines() if line.startswith("flags")), "")
    return 16 if "avx512f" in flags.split() else 8


def k_block(n: int) -> int:
    """How many elements of the contracted axis YNNPACK sums before adding to the result."""
    width = lanes()
    return _BLOCK_ELEMENTS // (width if n <= width else 2 * width)


def pairwise_dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` (float32 arrays of bfloat16 values, ``(..., m, k) x (..., k, n)``) summed
    as YNNPACK sums it."""
    a, b = flush(np.asarray(a, F32)), flush(np.asarray(b, F32))
    k, step = a.shape[-1], k_block(b.shape[-1])
    out = _block(a[..., :step], b[..., :step, :])  # the first block's sum is stored as it is
    for start in range(step, k, step):
        out = flush(out + _block(a[..., start : start + step], b[..., start : start + step, :]))
    return out


def _block(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """One block's sum, from zero: odd-even pairs, one fused multiply-add a product."""
    k = a.shape[-1]
    order = [i ^ 1 if i ^ 1 < k else i for i in range(k)]
    acc = np.zeros(a.shape[:-1] + b.shape[-1:], F32)
    if _plain_suffices(a, b):  # every product exact in float32: fma is a multiply then an add
        with np.errstate(over="ignore", invalid="ignore"):
            for i in order:
                acc += a[..., :, i : i + 1] * b[..., i : i + 1, :]
        return acc
    for i in order:
        acc = fma(a[..., :, i : i + 1], b[..., i : i + 1, :], acc)
    return acc


def _plain_suffices(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether float32 multiplies and adds give the fused, flushed sums: no product
    overflows, and none is so small that a sum could fall below float32's normal range."""

    def extremes(x: np.ndarray) -> tuple[float, float]:
        magnitude = np.abs(x[np.isfinite(x) & (x != 0)]).astype(np.float64)
        return (magnitude.max(), magnitude.min()) if magnitude.size else (0.0, np.inf)

    (a_max, a_min), (b_max, b_min) = extremes(a), extremes(b)
    return a_max * b_max < _LARGEST and a_min * b_min >= _QUANTUM
