"""Facts about one indexer that discharge and cleanup ask for on nearly every op, computed once.

Discharge and cleanup look at the indexer of almost every state or indexed op, often several
times per op (is it static? how many dynamic operands? does it select the whole array?).
Indexers are immutable, hashable tuples, and the facts depend on their value alone, so the
cache is keyed by the indexer itself: equal indexers share one entry, whose first indexer is
the ``canonical`` one standing for all of them, and facts about a pair of indexers are cached
by the pair (``pair``). Nothing is keyed by ``id()``, so no lookup can ever find another
object's facts, whatever ran before. Both caches are emptied when they grow past
``MAX_CACHED``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from minipallas.ir.indexing import Array, Dyn, Indexer, Int, Slice
from minipallas.ir.opset.indexed import read_op_for, write_op_for

MAX_CACHED = 1 << 16
T = TypeVar("T")


class IndexerFacts:
    """``num_dyn``: dynamic index operands; ``arrays``: has integer-array entries;
    ``static_basic``: static ints and slices only (the window is known when a pass runs);
    ``slice_sizes``: each entry's size if it is a ``Slice``, else None, so the indexer selects
    all of an array of shape ``s`` iff ``slice_sizes == s``; ``unit_sizes``: the same, but
    None also for a strided slice of more than one element (``is_full`` in discharge);
    ``read_op`` / ``write_op`` / ``accumulate_op``: the pure ops that hold the indexer;
    ``canonical``: the one indexer equal to this one that stands for all of them."""

    __slots__ = (
        "indexer",
        "num_dyn",
        "arrays",
        "static_basic",
        "slice_sizes",
        "unit_sizes",
        "read_op",
        "write_op",
        "accumulate_op",
        "canonical",
    )

    def __init__(self, indexer: Indexer) -> None:
        self.indexer = indexer
        self.num_dyn = sum(
            isinstance(e.index if isinstance(e, Int | Array) else e.start, Dyn) for e in indexer
        )
        self.arrays = any(isinstance(e, Array) for e in indexer)
        self.static_basic = self.num_dyn == 0 and not self.arrays
        self.slice_sizes = tuple(e.size if isinstance(e, Slice) else None for e in indexer)
        self.unit_sizes = tuple(
            e.size if isinstance(e, Slice) and (e.stride == 1 or e.size <= 1) else None
            for e in indexer
        )
        self.read_op = read_op_for(indexer)
        self.write_op = write_op_for(indexer)
        self.accumulate_op = write_op_for(indexer, accumulate=True)
        self.canonical = indexer  # the first of its equal indexers that was asked about


_CACHE: dict[Indexer, IndexerFacts] = {}
_PAIRS: dict[tuple[Callable, Indexer, Indexer], Any] = {}


def facts(indexer: Indexer) -> IndexerFacts:
    """The facts of ``indexer`` (cached by its value)."""
    try:
        found = _CACHE.get(indexer)
    except TypeError:  # not hashable (not a valid indexer): described, not cached
        return IndexerFacts(indexer)
    if found is None:
        if len(_CACHE) >= MAX_CACHED:
            _CACHE.clear()
        found = _CACHE[indexer] = IndexerFacts(indexer)
    return found


def pair(fn: Callable[[Indexer, Indexer], T], a: Indexer, b: Indexer) -> T:
    """``fn(a, b)`` for a pure ``fn`` of two indexers, cached per pair of their values."""
    key = (fn, a, b)
    found = _PAIRS.get(key, _PAIRS)
    if found is _PAIRS:
        if len(_PAIRS) >= MAX_CACHED:
            _PAIRS.clear()
        found = _PAIRS[key] = fn(a, b)
    return found
