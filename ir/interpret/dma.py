"""Rules for ``dma_start`` and ``dma_wait``: the copy happens at the start, as upstream's
discharge rules (and so its ``interpret=True``) do it, and the semaphore counts elements.

- ``dma_start`` reads the whole source window (under initialization tracking, an unwritten
  element is an error, as for ``get``), writes it into the destination and adds
  ``copy_count`` to the semaphore.
- ``dma_wait`` takes ``copy_count`` of its destination back; when the semaphore holds less, no
  copy that could raise it is in flight, and on the chip the wait would hang: a
  ``DeadlockError``.

Among programs run together (``programs``), the race check sees a copy's reads and writes at
its start and again at its wait, since it may land any time in between: a signal sent before
the wait orders nothing about the destination.

On the chip a copy is only done once waited for: reading or writing its destination, or
writing its source, in between is undefined. By default the interpreter defines it, as
upstream's interpret mode does (the copy is already done). With ``checks=True`` it reports it
(``InFlight``), as it reports out-of-range indices: each copy stays in flight until the waits
on its semaphore have taken back everything started on it (a wait cannot tell which of several
copies on one semaphore landed), and any access to memory it may still touch is an error
naming the copy's start, and so is a copy still in flight when the program ends (unless it
is one step of a grid: ``program_ids`` given).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from minipallas.ir.core import Op
from minipallas.ir.interpret.engine import Interpreter, Ref, rule
from minipallas.ir.interpret.races import READ, WRITE
from minipallas.ir.interpret.semaphore import counter_at, give, take
from minipallas.ir.interpret.state import check_initialized
from minipallas.ir.interpret.windows import Access, read, through, write
from minipallas.ir.opset.dma import copy_count

_ONE = Access((), True)  # the scalar window of a 0-d ref


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


@dataclass
class _Copy:
    start: Op
    src: np.ndarray  # the byte addresses it reads
    dst: np.ndarray  # ... and writes


class InFlight:
    """The copies started and not yet waited for, by semaphore (its counter's address), with
    the count still to be taken back there."""

    def __init__(self) -> None:
        self.by_semaphore: dict[int, tuple[int, list[_Copy]]] = {}

    def check(
        self, interp: Interpreter, op: Op, data: np.ndarray, access: Access, kind: str,
        mask: Any = None,
    ) -> None:  # fmt: skip
        """Raises if the access touches memory a copy in flight writes (or, for a write, reads)."""
        if not self.by_semaphore:
            return
        touched = addresses(data, access, mask)
        for _, copies in self.by_semaphore.values():
            for copy in copies:
                for what, busy in (("destination", copy.dst), ("source", copy.src)):
                    if (what == "source" and kind == READ) or not np.isin(touched, busy).any():
                        continue
                    verb = "reads" if kind == READ else "writes"
                    raise interp.error(
                        op,
                        f"{verb} the {what} of an async copy still in flight (started at "
                        f"{copy.start.loc}): on the chip this is undefined",
                        fix="wait for the copy first (copy.wait()), or use another buffer",
                    )

    def finish(self, interp: Interpreter) -> None:
        """At the end of the program: a copy still in flight was never waited for."""
        for _, copies in self.by_semaphore.values():
            raise interp.error(
                copies[0].start,
                "this async copy is never waited for: on the chip the kernel ends with it in "
                "flight (its destination undefined, its semaphore not back at 0)",
                fix="wait for every copy started (copy.wait()) before the kernel ends",
            )

    def start(self, sem: np.ndarray, copy: _Copy, count: int) -> None:
        key = sem.__array_interface__["data"][0]
        owed, copies = self.by_semaphore.get(key, (0, []))
        self.by_semaphore[key] = (owed + count, [*copies, copy])

    def wait(self, sem: np.ndarray, count: int) -> None:
        """A wait takes ``count`` back; the semaphore's copies land once all is taken back."""
        key = sem.__array_interface__["data"][0]
        if key not in self.by_semaphore:
            return
        owed, copies = self.by_semaphore[key]
        if owed - count > 0:
            self.by_semaphore[key] = (owed - count, copies)
        else:
            del self.by_semaphore[key]


def _whole(interp: Interpreter, op: Op, ref: Ref, kind: str) -> Access:
    """Where all of ``ref`` lands in its storage; among programs run together, a race check;
    under checks, the check against copies in flight."""
    access = through(ref, Access(tuple(slice(None) for _ in ref.shape), True))
    if interp.together is not None:
        interp.together.touch(interp, op, ref.data, access, kind)
    if interp.copies is not None:
        interp.copies.check(interp, op, ref.data, access, kind)
    return access


@rule("dma_start")
def dma_start(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    src, dst, sem = args
    source = _whole(interp, op, src, READ)
    check_initialized(interp, op, src, source)
    target = _whole(interp, op, dst, WRITE)
    write(dst.data, target, read(src.data, source))
    if dst.written is not None:
        write(dst.written, target, True)
    counter, count = counter_at(sem, _ONE), copy_count(op.operands[1].type)
    give(interp, counter, count)
    if interp.checks:
        if interp.copies is None:
            interp.copies = InFlight()
        copy = _Copy(op, addresses(src.data, source), addresses(dst.data, target))
        interp.copies.start(counter, copy, count)
    return ()


@rule("dma_wait")
def dma_wait(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    fix = ("start the copy first (make_async_copy(src, dst, sem).start()), and wait once "
           "per start, with a destination of the started copy's size")  # fmt: skip
    counter, count = counter_at(args[2], _ONE), copy_count(op.operands[1].type)
    take(interp, op, counter, count, True, fix)
    if interp.copies is not None:
        interp.copies.wait(counter, count)
    if interp.together is not None:  # the copy lands any time up to here: checked here too
        for ref, kind in ((args[0], READ), (args[1], WRITE)):
            whole = through(ref, Access(tuple(slice(None) for _ in ref.shape), True))
            interp.together.touch(interp, op, ref.data, whole, kind)
    return ()
