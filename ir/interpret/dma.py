"""Rules for ``dma_start`` and ``dma_wait``: the copy happens at the start, as upstream's
discharge rules (and so its ``interpret=True``) do it, and the semaphore counts elements.

- ``dma_start`` reads the whole source window (under initialization tracking, an unwritten
  element is an error, as for ``get``), writes it into the destination and adds
  ``copy_count`` to the semaphore.
- ``dma_wait`` takes ``copy_count`` of its destination back; when the semaphore holds less, no
  copy that could raise it is in flight, and on the chip the wait would hang: a
  ``DeadlockError``.

Not reported: a read of the destination (or a write of the source) between the start and the
wait. On the chip that read sees undefined data; here, as in upstream's interpret mode, it sees
the copied data, since the copy is already done.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from minipallas.ir.core import Op
from minipallas.ir.interpret.engine import Interpreter, Ref, rule
from minipallas.ir.interpret.races import READ, WRITE
from minipallas.ir.interpret.semaphore import counter_at, give, take
from minipallas.ir.interpret.state import check_initialized
from minipallas.ir.interpret.windows import Access, read, through, write
from minipallas.ir.opset.dma import copy_count

_ONE = Access((), True)  # the scalar window of a 0-d ref


def _whole(interp: Interpreter, op: Op, ref: Ref, kind: str) -> Access:
    """Where all of ``ref`` lands in its storage; among programs run together, a race check."""
    access = through(ref, Access(tuple(slice(None) for _ in ref.shape), True))
    if interp.together is not None:
        interp.together.touch(interp, op, ref.data, access, kind)
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
    give(interp, counter_at(sem, _ONE), copy_count(op.operands[1].type))
    return ()


@rule("dma_wait")
def dma_wait(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    fix = ("start the copy first (make_async_copy(src, dst, sem).start()), and wait once "
           "per start, with a destination of the started copy's size")  # fmt: skip
    take(interp, op, counter_at(args[2], _ONE), copy_count(op.operands[1].type), True, fix)
    return ()
