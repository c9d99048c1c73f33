"""The scaffold every rebuilding pass shares: each function it reaches rebuilt once.

A pass that walks a program builds a new function for the entry and for each function a
``call`` names. A function called from two places must be rebuilt once, so both calls name the
same copy (and a big callee is not rebuilt per call). ``Callees`` holds that: constructed with
the pass's own ``rebuild(fn) -> Function``, calling it gives each function's copy, made on first
use; ``call(op)`` is a ``call`` op naming the copy. Copies are keyed by the function object
itself, held alongside its id, so a dead function's reused id cannot alias a live one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from minipallas.ir.core import Function, Op

__all__ = ["Callees"]


class Callees:
    """``fn -> rebuild(fn)``, once per function object, for one run of a pass."""

    def __init__(self, rebuild: Callable[[Function], Function]) -> None:
        self.rebuild = rebuild
        self._done: dict[int, tuple[Function, Function]] = {}

    def __call__(self, fn: Function) -> Function:
        found = self._done.get(id(fn))
        if found is None or found[0] is not fn:
            found = (fn, self.rebuild(fn))
            self._done[id(fn)] = found
        return found[1]

    def call(self, op: Op, **changes: Any) -> Op:
        """The ``call`` op ``op`` naming its callee's copy, with any other ``changes``."""
        return op.replace(attrs={**op.attrs, "callee": self(op.attrs["callee"])}, **changes)
