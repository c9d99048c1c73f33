"""Async copies in flight: started, and not yet taken back by the waits on their semaphore.

On the chip a copy lands in pieces, any time between its start and the wait that takes its
count back, and a DMA semaphore counts what has landed from any copy on it: a wait cannot tell
which of several copies on one semaphore landed, nor whether all of one did. So, for one
program (``checks=True``) and for programs run together (``programs``) alike:

1. a start puts the copy on its semaphore's list and adds its count to what the semaphore owes;
2. a wait takes its count from what is owed. When nothing is owed any more, every copy on the
   list has landed and leaves it. Else none is certain to have landed: each stays in flight and
   remembers the wait, which completed while more than it took was in flight there, so pieces
   of any of those copies could have satisfied it (two copies of one size on one receive
   semaphore: the wait meant for the first can be satisfied by the second's arrival);
3. while a copy is in flight, an access to its destination, or a write to its source, is an
   error (``busy``): among programs run together a ``RaceError`` naming the copy's start, the
   access, and the wait that left the copy in flight with the other copies that could have
   satisfied it;
4. among programs run together, a wait that landed every copy on its semaphore is remembered
   (``Landed``) until the next wait there, with the first access since to a destination of
   those copies. A copy started there meanwhile that nothing orders after the wait (its program
   is not the waiter's, and has not synchronized with anything the waiter did after it) could
   have arrived first under another schedule and satisfied the wait: the landed copies are in
   flight again, as in 2, and an access already made to one is the race (``rival``). So the
   schedule that let the waiter finish first names the race as well as one that did not.

A copy onto itself writes what it reads: it holds only its source. So does a remote copy's send
side (the importer's copy of the source onto itself on the send semaphore,
``interop/importer/rules/dma.py``, right after the copy from that window), until
``wait_send`` takes it back; the receive side then holds only its destination, until the target's
receive wait.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from minipallas.ir.core import Op
from minipallas.ir.interpret.races import READ
from minipallas.ir.interpret.windows import Access

_NONE = np.zeros(0, np.int64)
_TOP = np.iinfo(np.int64).max  # an empty array's span is (_TOP, -1): it meets nothing


@dataclass(eq=False)  # copies are told apart by identity
class Copy:
    """One copy in flight: who started it where, the byte addresses it reads and writes."""

    start: Op
    program: int
    src: np.ndarray
    dst: np.ndarray
    count: int
    target: int | None = None  # the program whose row it writes, where memory has rows
    sends: Copy | None = None  # for a send side: the copy whose source it holds
    wait: tuple[Op, int, int, int] | None = None  # (op, program, taken, owed): left in flight
    others: list[Copy] = field(default_factory=list)  # what else was in flight at that wait
    spans: dict[str, tuple] = field(default_factory=dict)  # _overlap's: what -> (held, lo, hi)


@dataclass(eq=False)
class Landed:
    """The copies a wait landed (module doc, 4): the wait, its program and that program's own
    clock then, what it took and what was owed, and the first access to their destinations
    since, as ``(copy, byte, access)``."""

    op: Op
    program: int
    time: int
    copies: list[Copy]
    taken: int
    owed: int
    access: tuple | None = None


class InFlight:
    """The copies in flight, by semaphore (its counter's address), with what each owes."""

    def __init__(self) -> None:
        self.by_semaphore: dict[int, list[Copy]] = {}
        self.owed: dict[int, int] = {}
        self._last: dict[int, Copy] = {}  # program -> the last copy it started
        self.landed: dict[int, Landed] = {}  # semaphore -> its last wait's, among programs

    def start(self, semaphore: int, copy: Copy) -> None:
        last = self._last.get(copy.program)
        if np.array_equal(copy.src, copy.dst):  # onto itself: it only holds its source
            copy.dst = _NONE
            if last is not None and np.array_equal(last.src, copy.src):  # a send side
                last.src, copy.sends = _NONE, last
        self._last[copy.program] = copy
        self.by_semaphore.setdefault(semaphore, []).append(copy)
        self.owed[semaphore] = self.owed.get(semaphore, 0) + copy.count

    def wait(
        self, semaphore: int, count: int, op: Op, program: int, time: int | None = None
    ) -> None:
        """A wait took ``count`` from ``semaphore`` (module doc, 2); ``time``: the waiting
        program's own clock, to remember what it lands (module doc, 4), or None."""
        self.landed.pop(semaphore, None)
        copies = self.by_semaphore.get(semaphore)
        if not copies:
            return
        owed = self.owed[semaphore]
        if owed - count <= 0:
            del self.by_semaphore[semaphore], self.owed[semaphore]
            if time is not None:
                self.landed[semaphore] = Landed(op, program, time, copies, count, owed)
            return
        self.owed[semaphore] = owed - count
        for c in copies:
            if c.wait is None:
                c.wait = (op, program, count, owed)
                c.others = [o for o in copies if o is not c]

    def busy(self, touched: np.ndarray, kind: str) -> tuple[Copy, str, int] | None:
        """The first copy in flight that an access of ``kind`` to the byte addresses ``touched``
        collides with: the copy, ``"destination"`` or ``"source"``, and the first such byte."""
        lo, hi = touched.min(initial=_TOP), touched.max(initial=-1)
        for copies in self.by_semaphore.values():
            for copy in copies:
                for what, held in (("destination", copy.dst), ("source", copy.src)):
                    if (what == "source" and kind == READ) or not _overlap(copy, what, lo, hi):
                        continue
                    hit = np.isin(touched, held)
                    if hit.any():
                        return copy, what, int(touched[np.argmax(hit)])
        return None

    def note(self, touched: np.ndarray, access: tuple) -> None:
        """Remembers the first access to a destination of copies a wait landed (``Landed``)."""
        lo, hi = touched.min(initial=_TOP), touched.max(initial=-1)
        for landed in self.landed.values():
            for copy in landed.copies if landed.access is None else ():
                hit = _overlap(copy, "destination", lo, hi) and np.isin(touched, copy.dst)
                if np.any(hit):
                    landed.access = (copy, int(touched[np.argmax(hit)]), access)
                    break

    def rival(
        self, semaphore: int, copy: Copy, ordered: Callable[[int, Landed], bool]
    ) -> tuple | None:
        """After ``copy`` started on ``semaphore``: when the copies its last wait landed could
        have been overtaken by it (``ordered(program, landed)`` is false), they are in flight
        again, and the first access to one since that wait is returned (module doc, 4)."""
        landed = self.landed.get(semaphore)
        if landed is None or copy.program == landed.program or ordered(copy.program, landed):
            return None
        del self.landed[semaphore]
        for c in landed.copies:
            c.wait, c.others = (landed.op, landed.program, landed.taken, landed.owed), [copy]
        self.by_semaphore[semaphore] = [*landed.copies, *self.by_semaphore[semaphore]]
        return landed.access

    def pending(self) -> Copy | None:
        """A copy still in flight (at the end of a program: one never waited for)."""
        return next((c for cs in self.by_semaphore.values() for c in cs), None)

    # ----- one program under checks -----

    def check(
        self, interp: Any, op: Op, data: np.ndarray, access: Access, kind: str, mask: Any = None
    ) -> None:
        """Raises if the access touches a copy in flight (module doc, 3)."""
        found = self.busy(addresses(data, access, mask), kind) if self.by_semaphore else None
        if found is not None:
            copy, what, _ = found
            verb = "reads" if kind == READ else "writes"
            raise interp.error(
                op,
                f"{verb} the {what} of an async copy still in flight (started at "
                f"{copy.start.loc}): on the chip this is undefined",
                fix="wait for the copy first (copy.wait()), or use another buffer",
            )

    def finish(self, interp: Any) -> None:
        """At the end of the program: a copy still in flight was never waited for."""
        copy = self.pending()
        if copy is not None:
            raise interp.error(
                copy.start,
                "this async copy is never waited for: on the chip the kernel ends with it in "
                "flight (its destination undefined, its semaphore not back at 0)",
                fix="wait for every copy started (copy.wait()) before the kernel ends",
            )


def _overlap(copy: Copy, what: str, lo: int, hi: int) -> bool:
    """Whether the copy's ``what`` may hold a byte in ``lo..hi``: skips most ``np.isin``s (each
    builds a table over its arrays' range). The span is kept with its array, which may change."""
    held = copy.dst if what == "destination" else copy.src
    kept = copy.spans.get(what)
    if kept is None or kept[0] is not held:
        kept = copy.spans[what] = (held, held.min(initial=_TOP), held.max(initial=-1))
    return kept[1] <= hi and lo <= kept[2]


def addresses(array: np.ndarray, access: Access, mask: Any = None) -> np.ndarray:
    """The byte address of each element of ``array`` the window names (where ``mask`` and the
    window's ``valid`` say it is touched): what two accesses through any views share."""
    if access.basic:
        view = array[access.index + (Ellipsis,)]
        offsets = np.zeros((), np.int64)
        for n, stride in zip(view.shape, view.strides, strict=True):
            offsets = np.add.outer(offsets, np.arange(n, dtype=np.int64) * stride)
    else:
        view = array
        offsets = sum(
            (np.asarray(i, np.int64) * s for i, s in zip(access.index, array.strides, strict=True)),
            np.zeros((), np.int64),
        )
    touched = access.valid
    if mask is not None:
        mask = np.broadcast_to(mask, np.shape(offsets))
        touched = mask if touched is None else touched & mask
    offsets = offsets if touched is None else np.broadcast_to(offsets, np.shape(touched))[touched]
    return np.asarray(offsets).ravel() + view.__array_interface__["data"][0]
