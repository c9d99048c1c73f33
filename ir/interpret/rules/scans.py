"""Rules for the cumulative ops and ``reduce_prod``.

Integer results are exact in any order. Float cumulative ops follow the order XLA:CPU computes
upstream's lowering in (a ``reduce_window`` as long as the axis, which XLA's
``ReduceWindowRewriter`` turns into a tree over rows of ``BASE`` elements), so they are bit
for bit with XLA: an axis of at most ``BASE`` elements is folded in index order from the
identity, each output separately (a reverse scan folds ``x[i], x[i+1], ...``), except that
a float32/float16 axis of one element is left as it is (XLA drops the window; -0.0 stays
-0.0, while bfloat16 still gets ``0 + x``); a longer axis
is padded with the identity to whole rows of ``BASE``, each row scanned so, the row totals
scanned exclusively by the same rule (recursively), and each row's prefix combined into it.
Each step rounds to the dtype and flushes subnormals, as XLA's ``add`` / ``mul`` / ``max`` do.
``cumlogsumexp`` folds with upstream's ``logaddexp`` body (``logaddexp``), op by op.

``reduce_prod`` of floats multiplies in index order, rounding each product to the dtype; XLA
reduces in its own order, so it matches only to rounding (as ``reduce_sum``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.core import Op
from minipallas.ir.interpret.engine import Interpreter, rule
from minipallas.ir.interpret.rules.arrays import BINARY, FLOAT_UNARY
from minipallas.ir.interpret.xla.numerics import float_math

BASE = 16  # XLA:CPU's base length for rewriting a scan-shaped reduce_window
_COMBINE = {"cumsum": "add", "cumprod": "mul", "cummax": "max", "cummin": "min"}
_INT_SCAN = {
    "cumsum": np.add.accumulate,
    "cumprod": np.multiply.accumulate,
    "cummax": np.maximum.accumulate,
    "cummin": np.minimum.accumulate,
}
Fold = Callable[[Any, Any], Any]


def identity(name: str, dtype: str) -> Any:
    """The value a cumulative op or ``reduce_prod`` starts from (what padding holds)."""
    np_dtype = dtypes.to_numpy(dtype)
    if name == "cumlogsumexp":
        return np_dtype.type(-np.inf)
    if name in ("cumsum", "cumprod", "reduce_prod"):
        return np_dtype.type(0 if name == "cumsum" else 1)
    if dtypes.is_float(dtype):
        return np_dtype.type(-np.inf if name == "cummax" else np.inf)
    info = np.iinfo(np_dtype)
    return np_dtype.type(info.min if name == "cummax" else info.max)


def _unary(name: str, x: Any, dtype: str) -> Any:
    fn, flushes = FLOAT_UNARY[name]
    return float_math(fn, dtype, x, flushes=flushes)


def logaddexp(a: Any, b: Any, dtype: str) -> Any:
    """``log(exp(a) + exp(b))`` as upstream's ``cumlogsumexp`` body computes it:
    ``max(a, b) + log1p(exp(-|a - b|))``, or ``a + b`` where ``a - b`` is NaN (equal
    infinities, a NaN operand), each op rounded to ``dtype``."""
    add, sub = BINARY["add"], BINARY["sub"]
    d = sub(a, b, dtype)
    tail = d
    for name in ("abs", "neg", "exp", "log1p"):
        tail = _unary(name, tail, dtype)
    return np.where(d != d, add(a, b, dtype), add(BINARY["max"](a, b, dtype), tail, dtype))


def _windows(x: np.ndarray, f: Fold, init: Any, forward: bool, exclusive: bool) -> np.ndarray:
    """A scan along the last axis as one ``reduce_window``: each output folds its window."""
    n = x.shape[-1]
    m = n + 1 if exclusive else n
    out = np.empty((*x.shape[:-1], m), x.dtype)
    for i in range(m):
        span = range(i if exclusive else i + 1) if forward else range(i, n)
        acc = np.full(x.shape[:-1], init, x.dtype)
        for j in span:
            acc = f(acc, x[..., j])
        out[..., i] = acc
    return out


def scan(x: np.ndarray, f: Fold, init: Any, forward: bool, exclusive: bool = False) -> np.ndarray:
    """XLA:CPU's scan along the last axis (the module docstring gives the tree)."""
    n = x.shape[-1]
    if n <= BASE:
        return _windows(x, f, init, forward, exclusive)
    rows = -(-n // BASE)
    tail = np.full((*x.shape[:-1], rows * BASE - n), init, x.dtype)
    tiles = np.concatenate([x, tail], axis=-1).reshape(*x.shape[:-1], rows, BASE)
    within = _windows(tiles, f, init, forward, exclusive=False)
    totals = within[..., -1] if forward else within[..., 0]
    before = scan(totals, f, init, forward, exclusive=True)
    before = before[..., :rows] if forward else before[..., 1:]
    out = f(within, before[..., None]).reshape(*x.shape[:-1], rows * BASE)[..., :n]
    if exclusive:
        edge = np.full((*x.shape[:-1], 1), init, x.dtype)
        out = np.concatenate([edge, out] if forward else [out, edge], axis=-1)
    return out


@rule(*_COMBINE, "cumlogsumexp")
def cumulative(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    dtype, axis, reverse = op.operands[0].type.dtype, op.attrs["axis"], op.attrs["reverse"]
    x = np.moveaxis(np.asarray(args[0]), axis, -1)
    if x.shape[-1] == 0 or (x.shape[-1] == 1 and dtype != "bfloat16"):
        return (np.asarray(args[0]),)  # XLA folds a one-element window away (not bf16)
    if dtypes.is_float(dtype):
        combine = logaddexp if op.name == "cumlogsumexp" else BINARY[_COMBINE[op.name]]
        out = scan(x, lambda a, b: combine(a, b, dtype), identity(op.name, dtype), not reverse)
    else:
        flip = (lambda a: a[..., ::-1]) if reverse else (lambda a: a)
        out = flip(_INT_SCAN[op.name](flip(x), axis=-1, dtype=x.dtype))
    return (np.moveaxis(out, -1, axis),)


@rule("reduce_prod")
def reduce_prod(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    dtype, axes = op.operands[0].type.dtype, op.attrs["axes"]
    x = np.asarray(args[0])
    kept = [d for d in range(x.ndim) if d not in axes]
    rows = np.transpose(x, (*kept, *axes)).reshape(*(x.shape[d] for d in kept), -1)
    if not dtypes.is_float(dtype):
        return (np.multiply.reduce(rows, axis=-1, dtype=x.dtype),)
    acc = np.full(rows.shape[:-1], identity("reduce_prod", dtype), x.dtype)
    for j in range(rows.shape[-1]):
        acc = BINARY["mul"](acc, rows[..., j], dtype)
    return (np.asarray(acc, x.dtype),)
