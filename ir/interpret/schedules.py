"""Running programs together under several schedules: ``interpret(..., schedule=[...])``.

A race-free program gives the same bits under every schedule (``programs``). The race and
deadlock checks name most of what makes one not so, but not everything: a ``semaphore_read`` of
a count that other programs raise orders nothing and races with nothing, yet what it returns
depends on who ran first. So a list of schedules runs the program under each, on fresh copies
of the arguments, and compares every result and every argument's final contents bit for bit:
equal, the first run's results come back (and its final contents are written into the
arguments, as one run writes its refs); else a ``ScheduleDependentError`` names two schedules,
what differs and where.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from minipallas.ir.errors import InterpretError, ScheduleDependentError

Run = Callable[[Sequence[Any], "str | int"], tuple]


def check_schedules(schedules: object) -> list:
    """The schedules of a list, each ``"lockstep"`` or an int seed."""
    listed = list(schedules) if isinstance(schedules, Sequence | range) else None
    fine = listed and all(s == "lockstep" or (isinstance(s, int) and not isinstance(s, bool))
                          for s in listed)  # fmt: skip
    if not fine:
        raise InterpretError(
            f"schedule must be 'lockstep', an int seed or a list of them, got {schedules!r}",
            fix="schedule=['lockstep', 0, 1, 2] runs the programs under each and compares",
        )
    return listed


def across(run: Run, args: Sequence[Any], schedules: Sequence[Any]) -> tuple:
    """Runs ``run(args, schedule)`` under each schedule on copies of ``args`` (module doc)."""
    outcomes = []
    for schedule in schedules:
        copies = [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args]
        results = run(copies, schedule)
        outcomes.append((schedule, results, copies))
    first, results, copies = outcomes[0]
    for other, their_results, their_copies in outcomes[1:]:
        for what, mine, theirs in _pairs(results, their_results, copies, their_copies):
            at = _first_difference(mine, theirs)
            if at is None:
                continue
            where = f"{what}, element {at}"
            raise ScheduleDependentError(
                f"results depend on the schedule: schedules {first!r} and {other!r} differ at "
                f"{where} ({_item(mine, at)} under {first!r}, {_item(theirs, at)} under "
                f"{other!r}), with no race or deadlock named",
                fix="a result must not depend on the order the programs run in: order the "
                "accesses with barriers or semaphore waits, and write no count semaphore_read "
                "returns while others may still signal it",
                schedules=(first, other),
                where=where,
            )
    for a, c in zip(args, copies, strict=True):
        if isinstance(a, np.ndarray):
            a[...] = c
    return results


def _pairs(results: tuple, theirs: tuple, copies: list, their_copies: list) -> list:
    pairs = [(f"result {i}", r, t) for i, (r, t) in enumerate(zip(results, theirs, strict=True))]
    pairs += [
        (f"argument {i}", c, t)
        for i, (c, t) in enumerate(zip(copies, their_copies, strict=True))
        if isinstance(c, np.ndarray)
    ]
    return pairs


def _first_difference(a: Any, b: Any) -> list[int] | None:
    """The first element where ``a`` and ``b`` differ bit for bit (NaNs by their bits)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return []
    bytes_a = a.reshape(a.shape + (1,)).view(np.uint8)
    bytes_b = b.reshape(b.shape + (1,)).view(np.uint8)
    differ = (bytes_a != bytes_b).any(axis=-1)
    if not differ.any():
        return None
    return [int(i) for i in np.unravel_index(int(np.argmax(differ)), a.shape)]


def _item(a: Any, at: list[int]) -> str:
    a = np.asarray(a)
    return repr(a[tuple(at)].item()) if len(at) == a.ndim else f"{a.dtype}{list(a.shape)}"
