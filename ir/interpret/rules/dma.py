"""Rules for ``dma_start`` and ``dma_wait``: the copy happens at the start, as upstream's
discharge rules (and so its ``interpret=True``) do it.

- ``dma_start`` reads the whole source window (under initialization tracking, an unwritten
  element is an error, as for ``get``), writes it into the destination and adds the copy's
  count to the semaphore.
- ``dma_wait`` takes its destination's count back; when the semaphore holds less, no copy
  that could raise it is in flight, and on the chip the wait would hang: a ``DeadlockError``.

What a copy counts: alone, its elements (at most ``COUNT_MAX``), as upstream's discharge rules
count them (``copy_count``); among programs run together (``collectives="simulate"``, the model
of devices and cores), its bytes, as upstream's TPU interpret mode and the chip count them
(``copy_bytes``), so a wait on a semaphore that copies of other sizes or dtypes share is
satisfied exactly when upstream's would be.

Among programs run together (``programs``), the race check sees a copy's reads and writes at
its start and again at its wait, since it may land any time in between: a signal sent before
the wait orders nothing about the destination; and the copy stays in flight (``inflight``)
until the waits on its semaphore take it back: touching it meanwhile is a ``RaceError``.

On the chip a copy is only done once waited for: reading or writing its destination, or
writing its source, in between is undefined. Run alone, the interpreter defines it by
default, as upstream's interpret mode does (the copy is already done). With ``checks=True`` it
reports it by the same rule (``inflight``), as it reports out-of-range indices: an error naming
the copy's start, and so is a copy still in flight when the program ends (unless it is one
step of a grid: ``program_ids`` given).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.core import Op
from minipallas.ir.interpret.engine import Interpreter, Ref, rule
from minipallas.ir.interpret.inflight import Copy, InFlight, addresses
from minipallas.ir.interpret.races import READ, WRITE
from minipallas.ir.interpret.rules.semaphore import counter_at, give, take
from minipallas.ir.interpret.rules.state import check_initialized
from minipallas.ir.interpret.windows import Access, read, through, write
from minipallas.ir.opset.dma import copy_count
from minipallas.ir.types import RefType

_ONE = Access((), True)  # the scalar window of a 0-d ref
_INT32_MAX = 2**31 - 1


def copy_bytes(t: RefType) -> int:
    """What one copy of a ``t``-shaped window counts among programs run together: its bytes."""
    return t.value_type.size * dtypes.to_numpy(t.dtype).itemsize


def _count(interp: Interpreter, op: Op) -> int:
    """What ``op`` 's copy adds to (or its wait takes from) its semaphore (module doc)."""
    t = op.operands[1].type
    if interp.together is None:
        return copy_count(t)
    count = copy_bytes(t)
    if count > _INT32_MAX:
        raise interp.error(
            op,
            f"copies {count} bytes, more than a DMA semaphore (int32) counts",
            fix="copy in pieces of less than 2 GiB",
        )
    return count


def _whole(
    interp: Interpreter, op: Op, ref: Ref, kind: str, access: Access | None = None
) -> Access:
    """Where all of ``ref`` lands in its storage; among programs run together, a race check;
    under checks, the check against copies in flight."""
    if access is None:
        access = through(ref, Access(tuple(slice(None) for _ in ref.shape), True))
    if interp.together is not None:
        interp.together.touch(interp, op, ref.data, access, kind)
    if interp.copies is not None:
        interp.copies.check(interp, op, ref.data, access, kind)
    return access


def _flights(interp: Interpreter) -> InFlight | None:
    """Where copies in flight are kept: shared among programs run together, a program's own
    under checks, else nowhere."""
    if interp.together is not None:
        return interp.together.flights
    if interp.checks and interp.copies is None:
        interp.copies = InFlight()
    return interp.copies


def _key(counter: np.ndarray) -> int:
    return counter.__array_interface__["data"][0]


@rule("dma_start")
def dma_start(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    src, dst, sem = args
    source = _whole(interp, op, src, READ)
    check_initialized(interp, op, src, source)
    target = through(dst, Access(tuple(slice(None) for _ in dst.shape), True))
    reads, writes = addresses(src.data, source), addresses(dst.data, target)
    onto_itself = np.array_equal(reads, writes)  # a remote copy's send side: it only reads
    _whole(interp, op, dst, READ if onto_itself else WRITE, target)
    write(dst.data, target, read(src.data, source))
    if dst.written is not None:
        write(dst.written, target, True)
    counter, count = counter_at(sem, _ONE), _count(interp, op)
    give(interp, op, counter, count)
    flights = _flights(interp)
    if flights is not None:
        copy = Copy(op, interp.program or 0, reads, writes, count)
        if interp.together is None:
            flights.start(_key(counter), copy)
        else:
            copy.target = interp.together.row_of(dst.data, target)
            interp.together.started(interp, counter, copy)
    return ()


@rule("dma_wait")
def dma_wait(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    fix = ("start the copy first (make_async_copy(src, dst, sem).start()), and wait once "
           "per start, with a destination of the started copy's size")  # fmt: skip
    counter, count = counter_at(args[2], _ONE), _count(interp, op)
    take(interp, op, counter, count, True, fix)
    if interp.together is not None:
        interp.together.waited(interp, op, counter, count)
    elif interp.copies is not None:
        interp.copies.wait(_key(counter), count, op, 0)  # no time: alone, nothing overtakes
    if interp.together is not None:  # the copy lands any time up to here: checked here too
        for ref, kind in ((args[0], READ), (args[1], WRITE)):
            whole = through(ref, Access(tuple(slice(None) for _ in ref.shape), True))
            interp.together.touch(interp, op, ref.data, whole, kind)
    return ()
