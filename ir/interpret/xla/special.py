"""XLA:CPU's float32 ``erf``, ``expm1`` and ``log1p``, step by step, so the interpreter matches it.

Read off XLA's optimized LLVM IR (jaxlib 0.10.2, x86-64; FMA contraction and FTZ/DAZ as in
``transcendental``):

- ``erf``: +-1 from ``|x| >= 3.8325``; below, ``x p(x**2) / q(x**2)``, a degree-9 odd polynomial
  over a degree-12 even one, each in Horner form with FMAs (Eigen's rational approximation).
- ``expm1``: ``exp(x) - 1`` for ``|x| > 1/2``; nearer zero ``tanh(x/2) (exp(x) + 1)``, which
  keeps the digits ``exp(x) - 1`` would cancel; ``x`` itself where ``x/2`` is zero (so a
  subnormal ``x`` comes back unflushed). ``exp`` and ``tanh`` are ``transcendental``'s.
- ``log1p``: ``log(1 + x)`` for ``|x| >= 0.41421``; nearer zero Cephes' ``x - x**2/2 +
  x**3 P(x)/Q(x)``, with degree-6 polynomials whose leading term is written ``x * 0 + c`` (an
  infinite or NaN ``x`` makes it NaN), then Horner steps with FMAs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from minipallas.ir.interpret.xla.numerics import F32, flush
from minipallas.ir.interpret.xla.transcendental import (
    _add,
    _const,
    _f32,
    _horner,
    _mul,
    exp,
    log,
    tanh,
)

_ERF_P = (0x3B5F5DA2, 0x3D50B6EB, 0x3E3DA740, 0x3F906EBA)
_ERF_Q = (0x37C588DF, 0x3A856D28, 0x3C6687D4, 0x3DE34C21, 0x3EFEB44A, 0x3F800000)


def erf(x: Any) -> np.ndarray:
    """XLA:CPU's float32 ``erf`` (of ``x`` flushed, as DAZ does)."""
    x = flush(_f32(x))
    x2 = _mul(x, x)
    p = _mul(x, _horner(x2, _const(0x39702D51), _ERF_P))
    q = _horner(x2, _const(0xB3FD3906), _ERF_Q)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = flush(p / q)
        saturated = np.abs(x) >= _const(0x407547CB)
    return np.where(saturated, np.copysign(F32.type(1), x), ratio)


def expm1(x: Any) -> np.ndarray:
    """XLA:CPU's float32 ``expm1`` (``x`` as given: it flushes subnormals itself)."""
    x = _f32(x)
    daz = flush(x)
    e = exp(daz)
    half = _mul(daz, F32.type(0.5))
    near = _mul(tanh(half), _add(e, F32.type(1)))
    with np.errstate(invalid="ignore"):
        out = np.where(np.abs(daz) > F32.type(0.5), _add(e, F32.type(-1)), near)
    return np.where(half == 0, x, out)


_LOG1P_P = (0x417101AD, 0x42A6185B, 0x435DC32D, 0x439A8CA3, 0x43586D8A, 0x42707982)
_LOG1P_Q = (0x3EFF40C5, 0x40D284FA, 0x41EF4B9C, 0x4273CC76, 0x426473AD, 0x41A05101)


def log1p(x: Any) -> np.ndarray:
    """XLA:CPU's float32 ``log1p``."""
    x = flush(_f32(x))
    x2 = _mul(x, x)
    zero = _mul(x, F32.type(0))
    p = _horner(x, _add(zero, F32.type(1)), _LOG1P_P)
    q = _horner(x, _add(zero, F32.type(4.527e-05)), _LOG1P_Q)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = flush(q / p)
    near = _add(x, _add(_mul(x2, F32.type(-0.5)), _mul(_mul(x, x2), ratio)))
    with np.errstate(invalid="ignore"):
        return np.where(np.abs(x) < _const(0x3ED413CD), near, log(_add(x, F32.type(1))))
