"""Rules for the atomics (``ir/opset/atomic.py``): read the window, combine, write it back
(masked-off lanes keep their value), return the old window.

The combination is the array op's own rule (``add``, ``max``, ``min``: XLA's rounding and NaN
and signed-zero rules), so discharge's ``add``/``max``/``min`` give the same bits. Through an
integer-array window with repeated positions, each lane combines with the window as read and
the last lane in row-major order is the one written, as upstream's discharge (a ``set``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from minipallas.ir.core import Op
from minipallas.ir.interpret.engine import Interpreter, rule
from minipallas.ir.interpret.races import ACCUM
from minipallas.ir.interpret.rules.arrays import BINARY
from minipallas.ir.interpret.rules.state import _mark_written, _window, check_initialized
from minipallas.ir.interpret.windows import read, write
from minipallas.ir.opset.atomic import COMBINE


@rule(*COMBINE)
def read_modify_write(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    ref, access, rest = _window(interp, op, args, ACCUM, mask_at=1)
    mask = rest[1] if op.attrs.get("masked") else None
    check_initialized(interp, op, ref, access, mask)
    old = read(ref.data, access)
    write(ref.data, access, BINARY[COMBINE[op.name]](old, rest[0], op.result.type.dtype), mask)
    _mark_written(ref, access, mask)
    return (old,)


@rule("atomic_cas")
def atomic_cas(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    ref, access, (cmp, value) = _window(interp, op, args, ACCUM)
    check_initialized(interp, op, ref, access)
    old = read(ref.data, access)
    write(ref.data, access, np.where(old == cmp, value, old))
    _mark_written(ref, access)
    return (old,)
