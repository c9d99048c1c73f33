"""Exact race detection for programs that run together (``collectives="simulate"``).

Two programs *race* when they touch the same element of shared memory (an argument every
program sees, or a collective ``run_scoped`` allocation), at least one of them writes, it is not
a pair of accumulates, and no barrier (or semaphore signal and wait) orders one access before
the other.

Order comes from vector clocks. Program ``p`` keeps ``clock[p]``, one counter per program:
``clock[p][p]`` is how many barriers and signals ``p`` has passed, ``clock[p][q]`` the last of
``q``'s counters that ``p`` has synchronized with. A barrier sets every participant's clock to
the participants' elementwise maximum, then advances each participant's own counter. A
semaphore signal advances its program's counter and joins its clock into the semaphore's; a
wait joins the semaphore's clock into its program's (``programs``). An access ``q`` made at its
counter ``t`` is ordered before ``p``'s present iff ``t < clock[p][q]``.

Every shared element remembers, per kind, who touched it last and when: the last write (one
program: two unordered writes are already a race), and per program its last read and last
accumulate (many programs may read, or accumulate, at once). An access checks only the
elements it touches against those records, so the cost is linear in the accesses (times the
number of programs that read or accumulate the same buffer). The element identity of a window
is computed from numpy's own addresses (``element_ids``), so views, transposes and reshapes of
a buffer need no bookkeeping of their own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from minipallas.ir.core import Op
from minipallas.ir.errors import RaceError
from minipallas.ir.interpret.windows import Access

if TYPE_CHECKING:
    from minipallas.ir.interpret.inflight import Copy

READ, WRITE, ACCUM = "read", "write", "accum"


@dataclass
class _Buffer:
    """One shared array: its byte range, and its elements' records (by element, in order)."""

    array: np.ndarray
    start: int  # byte address of element 0
    writer: np.ndarray  # program of the last write, -1 for none
    written_at: np.ndarray  # that program's counter then
    write_op: np.ndarray  # index into RaceDetector.ops
    reads: dict[int, tuple[np.ndarray, np.ndarray]]  # program -> (counter, op) per element
    accums: dict[int, tuple[np.ndarray, np.ndarray]]

    @property
    def end(self) -> int:
        return self.start + self.array.nbytes


