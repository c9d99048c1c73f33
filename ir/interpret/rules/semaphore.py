"""Rules for ``semaphore_signal``, ``semaphore_wait`` and ``semaphore_read``.

A semaphore is one int32 element of a semaphore ref; the rules change it in place. Among
programs that run together (``programs``), a shared semaphore is how they synchronize: a signal
is a switch point, and a wait blocks its program until the count reaches its value. A wait
that no program can ever satisfy (a program alone, or a private semaphore) is a
``DeadlockError`` at once: on hardware it would hang.

A ``semaphore_read`` of a DMA semaphore holding a count (copies not yet waited for) has no one
meaning: the chip's count grows as pieces land, upstream's ``interpret=True`` counts elements
(as the interpreter alone does), its TPU interpret mode bytes (as ``programs`` does) and reads
no semaphore at all. Under ``checks`` and among programs run together it is an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from minipallas.ir.core import Op
from minipallas.ir.errors import DeadlockError
from minipallas.ir.interpret.engine import Interpreter, Ref, rule
from minipallas.ir.interpret.windows import Access, locate, through
from minipallas.ir.types import DMA_SEMAPHORE


def counter_at(ref: Ref, access: Access) -> np.ndarray:
    """The one semaphore a located scalar window of ``ref`` names, as a 0-d view of its
    storage (writes to it count)."""
    access = through(ref, access)
    index = access.index if access.basic else tuple(int(i) for i in access.index)
    return ref.data[index + (Ellipsis,)]


def _counter(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple[np.ndarray, Sequence]:
    """The op's semaphore as a 0-d view of the ref's storage, and its value operands."""
    ref = args[0]
    indexer, indices = op.attrs["indexer"], op.slices()["indices"]
    counter = counter_at(ref, locate(interp, op, indexer, ref.shape, args[indices]))
    return counter, args[indices.stop :]


def give(interp: Interpreter, op: Op, counter: np.ndarray, inc: Any) -> None:
    """``op`` adds ``inc`` to ``counter`` (a 0-d view of a semaphore's storage)."""
    if interp.together is not None:
        interp.together.signal(interp, op, counter)
    counter[...] = counter + np.int32(inc)


def take(
    interp: Interpreter, op: Op, counter: np.ndarray, value: int, decrement: bool, fix: str
) -> None:
    """Waits until ``counter`` holds ``value`` (a ``DeadlockError`` when nothing can raise it),
    then subtracts it when ``decrement``."""
    if interp.together is not None:
        interp.together.wait(interp, op, counter, value)
    if int(counter) < value:
        raise DeadlockError(
            f"waits for {value} on a semaphore that holds {int(counter)}, and no other "
            "program can signal it",
            op=op.name,
            loc=op.loc,
            fix=fix,
        )
    if decrement:
        counter[...] = counter - np.int32(value)


@rule("semaphore_signal")
def semaphore_signal(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    counter, (inc,) = _counter(interp, op, args)
    give(interp, op, counter, inc)
    return ()


@rule("semaphore_wait")
def semaphore_wait(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    counter, (value,) = _counter(interp, op, args)
    fix = ("signal it first, or share it among programs that run together "
           "(run_scoped(..., collective_axes=...) under collectives='simulate')")  # fmt: skip
    take(interp, op, counter, int(value), op.attrs.get("decrement", True), fix)
    return ()


@rule("semaphore_read")
def semaphore_read(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    counter, _ = _counter(interp, op, args)
    if interp.together is not None:
        interp.together.peek(interp, counter)
    if int(counter) and _undefined(interp, op):
        unit = "bytes" if interp.together is not None else "elements"
        raise interp.error(
            op,
            f"reads a DMA semaphore that holds {int(counter)} ({unit} of copies not yet waited "
            "for): on the chip that count grows as the copies' pieces land, so the value is "
            "undefined; upstream's TPU interpret mode has no rule for semaphore_read, and its "
            "interpret=True counts elements where its TPU interpret mode counts bytes",
            fix="read a DMA semaphore only after the waits for every copy on it (it holds 0 "
            "then), or count arrivals on a REGULAR semaphore (semaphore_signal after each wait)",
        )
    return (np.int32(counter),)


def _undefined(interp: Interpreter, op: Op) -> bool:
    """Whether a read of ``op``'s semaphore with a count is reported (module doc)."""
    dma = op.operands[0].type.memory_space == DMA_SEMAPHORE
    return dma and (interp.together is not None or interp.checks)
