"""The multi-program interpreter: every program of a grid at once (``collectives="simulate"``).

Upstream Pallas has no way to run a ``run_scoped(..., collective_axes=...)`` over grid axes;
this is minipallas's model of what it means, written down so it can be tested:

- every program of the grid runs the same function over the same arguments, each with its
  ``program_id``s; refs passed in are shared by all of them;
- programs that differ only along the named ``collective_axes`` form a *group*: at a collective
  ``run_scoped`` the group gets one allocation (the first program to enter allocates it; the
  k-th entry of each program meets the k-th of the others), and ``barrier(axes)`` makes every
  program of its group wait until all have arrived;
- a semaphore of such an allocation is shared the same way: ``semaphore_wait`` blocks its
  program until other programs' ``semaphore_signal``s raise the count to its value;
- the schedule: programs switch at every access to shared memory, at every barrier and at
  every op on a shared semaphore.
  ``"lockstep"`` takes the ready programs in turn, in grid order (so all programs of a group
  make the same access before any makes the next one); an int is a seed for random
  interleavings. A program blocked at a wait is ready again once the count allows it. When no
  program is ready, the barriers whose groups have all arrived are released. A race-free
  program gives the same bits under every schedule.

While they run, ``races.RaceDetector`` checks every access to shared memory. Barriers and
semaphores order accesses, through vector clocks (``races``): a barrier joins its group's clocks;
a signal adds its program's clock to the semaphore's, and a wait takes in what the semaphore
holds (ThreadSanitizer's model: every signal before the wait, not only those it consumed). A
barrier that part of its group never reaches, a wait no signal will satisfy, and a collective
``run_scoped`` that part of its group skips, are ``DeadlockError``s; so is a race that a
skipped barrier causes (the race comes first, as the skipper runs on into accesses the barrier
was there to order, but the error names the barrier, the skipper and the programs waiting
there, with the race as its ``consequence``). Reading shared scratch before any program wrote
it is an ``InterpretError``, as for any scratch under ``uninitialized="error"``.

Each program runs on its own Python thread, but only one runs at a time: a baton passes
between them and this module's scheduler, so a run is deterministic.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from minipallas.ir.core import Function, Op
from minipallas.ir.errors import DeadlockError, InterpretError, MiniPallasError, RaceError
from minipallas.ir.interpret.engine import Interpreter, Ref
from minipallas.ir.interpret.inflight import Copy, InFlight, Landed, addresses
from minipallas.ir.interpret.races import RaceDetector, element_ids
from minipallas.ir.interpret.windows import Access
from minipallas.ir.types import RefType

LOCKSTEP = "lockstep"


class _Aborted(BaseException):
    """Unwinds a program's thread when another program failed (never reaches the user)."""


@dataclass
class _Wait:
    """Where a blocked program waits: at a barrier over ``axes``, or at a semaphore wait until
    ``counter`` (a 0-d view of the semaphore) holds ``value``."""

    op: Op
    axes: tuple[str, ...] | None = None
    counter: np.ndarray | None = None
    value: int = 0

    def satisfied(self) -> bool:
        return self.counter is not None and int(self.counter) >= self.value

    def __str__(self) -> str:
        if self.axes is not None:
            return f"waits at the barrier over {self.axes} at {self.op.loc}"
        return (
            f"waits at {self.op.name} at {self.op.loc} for {self.amount()} (the semaphore holds "
            f"{int(self.counter)})"
        )

    def amount(self) -> str:
        """What the wait waits for: a DMA wait, bytes (among programs run together, ``dma``)."""
        return f"{self.value} bytes" if self.op.name == "dma_wait" else str(self.value)


@dataclass
class _Program:
    number: int
    ids: tuple[int, ...]
    interp: Interpreter
    state: str = "ready"  # ready, running, barrier, semaphore, done
    waiting: _Wait | None = None
    results: list[Any] = field(default_factory=list)
    entries: dict[int, int] = field(default_factory=dict)  # id(run_scoped op) -> times entered
    arrivals: dict[tuple[str, ...], int] = field(default_factory=dict)  # barriers, per axes


