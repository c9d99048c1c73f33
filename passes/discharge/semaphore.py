"""Semaphore ops on discharged refs become counter arithmetic, as upstream's discharge rules
make them: ``semaphore_signal`` adds ``inc``, ``semaphore_wait`` subtracts its value (unless it
keeps the count), ``semaphore_read`` reads. A discharged wait does not block: one program runs
alone, so nothing else could raise the count (the interpreter reports a wait that would hang).
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir.core import Op, Value
from minipallas.ir.opset.semaphore import COUNT
from minipallas.passes.discharge.engine import DischargeScope, rule
from minipallas.passes.discharge.state import split


def _add(scope: DischargeScope, op: Op, name: str) -> None:
    access, known, dyn, (amount,) = split(scope, op)
    count = access.read(known, dyn, COUNT)
    access.write_window(known, dyn, scope.emit_typed(name, [count, amount], COUNT, op.loc))


@rule("semaphore_signal")
def _signal(scope: DischargeScope, op: Op) -> Sequence[Value]:
    _add(scope, op, "add")
    return []


@rule("semaphore_wait")
def _wait(scope: DischargeScope, op: Op) -> Sequence[Value]:
    if op.attrs.get("decrement", True):
        _add(scope, op, "sub")
    return []


@rule("semaphore_read")
def _read(scope: DischargeScope, op: Op) -> Sequence[Value]:
    access, known, dyn, _ = split(scope, op)
    return [access.read(known, dyn, COUNT)]
