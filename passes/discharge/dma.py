"""``dma_start`` and ``dma_wait`` on discharged refs, as upstream's discharge rules make them:
the start copies the source's value into the destination and adds ``copy_count`` to the
semaphore; the wait subtracts it (and, as a discharged ``semaphore_wait``, does not block).

Under partial discharge a source or destination may stay a ref: the copy then reads it with
``get`` or writes it with ``swap``. A semaphore that stays a ref while a buffer of its copy is
discharged is refused: the copy is then no longer asynchronous, and no op counts it.
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir.core import Op, Value
from minipallas.ir.errors import PassError
from minipallas.ir.indexing import full
from minipallas.ir.literal import Literal
from minipallas.ir.opset.dma import copy_count
from minipallas.ir.opset.semaphore import COUNT
from minipallas.passes.discharge.engine import DischargeScope, rule
from minipallas.passes.discharge.views import Access


def _count(scope: DischargeScope, op: Op, arithmetic: str) -> None:
    """Adds or subtracts (``arithmetic``) the copy's count to the op's semaphore."""
    sem = op.operands[2]
    if not scope.is_discharged(sem):
        raise PassError(
            f"{op.name}: its semaphore stays a ref while a buffer of the copy is discharged",
            op=op.name,
            loc=op.loc,
            fix="discharge the DMA semaphore with the buffers (discharge_scoped, "
            "should_discharge), or keep all three",
        )
    amount = scope.emit("constant", [], op.loc,
                        value=Literal.of(copy_count(op.operands[1].type), "int32"))  # fmt: skip
    access = Access(scope, scope.handles[sem], op.loc)
    access.write(scope.emit_typed(arithmetic, [access.value(), amount], COUNT, op.loc))


@rule("dma_start")
def _start(scope: DischargeScope, op: Op) -> Sequence[Value]:
    src, dst, _ = op.operands
    whole = full(dst.type.shape)
    if scope.is_discharged(src):
        value = Access(scope, scope.handles[src], op.loc).value()
    else:
        value = scope.emit("get", [scope.value(src)], op.loc, indexer=whole)
    if scope.is_discharged(dst):
        Access(scope, scope.handles[dst], op.loc).write(value)
    else:
        scope.emit("swap", [scope.value(dst), value], op.loc, indexer=whole)
    _count(scope, op, "add")
    return []


@rule("dma_wait")
def _wait(scope: DischargeScope, op: Op) -> Sequence[Value]:
    _count(scope, op, "sub")
    return []