class Programs:
    """One simulated run of a grid's programs (module doc)."""

    def __init__(
        self,
        grid: tuple[int, ...],
        grid_names: tuple[str, ...],
        schedule: str | int = LOCKSTEP,
        make_interpreter: Callable[[tuple[int, ...]], Interpreter] | None = None,
        detect_races: bool = True,
    ) -> None:
        if schedule != LOCKSTEP and (isinstance(schedule, bool) or not isinstance(schedule, int)):
            raise InterpretError(
                f"schedule must be 'lockstep' or an int seed, got {schedule!r}",
                fix="schedule='lockstep' (the default) or schedule=0, 1, ... for random orders",
            )
        if len(grid_names) != len(grid) or len(set(grid_names)) != len(grid_names):
            raise InterpretError(
                f"grid_names {grid_names!r} must name each of the {len(grid)} grid axes once",
                fix="pass grid_names=('x', ...), one distinct name per grid axis",
            )
        self.grid, self.grid_names = grid, grid_names
        self.rng = None if schedule == LOCKSTEP else np.random.default_rng(schedule)
        make = make_interpreter or (lambda ids: Interpreter(program_ids=ids, grid=grid))
        points = list(np.ndindex(*grid))
        self.programs = [
            _Program(n, tuple(map(int, ids)), make(ids)) for n, ids in enumerate(points)
        ]
        for p in self.programs:
            p.interp.together, p.interp.program = self, p.number
            p.interp.grid_names = grid_names
        self.clocks = np.zeros((len(points), len(points)), np.int64)
        self.races = RaceDetector([program_name(p.ids) for p in self.programs])
        self.flights = InFlight()  # the async copies in flight, every program's
        self.detect_races = detect_races  # False only to measure what detection costs
        # when a list: every signal and wait on a shared semaphore, as (program ids, barriers
        # passed, "signal" or "wait", the semaphore's address), in the order they happen
        self.events: list[tuple] | None = None
        self._shared: dict[tuple, tuple[list[Ref], set[int], Op]] = {}
        self._semaphores: dict[int, np.ndarray] = {}  # address -> the clocks its signals held
        self._signalled: dict[int, tuple] = {}  # address -> (its counter, last signal, program)
        # the baton: held locks (a program's, the scheduler's); a handoff wakes only the next
        self._wake = [threading.Lock() for _ in self.programs]
        self._back = threading.Lock()
        for lock in (*self._wake, self._back):
            lock.acquire()
        self._abort = False
        self._error: tuple[BaseException, _Program] | None = None
        self._order: dict[Op, tuple[int, int]] = {}  # op -> (function, pre-order position)

    # ----- what the rules call, on a program's thread -----

    def touch(
        self, interp: Interpreter, op: Op, data: np.ndarray, access: Access, kind: str,
        mask: Any = None,
    ) -> None:  # fmt: skip
        """An access to memory: a switch point when the memory is shared, and a race check."""
        buffer = self.races.buffer_of(data)
        if buffer is None:  # the program's own memory
            return
        self._yield(self.programs[interp.program], "ready")
        if self.detect_races:
            p = interp.program
            if (self.flights.by_semaphore or self.flights.landed) and op.name != "dma_wait":
                touched = addresses(data, access, mask)  # (a wait's own copies land)
                found = self.flights.busy(touched, kind)
                if found is not None:
                    raise self.races.in_flight(op, kind, p, buffer, *found)
                self.flights.note(touched, (op, kind, p, buffer))
            try:
                self.races.access(op, buffer, data, access, kind, p, self.clocks[p], mask)
            except RaceError as race:
                raise self._skipped_barrier(self.programs[p], op, race) from None

    def started(self, interp: Interpreter, counter: np.ndarray, copy: Copy) -> None:
        """A copy started on the semaphore ``counter`` (``inflight``); on a shared one, raises
        when it could have overtaken copies the last wait there landed, accessed since."""
        key = counter.__array_interface__["data"][0]
        self.flights.start(key, copy)
        if self._shared_semaphore(counter) is None or not self.detect_races:
            return
        found = self.flights.rival(key, copy, self._after)
        if found is not None:
            landed, byte, (op, kind, p, buffer) = found
            raise self.races.in_flight(op, kind, p, buffer, landed, "destination", byte)

    def _after(self, q: int, landed: Landed) -> bool:
        """Whether program ``q`` now is ordered after the wait ``landed`` (``races``)."""
        return bool(self.clocks[q, landed.program] > landed.time)

    def waited(self, interp: Interpreter, op: Op, counter: np.ndarray, count: int) -> None:
        """A DMA wait took ``count`` from ``counter`` (``inflight``); what it lands is kept
        for ``started`` only on a shared semaphore (a private one's address may be reused)."""
        p, key = interp.program, counter.__array_interface__["data"][0]
        shared = self._shared_semaphore(counter) is not None
        self.flights.wait(key, count, op, p, int(self.clocks[p, p]) if shared else None)

    def row_of(self, data: np.ndarray, access: Access) -> int | None:
        """The program whose row of shared memory the window starts in, where the memory has
        a row per program (its leading dims are the grid's: a kernel that spans devices)."""
        buffer = self.races.buffer_of(data)
        if buffer is None or buffer.array.shape[: len(self.grid)] != self.grid:
            return None
        ids = element_ids(buffer, data, access, None)
        if ids.size == 0:
            return None
        row = np.unravel_index(int(ids[0]), buffer.array.shape)[: len(self.grid)]
        return int(np.ravel_multi_index(row, self.grid))

    def barrier(self, interp: Interpreter, op: Op) -> None:
        axes = op.attrs["axes"]
        self._axis_numbers(op, axes)
        program = self.programs[interp.program]
        program.arrivals[axes] = program.arrivals.get(axes, 0) + 1
        program.waiting = _Wait(op, axes=axes)
        self._yield(program, "barrier")

    def signal(self, interp: Interpreter, op: Op, counter: np.ndarray) -> None:
        """Before ``op`` adds to ``counter``: a switch point, and (shared) the program's own
        counter advances, then its clock joins the semaphore's: a waiter is ordered after what
        the program did before the signal, not after what it does next."""
        key = self._shared_semaphore(counter)
        if key is None:
            return
        p = interp.program
        self._signalled[key] = (counter, op, p)
        self._yield(self.programs[p], "ready")
        self._note(self.programs[p], "signal", key)
        self.clocks[p, p] += 1
        held = self._semaphores.setdefault(key, np.zeros(len(self.programs), np.int64))
        np.maximum(held, self.clocks[p], out=held)

    def wait(self, interp: Interpreter, op: Op, counter: np.ndarray, value: int) -> None:
        """Blocks the program until ``counter`` (shared) holds ``value``; then its clock takes
        in the semaphore's. A private semaphore returns at once (the rule checks it)."""
        key = self._shared_semaphore(counter)
        if key is None:
            return
        program = self.programs[interp.program]
        program.waiting = _Wait(op, counter=counter, value=value)
        self._yield(program, "semaphore")
        program.waiting = None
        self._note(program, "wait", key)
        held = self._semaphores.get(key)
        if held is not None:
            np.maximum(self.clocks[program.number], held, out=self.clocks[program.number])

    def _note(self, program: _Program, kind: str, key: int) -> None:
        if self.events is not None:
            self.events.append((program.ids, sum(program.arrivals.values()), kind, key))

    def peek(self, interp: Interpreter, counter: np.ndarray) -> None:
        """A read of a shared semaphore is a switch point; it orders nothing."""
        if self._shared_semaphore(counter) is not None:
            self._yield(self.programs[interp.program], "ready")

    def _shared_semaphore(self, counter: np.ndarray) -> int | None:
        address = counter.__array_interface__["data"][0]
        return address if self.races.buffer_of(counter) is not None else None

    def shared_allocations(self, interp: Interpreter, op: Op, types: Sequence[RefType]) -> list:
        """The group's allocations for this entry into a collective ``run_scoped``."""
        axes = op.attrs["collective_axes"]
        along = self._axis_numbers(op, axes)
        program = self.programs[interp.program]
        k = program.entries.get(id(op), 0)
        program.entries[id(op)] = k + 1
        key = (id(op), _off_axes(program.ids, along), k)
        if key not in self._shared:
            refs = [interp.allocate(t) for t in types]
            for r in refs:
                if r.written is None:  # shared scratch is always checked for uninitialized reads
                    r.written = np.zeros(r.data.shape, np.bool_)
                self.races.share(r.data)
            self._shared[key] = (refs, set(), op)
        refs, entered, _ = self._shared[key]
        entered.add(program.number)
        return list(refs)

    # ----- running -----

    def run(self, fn: Function, args: Sequence[Any]) -> list[list[Any]]:
        """Runs ``fn`` in every program over the same bound ``args``; returns each program's
        results, in grid order."""
        self._order = {op: (f, i) for f, g in enumerate((fn, *fn.callees())) for i, op in
                       enumerate(g.walk())}  # fmt: skip
        for a in args:
            if isinstance(a, Ref):
                self.races.share(a.data)
        threads = [
            threading.Thread(target=self._main, args=(p, fn, args), daemon=True)
            for p in self.programs
        ]
        for t in threads:
            t.start()
        try:
            self._schedule()
        finally:
            for t in threads:
                t.join()
        self._check_skipped()
        self._check_landed()
        self._check_counts()
        return [p.results for p in self.programs]

    def _check_counts(self) -> None:
        """A semaphore with a row per program (a kernel that spans devices: its scratch and
        barrier semaphores) must be back at 0 when every program has finished: on the chip the
        next kernel to get it would start from what is left (upstream's interpret mode reports
        it too). Semaphores a group shares die with their ``run_scoped``, unchecked."""
        for counter, op, p in self._signalled.values():
            buffer = self.races.buffer_of(counter)
            if int(counter) == 0 or buffer.array.shape[: len(self.grid)] != self.grid:
                continue
            element = (counter.__array_interface__["data"][0] - buffer.start) // 4
            shape = buffer.array.shape
            position = [int(i) for i in np.unravel_index(element, shape)]
            raise InterpretError(
                f"the semaphore at {position} of a shared int32[{','.join(map(str, shape))}] "
                f"semaphore buffer holds {int(counter)} when every program has finished (last "
                f"signalled here, by program {program_name(self.programs[p].ids)}): on the chip "
                "the next kernel to use it starts from that count",
                op=op.name,
                loc=op.loc,
                fix="wait every semaphore back down to 0 before the kernel ends: each signal "
                "needs a wait that takes it (and each copy a wait for its whole size)",
            )

    def _check_landed(self) -> None:
        """A copy still in flight when every program has finished was never waited for: on
        the chip the kernel ends with its destination undefined (``inflight``)."""
        copy = self.flights.pending()
        if copy is None or not self.detect_races:
            return
        starter = program_name(self.programs[copy.program].ids)
        if copy.sends is not None:
            what, fix = "its send side is", "copy.wait_send() on the sending device"
        else:
            into = (
                ""
                if copy.target is None
                else f" into program {self.races.names[copy.target]}'s row"
            )
            what, fix = f"this copy{into} is", "copy.wait_recv() on the receiving device"
        raise InterpretError(
            f"program {starter} starts an async copy here, and {what} never waited for: the "
            "kernel ends with it in flight (its destination undefined on the chip, its semaphore "
            "not back at 0)",
            op=copy.start.name,
            loc=copy.start.loc,
            fix=f"wait for every copy started before the kernel ends: {fix} (copy.wait(): both)",
        )

    def _main(self, program: _Program, fn: Function, args: Sequence[Any]) -> None:
        try:
            self._wait_for_turn(program)
            with np.errstate(all="ignore"):
                program.results = program.interp.run(fn.body, list(args))
        except _Aborted:
            return
        except BaseException as e:  # noqa: BLE001 - handed to the scheduler, raised there
            self._error = self._error or (e, program)
        program.state = "done"
        self._back.release()

    def _schedule(self) -> None:
        last = -1
        while True:
            if self._error is not None:
                self._fail()
            ready = [p for p in self.programs if _can_go_on(p)]
            if not ready:
                if all(p.state == "done" for p in self.programs):
                    return
                self._release_barriers()
                continue
            if self.rng is None:  # the next in turn after the last one to run
                p = next((q for q in ready if q.number > last), ready[0])
            else:
                p = ready[int(self.rng.integers(len(ready)))]
            last = p.number
            p.state = "running"
            self._wake[p.number].release()
            self._back.acquire()

    def _yield(self, program: _Program, state: str) -> None:
        program.state = state
        self._back.release()
        self._wait_for_turn(program)

    def _wait_for_turn(self, program: _Program) -> None:
        self._wake[program.number].acquire()
        if self._abort:
            raise _Aborted

    def _fail(self) -> None:
        error, program = self._error
        self._abort = True
        for wake in self._wake:  # all held: every program's thread sees _abort and unwinds
            wake.release()
        if isinstance(error, MiniPallasError):
            error.add_note(f"in program {program_name(program.ids)} of grid {self.grid}")
        raise error

    # ----- barriers and groups -----

    def _release_barriers(self) -> None:
        """Releases every group whose programs all wait at a barrier over the same axes;
        raises ``DeadlockError`` when none can be released."""
        released = False
        for p in self.programs:
            if p.state != "barrier":
                continue
            axes = p.waiting.axes
            members = self._group(p, axes)
            if all(m.state == "barrier" and m.waiting.axes == axes for m in members):
                numbers = [m.number for m in members]
                merged = self.clocks[numbers].max(axis=0)
                merged[numbers] += 1
                for m in members:
                    self.clocks[m.number] = merged
                    m.state, m.waiting = "ready", None
                released = True
        if not released:
            self._deadlock()

    def _deadlock(self) -> None:
        blocked = [p for p in self.programs if p.state in ("barrier", "semaphore")]
        p = next((q for q in blocked if q.state == "barrier"), blocked[0])
        if p.state == "barrier":
            error = self._barrier_deadlock(p)
        else:
            others = [
                f"{program_name(m.ids)} {'finished' if m.state == 'done' else m.waiting}"
                for m in self.programs
                if m is not p
            ]
            error = DeadlockError(
                f"deadlock: program {program_name(p.ids)} waits for {p.waiting.amount()} on a "
                f"semaphore that holds {int(p.waiting.counter)}, and no program can signal it: "
                f"{'; '.join(others)}",
                op=p.waiting.op.name,
                loc=p.waiting.op.loc,
                fix="every wait needs signals that add up to its value: signal the semaphore "
                "from another program, or wait for less",
            )
        self._error = (error, p)
        self._fail()

    def _barrier_deadlock(self, p: _Program) -> DeadlockError:
        op, axes = p.waiting.op, p.waiting.axes
        members = self._group(p, axes)
        arrived = [m for m in members if m.state == "barrier" and m.waiting.axes == axes]
        absent = []
        for m in members:
            if m.state == "done":
                absent.append(f"{program_name(m.ids)} finished without reaching it")
            elif m not in arrived:
                absent.append(f"{program_name(m.ids)} {m.waiting}")
        return DeadlockError(
            f"deadlock: the barrier over {axes} is reached by programs "
            f"{', '.join(program_name(m.ids) for m in arrived)} of its group, but "
            f"{'; '.join(absent)}",
            op="barrier",
            loc=op.loc,
            fix="every program along the barrier's axes must reach it (take it out of "
            "conditionals that depend on the program id)",
        )

    def _skipped_barrier(self, p: _Program, op: Op, race: RaceError) -> InterpretError:
        """The cause of ``race`` at ``p`` 's ``op``, when there is one to name: a barrier that
        programs of ``p`` 's group wait at, which comes before ``op`` in the program yet which
        ``p`` has reached fewer barriers than they have. ``p`` skipped it: the group would
        deadlock there, and the race is that skip's consequence. Else ``race`` itself."""
        where = self._order.get(op)
        for w in self.programs:
            if w.state != "barrier" or w is p:
                continue
            barrier, axes = w.waiting.op, w.waiting.axes
            before = self._order.get(barrier)
            if before is None or where is None or before[0] != where[0] or before > where:
                continue
            if p not in self._group(w, axes) or p.arrivals.get(axes, 0) >= w.arrivals[axes]:
                continue
            waiting = [
                m for m in self._group(w, axes) if m.state == "barrier" and m.waiting.op is barrier
            ]
            return DeadlockError(
                f"program {program_name(p.ids)} skips the barrier over {axes} at {barrier.loc} "
                f"that programs {', '.join(program_name(m.ids) for m in waiting)} of its group "
                f"wait at (they would wait for it forever), and goes on to '{op.name}' at "
                f"{op.loc}: there {race.message}",
                op="barrier",
                loc=barrier.loc,
                fix="every program along the barrier's axes must reach it (take it out of "
                "conditionals that depend on the program id)",
                consequence=race,
            )
        return race

    def _check_skipped(self) -> None:
        for (_, group, _), (_, entered, op) in self._shared.items():
            along = self._axis_numbers(op, op.attrs["collective_axes"])
            members = self._members(group, along)
            skipped = [m for m in members if m.number not in entered]
            if skipped:
                callers = ", ".join(program_name(m.ids) for m in members if m.number in entered)
                raise DeadlockError(
                    f"program {program_name(skipped[0].ids)} skips the collective run_scoped "
                    f"over {op.attrs['collective_axes']} that programs {callers} of its group "
                    "enter",
                    op="run_scoped",
                    loc=op.loc,
                    fix="every program along the collective axes must enter the same "
                    "run_scoped (take it out of conditionals that depend on the program id)",
                )

    def _group(self, program: _Program, axes: tuple[str, ...]) -> list[_Program]:
        along = {self.grid_names.index(a) for a in axes}
        return self._members(_off_axes(program.ids, along), along)

    def _members(self, key: tuple[int, ...], along: set[int]) -> list[_Program]:
        """The programs whose indices off the axes ``along`` are ``key``: one group."""
        return [m for m in self.programs if _off_axes(m.ids, along) == key]

    def _axis_numbers(self, op: Op, axes: tuple[str, ...]) -> set[int]:
        unknown = [a for a in axes if a not in self.grid_names]
        if unknown:
            raise InterpretError(
                f"names axes {unknown}, which are not grid axes {self.grid_names}",
                op=op.name,
                loc=op.loc,
                fix="name grid axes with pallas_call(..., grid_names=...) / interpret(..., "
                "grid_names=...) and use those names",
            )
        return {self.grid_names.index(a) for a in axes}


def _can_go_on(program: _Program) -> bool:
    """Ready, or blocked at a semaphore wait that the count now allows."""
    return program.state == "ready" or (
        program.state == "semaphore" and program.waiting.satisfied()
    )


def _off_axes(ids: tuple[int, ...], along: set[int]) -> tuple[int, ...]:
    """A program's indices along the other axes: what its group shares."""
    return tuple(i for a, i in enumerate(ids) if a not in along)


def program_name(ids: tuple[int, ...]) -> str:
    """``(1, 0)``, or ``(2,)`` for a 1-D grid: how errors name a program."""
    return "(" + ", ".join(map(str, ids)) + ("," if len(ids) == 1 else "") + ")"