class RaceDetector:
    """The records of every shared buffer; ``access`` checks and records one access."""

    def __init__(self, names: list[str]) -> None:
        self.names = names  # program number -> how to print it, e.g. "(1, 0)"
        self.buffers: list[_Buffer] = []
        self.ops: list[Op] = []
        self._op_numbers: dict[int, int] = {}

    def share(self, array: np.ndarray) -> None:
        """Watch ``array`` (contiguous, as allocations and bound arguments are)."""
        n = array.size
        start = array.__array_interface__["data"][0]
        if any(b.start == start and b.array.nbytes == array.nbytes for b in self.buffers):
            return
        self.buffers.append(
            _Buffer(
                array,
                start,
                np.full(n, -1, np.int32),
                np.zeros(n, np.int64),
                np.zeros(n, np.int32),
                {},
                {},
            )
        )

    def buffer_of(self, data: np.ndarray) -> _Buffer | None:
        address = data.__array_interface__["data"][0]
        for b in self.buffers:
            if b.start <= address < b.end or (data.size == 0 and address == b.start):
                return b
        return None

    def access(
        self,
        op: Op,
        buffer: _Buffer,
        data: np.ndarray,
        access: Access,
        kind: str,
        program: int,
        clock: np.ndarray,
        mask: Any = None,
    ) -> None:
        """Checks an access of ``kind`` by ``program`` (whose vector clock is ``clock``) to the
        window ``access`` of ``data``, a view of ``buffer`` (``buffer_of``); raises
        ``RaceError`` naming both ops, else records it."""
        ids = element_ids(buffer, data, access, mask)
        if ids.size == 0:
            return
        now = clock[program]
        number = self._number(op)
        writer = buffer.writer[ids]
        seen = writer >= 0
        others = seen & (writer != program)
        if others.any():
            w = writer[others]
            late = buffer.written_at[ids][others] >= clock[w]
            if late.any():
                k = int(np.flatnonzero(others)[np.flatnonzero(late)[0]])
                culprit = (WRITE, int(writer[k]), int(buffer.write_op[ids[k]]))
                self._raise(op, kind, program, buffer, ids[k], *culprit)
        against = {WRITE: (READ, ACCUM), READ: (ACCUM,), ACCUM: (READ,)}[kind]
        for other_kind in against:
            table = buffer.reads if other_kind == READ else buffer.accums
            for q, (times, ops) in table.items():
                if q == program:
                    continue
                late = times[ids] >= clock[q]
                if late.any():
                    k = int(np.flatnonzero(late)[0])
                    self._raise(op, kind, program, buffer, ids[k], other_kind, q, int(ops[ids[k]]))
        if kind == WRITE:
            buffer.writer[ids] = program
            buffer.written_at[ids] = now
            buffer.write_op[ids] = number
        else:
            table = buffer.reads if kind == READ else buffer.accums
            if program not in table:
                n = buffer.array.size
                table[program] = (np.full(n, -1, np.int64), np.zeros(n, np.int32))
            times, ops = table[program]
            times[ids] = now
            ops[ids] = number

    def _number(self, op: Op) -> int:
        number = self._op_numbers.get(id(op))
        if number is None:
            number = self._op_numbers[id(op)] = len(self.ops)
            self.ops.append(op)
        return number

    def _raise(
        self, op: Op, kind: str, program: int, buffer: _Buffer, element: int,
        other_kind: str, other: int, other_op: int,
    ) -> None:  # fmt: skip
        position = tuple(int(i) for i in np.unravel_index(element, buffer.array.shape))
        first = self.ops[other_op]
        raise RaceError(
            f"program {self.names[program]} {_verb(kind)} element {list(position)} of a shared "
            f"{_describe(buffer.array)} that program {self.names[other]} {_verb(other_kind)} "
            f"at {first.loc} ('{first.name}'), with no barrier or semaphore wait between them",
            op=op.name,
            loc=op.loc,
            fix="put a minipallas.barrier(axes) between the two accesses (or a semaphore_signal "
            "after the first and a semaphore_wait before the second), or give each program its "
            "own elements",
            first=(first.name, first.loc, self.names[other]),
            second=(op.name, op.loc, self.names[program]),
        )

    def in_flight(
        self, op: Op, kind: str, program: int, buffer: _Buffer, copy: Copy, what: str, byte: int,
    ) -> RaceError:  # fmt: skip
        """The race of ``program`` 's access to the ``what`` of ``copy``, in flight, at the
        byte address ``byte`` of ``buffer`` (``inflight``)."""
        element = (byte - buffer.start) // buffer.array.itemsize
        position = [int(i) for i in np.unravel_index(element, buffer.array.shape)]
        starter = self.names[copy.program]
        to = "" if copy.target is None else f" into program {self.names[copy.target]}'s row"
        if copy.sends is not None and copy.sends.target is not None:
            to = f" to program {self.names[copy.sends.target]}"
        head = (
            f"program {self.names[program]} {_verb(kind)} element {position} of a shared "
            f"{_describe(buffer.array)}, the {what} of the async copy program {starter} "
            f"started at {copy.start.loc}{to}, still in flight: "
        )
        if what == "source":
            why = "its send wait (wait_send) has not taken it back"
            fix = ("wait for the copy's send side first (copy.wait_send(), or copy.wait()), or "
                   "write another buffer")  # fmt: skip
        elif copy.wait is None:
            why = "no wait on its semaphore has taken it back"
            fix = "wait for the copy first (copy.wait_recv(), or copy.wait()), or use other memory"
        else:
            wait, waiter, taken, owed = copy.wait
            rivals = "; ".join(
                f"the copy program {self.names[o.program]} started at {o.start.loc}"
                for o in copy.others
            )
            head += (
                f"the wait at {wait.loc} ('{wait.name}') of program {self.names[waiter]} took "
                f"{taken} from its semaphore "
            )
            if owed > taken:
                why = (
                    f"while {owed} were in flight there, so it may have been satisfied by "
                    f"{rivals or 'part of this copy'} instead"
                )
            else:  # predicted (``inflight``, 4)
                why = (
                    f"when only this copy was in flight there, but {rivals}, which nothing "
                    "orders after that wait, could have arrived first and satisfied it"
                )
            why += " (a DMA semaphore counts what lands, from any copy on it, in pieces)"
            fix = ("give each copy that may be in flight at once its own semaphore "
                   "(sem.at[slot]), or make sure the sender starts the next copy only after "
                   "the receiver's wait (a handshake)")  # fmt: skip
        return RaceError(
            head + why,
            op=op.name,
            loc=op.loc,
            fix=fix,
            first=(copy.start.name, copy.start.loc, starter),
            second=(op.name, op.loc, self.names[program]),
        )


def element_ids(buffer: _Buffer, data: np.ndarray, access: Access, mask: Any) -> np.ndarray:
    """The flat positions in ``buffer`` of the elements the window touches (where ``mask``).
    A position may repeat (an index array may name it twice): checks and records of the same
    access are the same for each copy, so repeats need no removal."""
    itemsize = buffer.array.itemsize
    if access.basic:
        window = data[access.index + (Ellipsis,)]
        offset = window.__array_interface__["data"][0] - buffer.start
        grids = np.ix_(
            *(np.arange(n) * s for n, s in zip(window.shape, window.strides, strict=True))
        )
        offsets = offset + sum(grids, np.zeros((), np.int64))
        offsets = np.broadcast_to(offsets, window.shape)
    else:
        offset = data.__array_interface__["data"][0] - buffer.start
        offsets = offset + sum(
            (np.asarray(i, np.int64) * s for i, s in zip(access.index, data.strides, strict=True)),
            np.zeros((), np.int64),
        )
        if access.valid is not None:
            mask = access.valid if mask is None else (np.asarray(mask) & access.valid)
    if mask is not None:
        offsets = offsets[np.broadcast_to(np.asarray(mask), offsets.shape)]
    return np.asarray(offsets).ravel() // itemsize


def _verb(kind: str) -> str:
    return {READ: "reads", WRITE: "writes", ACCUM: "accumulates into"}[kind]


def _describe(array: np.ndarray) -> str:
    return f"{array.dtype}[{','.join(map(str, array.shape))}] buffer"
