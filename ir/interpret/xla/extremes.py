"""Float max and min reductions as XLA:CPU computes them when YNNPACK runs them: where NaNs and
signed zeros go.

XLA:CPU (jaxlib 0.10.2) hands a max or min ``reduce`` to YNNPACK when a reduced dimension is
longer than 1 and its operand or its result has at least ``YNN_MIN_ELEMENTS`` elements
(``offloaded``; XLA's ``IsInstructionPreferredByYnn``). YNNPACK does not propagate NaN, as
XLA's own code does, so a max over a partial block's NaN padding (upstream's interpret mode
pads with NaN) usually gives the real rows' maximum there:

- bfloat16 and float16 compare their bits as sign-magnitude integers (``_sign_magnitude``): a
  positive NaN lies above +inf (a max returns it, a min passes it by), a negative NaN below
  -inf, -0 below +0; the result does not depend on the order;
- float32 compares with the CPU's ``maxps``/``minps``: ``M(acc, x)`` is ``acc`` only where
  ``acc`` is strictly greater (smaller), else ``x``; so a NaN replaces the accumulator, the
  next element replaces the NaN, and the order decides what survives (and which zero's sign).
  Dimensions of size 1 are dropped and neighbours of one kind (reduced, kept) merged first.

  With the minor dimension kept (``_down_columns``), each output folds its innermost reduced
  dimension four rows at a time, ``acc = M(M(M(r0, r1), r2), r3)`` (a short last group repeats
  its first row), then ``C = M(acc, C)`` from ``C = -inf`` (+inf for a min): a group ending in
  NaN drops out whole. Where four rows (all, if fewer) of the minor dimension hold more than
  ``GROUP_LIMIT`` elements, each row folds into ``C`` alone. With the minor dimension reduced
  (``_along_rows``), each output keeps one accumulator per vector lane (16 float32 lanes with
  AVX-512; 8 with AVX2, not measured) over the row's chunks, the last padded with -inf (+inf),
  folds the lanes in halves (``M(low, high)``), and keeps the result only where it beats -inf
  (+inf): a NaN there gives -inf.

Measured against ``jax.jit`` of ``lax.reduce_max``/``reduce_min`` on an AMD EPYC with AVX-512
(2 cores), 1-D to 4-D operands of 4096 to 65536 elements with 0.1% to 50% NaN or ±0 alone:
bfloat16 and float16 every bit in 102 of 102 reductions (propagating NaN, as before: 51); float32
with its reduced dimensions adjacent 123 of 128 (before: none), and every one of 106 run on one
core. The rest are reductions XLA's threads split (on 2 cores a row of 50000 elements or more,
or 256 rows and more of a width that is not a multiple of 16), whose NaNs and zero signs then
depend on the pieces. Not modelled: reduced dimensions apart (a kept one between them; 2 of 12
agree), and elementwise max/min that XLA fuses into YNNPACK's graph, which also follow ``M``.
"""

from __future__ import annotations

import math

import numpy as np

from minipallas.ir.interpret.xla.dot_order import lanes

YNN_MIN_ELEMENTS = 4096  # as passes/xla_cpu/exactness.py: the size XLA hands YNNPACK
GROUP_LIMIT = 32768  # elements in four rows of the kept minor dimension (module doc)
_INF_BITS = {"bfloat16": 0x7F80, "float16": 0x7C00}


def offloaded(shape: tuple[int, ...], axes: tuple[int, ...]) -> bool:
    """Whether XLA:CPU hands a max/min reduction of ``shape`` over ``axes`` to YNNPACK."""
    size = math.prod(shape)
    kept = size // max(1, math.prod(shape[a] for a in axes))
    return any(shape[a] > 1 for a in axes) and max(size, kept) >= YNN_MIN_ELEMENTS


