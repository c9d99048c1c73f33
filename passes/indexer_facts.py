"""Facts about one indexer that discharge and cleanup ask for on nearly every op, computed once.

Discharge and cleanup look at the indexer of almost every state or indexed op, often several
times per op (is it static? how many dynamic operands? does it select the whole array?).
Indexers are immutable tuples, usually shared by the ops copied from one another, so the facts
are cached by the indexer's identity: a lookup costs one dict probe instead of a walk over its
entries. The cache holds each indexer it describes (so an id is never reused while cached) and
is emptied when it grows past ``MAX_CACHED``. Equal indexers share one ``canonical`` object, so
facts about a pair of indexers can be cached by identity too (``pair``).
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
        try:
            self.canonical = _CANONICAL.setdefault(indexer, indexer)
        except TypeError:  # not hashable (not a valid indexer): it stands for itself
            self.canonical = indexer


_CACHE: dict[int, IndexerFacts] = {}
_CANONICAL: dict[Indexer, Indexer] = {}
_PAIRS: dict[tuple[Callable, int, int], tuple[Indexer, Indexer, Any]] = {}


def facts(indexer: Indexer) -> IndexerFacts:
    """The facts of ``indexer`` (cached by identity)."""
    found = _CACHE.get(id(indexer))
    if found is not None and found.indexer is indexer:
        return found
    if len(_CACHE) >= MAX_CACHED:
        _CACHE.clear()
        _CANONICAL.clear()
    found = _CACHE[id(indexer)] = IndexerFacts(indexer)
    return found


def pair(fn: Callable[[Indexer, Indexer], T], a: Indexer, b: Indexer) -> T:
    """``fn(a, b)`` for a pure ``fn`` of two indexers, cached per pair of equal indexers."""
    a, b = facts(a).canonical, facts(b).canonical
    key = (fn, id(a), id(b))
    found = _PAIRS.get(key)
    if found is None or found[0] is not a or found[1] is not b:
        if len(_PAIRS) >= MAX_CACHED:
            _PAIRS.clear()
        found = _PAIRS[key] = (a, b, fn(a, b))
    return found[2]
