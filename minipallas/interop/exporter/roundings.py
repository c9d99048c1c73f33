"""``to_jax(fn, exact=True)``: every rounding the interpreter does, kept from XLA:CPU's rewrites.

The interpreter rounds each float op's result (``ir/interpret``); XLA:CPU (jaxlib 0.10.2, x86-64)
compiles some pairs of ops into one rounding instead, which moves ring attention's compiled
bits off the simulator's (issue 47; ``tests/kernels/test_device_compile.py``):

- a float32 multiply whose result an add or subtract in the same fused loop consumes becomes one
  FMA (LLVM contracts ``fadd(fmul(a, b), c)``): ``acc * correction + p @ v``,
  ``scores * scale - m``. ``lax.optimization_barrier`` does not stop it (XLA:CPU expands the
  barrier before fusion), nor do ``reduce_precision``, bitcasts, ``max(x, -inf)`` or a zero
  computed from ``axis_index`` (all folded); ``select(x != x, x + x, x)`` does: the add then
  reads a select, not the product, and the select is ``x`` bit for bit (a NaN's ``x + x`` is
  ``x``, quiet). ``product`` puts each float32 product behind it;
- ``a / b`` becomes ``a * (1 / b)`` when ``b`` is a broadcast (of a column: ``acc / total``;
  of a scalar) or a constant (``a / 3``): measured, 19-36% of the quotients differ. A barrier
  on the divisor stops that (algebraic simplification runs before barriers are expanded):
  ``divisor``.

Off by default: the fence costs a compare and a select per product, and ``to_jax`` without it
keeps the bits ``minipallas.compile`` gives. ``on_devices`` turns it on, as it promises the
simulator's bits.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

from jax import lax

_EXACT: contextvars.ContextVar[bool] = contextvars.ContextVar("to_jax_exact", default=False)


@contextlib.contextmanager
def exact(on: bool) -> Iterator[None]:
    """The rules evaluated inside keep the interpreter's roundings when ``on``."""
    token = _EXACT.set(on)
    try:
        yield
    finally:
        _EXACT.reset(token)


def product(x: Any, dtype: str) -> Any:
    """A multiply's result, which XLA may not contract into the add that reads it."""
    if not _EXACT.get() or dtype != "float32":
        return x
    return lax.select(lax.ne(x, x), lax.add(x, x), x)


def divisor(y: Any) -> Any:
    """A float division's divisor, which XLA may not replace by multiplying by its inverse."""
    return lax.optimization_barrier(y) if _EXACT.get() else y