def extreme(x: np.ndarray, axes: tuple[int, ...], dtype: str, is_max: bool) -> np.ndarray:
    """The reduction (``x`` in ``dtype``'s own numpy dtype; float32 already flushed)."""
    if dtype in _INF_BITS:
        return _sign_magnitude(x, axes, _INF_BITS[dtype], is_max)
    plain = (np.maximum if is_max else np.minimum).reduce(x, axis=axes)
    if not (np.isnan(plain).any() or (plain == 0).any()):
        return plain  # no NaN met and no zero whose sign the order picks: any order agrees
    y, sizes, kinds = _merged(x, axes)
    out = _along_rows(y, is_max) if kinds[-1] else _down_columns(y, sizes[-1], is_max)
    return out.reshape(plain.shape)


def _sign_magnitude(x: np.ndarray, axes: tuple[int, ...], inf: int, is_max: bool) -> np.ndarray:
    """The extreme of the bits read as sign-magnitude integers, from -inf (+inf for a min)."""
    bits = x.view(np.uint16).astype(np.int32)
    keys = (bits & 0x7FFF) ^ -(bits >> 15)  # ordered as the values, NaNs beyond the infinities
    best = keys.max(axis=axes, initial=~inf) if is_max else keys.min(axis=axes, initial=inf)
    return np.where(best < 0, ~best & 0x7FFF | 0x8000, best).astype(np.uint16).view(x.dtype)


def _merged(x: np.ndarray, axes: tuple[int, ...]) -> tuple[np.ndarray, list[int], list[bool]]:
    """``x`` as (outputs, *reduced dims), with the merged dims' sizes and kinds (reduced or
    not) in memory order: size-1 dims dropped, neighbours of one kind merged."""
    sizes: list[int] = []
    kinds: list[bool] = []
    for a, n in enumerate(x.shape):
        if n == 1:
            continue
        if kinds and kinds[-1] == (a in axes):
            sizes[-1] *= n
        else:
            sizes.append(n)
            kinds.append(a in axes)
    kept = [i for i, r in enumerate(kinds) if not r]
    reduced = [i for i, r in enumerate(kinds) if r]
    y = x.reshape(sizes).transpose(kept + reduced)
    return y.reshape(math.prod(sizes[i] for i in kept), -1, sizes[reduced[-1]]), sizes, kinds


def _step(is_max: bool):
    """``M(acc, x)``: ``acc`` where strictly beyond ``x``, else ``x`` (NaN included)."""
    if is_max:
        return lambda acc, x: np.where(acc > x, acc, x)
    return lambda acc, x: np.where(acc < x, acc, x)


def _down_columns(y: np.ndarray, minor: int, is_max: bool) -> np.ndarray:
    """Outputs over (outputs, outer reduced, innermost reduced): groups of four rows, or
    single rows past ``GROUP_LIMIT`` (module doc)."""
    m, inner = _step(is_max), y.shape[-1]
    group = 4 if min(inner, 4) * minor <= GROUP_LIMIT else 1
    out = np.full(y.shape[0], -np.inf if is_max else np.inf, np.float32)
    for outer in range(y.shape[1]):
        for g in range(0, inner, group):
            acc = y[:, outer, g]
            for j in range(1, group):
                acc = m(acc, y[:, outer, g + j if g + j < inner else g])
            out = m(acc, out)
    return out


def _along_rows(y: np.ndarray, is_max: bool) -> np.ndarray:
    """Outputs over (outputs, outer reduced, minor reduced): a lane per position in a chunk of
    the minor dimension, then the lanes folded in halves (module doc)."""
    m, width = _step(is_max), lanes()
    ident = np.float32(-np.inf if is_max else np.inf)
    n, outer, length = y.shape
    pad = np.full((n, outer, -length % width), ident, np.float32)
    chunks = np.concatenate([y, pad], axis=2).reshape(n, -1, width)
    acc = np.full((n, width), ident, np.float32)
    for c in range(chunks.shape[1]):
        acc = m(acc, chunks[:, c])
    while acc.shape[1] > 1:
        half = acc.shape[1] // 2
        acc = m(acc[:, :half], acc[:, half:])
    return np.where(np.isnan(acc[:, 0]), ident, acc[:, 0])
