"""Semaphore ops: ``semaphore_signal``, ``semaphore_wait``, ``semaphore_read`` (upstream's
``pl.semaphore_*``).

A semaphore ref (memory space ``semaphore``, ``tpu.SemaphoreType.REGULAR``) holds int32
counters that start at 0. Each op names one counter: the ref, then a scalar window of it (an
int or a dynamic index per dimension), then its value operand:

    semaphore_signal %sem[%i], %inc      // count += inc
    semaphore_wait %sem[0], %n           // wait until count >= n, then count -= n
    semaphore_wait %sem[0], %n, keep     // wait until count >= n, leave it
    %c = semaphore_read %sem[0] : i32[]

Programs that run together (``collectives="simulate"``) synchronize through a collective
``run_scoped``'s semaphores: a wait blocks until other programs' signals raise the count, and
orders their accesses before its program's later ones. Discharge turns the ops into counter
arithmetic, as upstream's discharge rules do (a wait does not block there).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from minipallas.ir.indexing import Dyn, Int
from minipallas.ir.opdef import (
    ACCUM,
    READ,
    Attrs,
    OperandTypes,
    Regions,
    Types,
    Variadic,
    declare,
    require,
)
from minipallas.ir.opset.common import count_dyn, int_scalar, ref_operand, window
from minipallas.ir.syntax import Parsed, Pieces, Windowed
from minipallas.ir.types import DMA_SEMAPHORE, SEMAPHORE, ArrayType

if TYPE_CHECKING:
    from minipallas.ir.core import Op
    from minipallas.ir.parser import Parser
    from minipallas.ir.printer import Printer

COUNT = ArrayType((), "int32")


class _Wait(Windowed):
    """``Windowed(1)``, then ``, keep`` when the wait leaves the count as it is."""

    def __init__(self) -> None:
        super().__init__(1)

    def print(self, p: Printer, op: Op) -> Pieces:
        keep = [] if op.attrs.get("decrement", True) else [", keep"]
        return [*super().print(p, op), *keep]

    def parse(self, r: Parser) -> Parsed:
        parsed = super().parse(r)
        keep = r.at(",") and r.tokens[r.pos + 1].text == "keep"
        if keep:
            r.pos += 2
        parsed.attrs["decrement"] = not keep
        return parsed


def _counter(types: OperandTypes, attrs: Attrs, values: int, dma: bool = False) -> None:
    """Checks the semaphore operand (a DMA one too with ``dma``: upstream reads those), its
    scalar window and that ``values`` operands follow the indices."""
    ref = ref_operand(types)
    require(
        ref.memory_space == SEMAPHORE or (dma and ref.memory_space == DMA_SEMAPHORE),
        f"operand 'ref' must be a {'' if dma else 'regular '}semaphore ref, got {ref}",
    )
    n = count_dyn(attrs)
    require(len(types) == 1 + n + values, f"expected {n} indices and {values} value operands")
    require(
        all(isinstance(e, Int | Dyn) for e in attrs["indexer"]),
        "names one semaphore: index every dimension with an int (ref.at[i])",
    )
    window(ref.shape, attrs, types.group("indices"))


@declare(
    "semaphore_signal",
    operands=("ref", Variadic("indices"), "inc"),
    syntax=Windowed(1),
    effect=ACCUM,
    pure=False,
)
def semaphore_signal(types: OperandTypes, attrs: Attrs, regions: Regions) -> Types:
    """Add ``inc`` to one semaphore: ``semaphore_signal %sem[%i], %inc``."""
    _counter(types, attrs, 1)
    inc = types.one("inc")
    require(int_scalar(inc, "inc").dtype == "int32", f"inc must be i32[], got {inc}")
    return ()


@declare(
    "semaphore_wait",
    operands=("ref", Variadic("indices"), "value"),
    syntax=_Wait(),
    effect=ACCUM,
    pure=False,
)
def semaphore_wait(types: OperandTypes, attrs: Attrs, regions: Regions) -> Types:
    """Block until one semaphore holds at least ``value``, then subtract it (``, keep``: leave
    it): ``semaphore_wait %sem[0], %n``. Its effect is an accumulate, like a signal's."""
    _counter(types, attrs, 1)
    value = types.one("value")
    require(int_scalar(value, "value").dtype == "int32", f"value must be i32[], got {value}")
    require(isinstance(attrs.get("decrement", True), bool), "'decrement' must be a bool")
    return ()


@declare(
    "semaphore_read",
    operands=("ref", Variadic("indices")),
    syntax=Windowed(0),
    effect=READ,
    pure=False,
)
def semaphore_read(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """One semaphore's count, regular or DMA: ``%c = semaphore_read %sem[0] : i32[]``."""
    _counter(types, attrs, 0, dma=True)
    return (COUNT,)
