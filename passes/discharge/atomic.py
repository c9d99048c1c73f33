"""Atomics on discharged refs (``ir/opset/atomic.py``), as upstream's discharge rules: read
the window, combine (``add``/``max``/``min``; for ``atomic_cas``, ``select(old == cmp, value,
old)``), write it back, the old window the result. A masked write is ``store``'s: masked-off
lanes keep their value (through integer arrays, one exact ``scatter``)."""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir.core import Op, Value
from minipallas.ir.opset.atomic import COMBINE
from minipallas.ir.types import ArrayType
from minipallas.passes.discharge.engine import DischargeScope, rule
from minipallas.passes.discharge.state import masked_write, split


@rule(*COMBINE)
def _read_modify_write(scope: DischargeScope, op: Op) -> Sequence[Value]:
    access, known, dyn, rest = split(scope, op)
    value = rest[0]
    old = access.read(known, dyn, value.type)
    new = scope.emit_typed(COMBINE[op.name], [old, value], value.type, op.loc)
    masked_write(scope, access, known, dyn, new, rest[1] if op.attrs.get("masked") else None, op)
    return [old]


@rule("atomic_cas")
def _atomic_cas(scope: DischargeScope, op: Op) -> Sequence[Value]:
    access, known, dyn, (cmp, value) = split(scope, op)
    old = access.read(known, dyn, value.type)
    same = scope.emit_typed("eq", [old, cmp], ArrayType(value.type.shape, "bool"), op.loc)
    new = scope.emit_typed("select", [same, value, old], value.type, op.loc)
    access.write_window(known, dyn, new)
    return [old]
