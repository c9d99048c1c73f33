"""Where the sampler's decisions come from: ``random.Random`` or hypothesis draws.

The sampler asks only for bounded integers, so one sampler serves both the hypothesis strategy
(whose draws shrink toward the low end of each range) and the plain, fast generator used by
benchmarks. Menus are ordered simplest first, so a shrunk program is a simple one.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


class Choices:
    """Bounded integer decisions, plus helpers built on them. Subclasses supply ``integer``."""

    def integer(self, lo: int, hi: int) -> int:
        """An integer in ``[lo, hi]`` (both inclusive)."""
        raise NotImplementedError

    def chance(self, p: float) -> bool:
        """True with probability ``p``; shrinks to False."""
        return self.integer(0, 99) >= round(100 * (1 - p))

    def pick(self, items: Sequence[T]) -> T:
        return items[self.integer(0, len(items) - 1)]

    def weighted(self, menu: Sequence[tuple[int, T]]) -> T:
        """One entry of ``(weight, item)`` pairs, by weight; shrinks to the first entry."""
        total = sum(w for w, _ in menu)
        k = self.integer(0, total - 1)
        for w, item in menu:
            if k < w:
                return item
            k -= w
        raise AssertionError("unreachable")

    def subset(self, items: Sequence[T], p: float) -> list[T]:
        return [x for x in items if self.chance(p)]


class RandomChoices(Choices):
    """Decisions from a ``random.Random``: fast, for benchmarks and large programs."""

    def __init__(self, rng: random.Random) -> None:
        self._randint: Callable[[int, int], int] = rng.randint
        self._random = rng.random

    def integer(self, lo: int, hi: int) -> int:
        return self._randint(lo, hi)

    def chance(self, p: float) -> bool:
        return self._random() < p
