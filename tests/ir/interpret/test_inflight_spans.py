"""``inflight``'s span test (issue 47 item 7) skips ``np.isin`` for copies whose bytes miss an
access; what ``busy`` finds must not change, also after ``start`` replaces a copy's array."""

from __future__ import annotations

import numpy as np

from minipallas.ir.core import Op
from minipallas.ir.interpret.inflight import Copy, InFlight
from minipallas.ir.interpret.races import READ, WRITE


def _bytes(start: int, n: int = 4) -> np.ndarray:
    return np.arange(start, start + 4 * n, 4, dtype=np.int64)


def test_a_send_side_takes_over_its_copys_source_after_a_check() -> None:
    flights, op = InFlight(), Op("dma_start", (), (), {})
    source, destination = _bytes(1000), _bytes(5000)
    copy = Copy(op, 0, source, destination, 16)
    flights.start(1, copy)
    assert flights.busy(source[1:2], WRITE) == (copy, "source", 1004)  # a span is now kept
    assert flights.busy(source, READ) is None
    send = Copy(op, 0, source, source, 16)  # the importer's send side: the source onto itself
    flights.start(2, send)
    assert flights.busy(source[1:2], WRITE) == (send, "source", 1004)
    assert flights.busy(destination[3:], READ) == (copy, "destination", 5012)
    assert flights.busy(_bytes(3000), WRITE) is None
    assert flights.busy(np.zeros(0, np.int64), WRITE) is None
