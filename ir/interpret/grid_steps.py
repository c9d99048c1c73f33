"""The functions of a kernel's loop program (``kernels.programs.grid``), as ``call`` runs them.

The loop program calls, at each grid point, every operand's index map and then the kernel
body; after the grid, a function that reads the outputs out of their buffers. It marks those
functions here (``mark``), and the ``call`` rule (``control``) runs a marked one by its role:

- ``Step`` (the body) and ``Blocks`` (an index map): an ``InterpretError`` raised inside gains
  the grid point, the call's first operands, and the kernel's name;
- ``Blocks``, under ``checks``: a block that starts before its array or at or past its end
  (``Element`` padding counts as array) is an error, located at the index map's op that
  computed the index. A partial last block is legal. Without checks the program does what
  upstream's interpret mode does: wraps a negative start once and clamps the window in;
- ``Outputs``, under initialization tracking: an output element no grid point wrote is an
  error naming the output (upstream's interpret mode returns its fill there, a TPU whatever
  HBM held).

Marks are weak, keyed by the Function object, so they live as long as the program does; a
program printed and parsed again runs the same, with plainer messages.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from minipallas.ir.core import Function, Op
from minipallas.ir.errors import InterpretError
from minipallas.ir.interpret.engine import Interpreter
from minipallas.ir.location import Location


@dataclass(frozen=True)
class Step:
    """A kernel body (or an index map shared by operands of different shapes) taking the grid
    point as its first ``axes`` operands."""

    kernel: str
    axes: int

    def run(self, interp: Interpreter, op: Op, fn: Function, args: Sequence[Any]) -> list:
        try:
            return interp.run(fn.body, args)
        except InterpretError as e:
            if type(e) is not InterpretError:  # races and deadlocks carry their own context
                raise
            point = tuple(int(a) for a in args[: self.axes])
            message = f"{e.message} (at grid point {point} of kernel '{self.kernel}')"
            raise InterpretError(message, op=e.op, loc=e.loc, fix=e.fix) from None


@dataclass(frozen=True)
class Blocks(Step):
    """An operand's index map: per dimension, what a block index is multiplied by to give
    the block's first element (1 for squeezed and ``Element`` dimensions), and the array's
    extent there, padding included. ``loc`` locates a block index no op of the map made."""

    operand: str = ""
    scales: tuple[int, ...] = ()
    extents: tuple[int, ...] = ()
    loc: Location | None = field(default=None, compare=False)

    def run(self, interp: Interpreter, op: Op, fn: Function, args: Sequence[Any]) -> list:
        blocks = super().run(interp, op, fn, args)
        if not interp.checks:
            return blocks
        index = [int(b) for b in blocks]
        for d, (i, scale, extent) in enumerate(zip(index, self.scales, self.extents, strict=True)):
            start = i * scale
            if 0 <= start < extent:
                continue
            side = "before the array" if start < 0 else f"past its end ({extent} elements)"
            point = tuple(int(a) for a in args[: self.axes])
            made = next((o for o in fn.body.ops if fn.body.results[d] in o.results), None)
            raise InterpretError(
                f"the index map of {self.operand} gives block {index} at grid point {point} "
                f"of kernel '{self.kernel}': dimension {d} starts at element {start}, {side}",
                op=made.name if made is not None else "pallas_call",
                loc=made.loc if made is not None else self.loc or op.loc,
                fix="keep every block index in [0, ceil(size / block)): a grid of that many "
                "points along the axis; without checks=True upstream's interpret mode wraps a "
                "negative start once and clamps the window into the array",
            )
        return blocks


@dataclass(frozen=True)
class Outputs:
    """The read-out of the outputs: per output buffer, its name and the array's own region."""

    kernel: str
    regions: tuple[tuple[str, Any], ...]  # an index of the buffer (``...`` if unpadded)
    loc: Location | None = field(default=None, compare=False)

    def run(self, interp: Interpreter, op: Op, fn: Function, args: Sequence[Any]) -> list:
        if interp.tracking:
            for ref, (name, region) in zip(args, self.regions, strict=True):
                unwritten = np.argwhere(~ref.written[region])
                if len(unwritten):
                    raise InterpretError(
                        f"element {[int(i) for i in unwritten[0]]} of {name} of kernel "
                        f"'{self.kernel}' is never written by any grid point",
                        op="pallas_call",
                        loc=self.loc or op.loc,
                        fix="write every output block: a grid that covers the output, and "
                        "index maps that reach each block (a TPU returns whatever the memory "
                        "held there; upstream's interpret mode, its fill)",
                    )
        return interp.run(fn.body, args)


Role = Step | Outputs
_ROLES: weakref.WeakKeyDictionary[Function, Role] = weakref.WeakKeyDictionary()


def mark(fn: Function, role: Role) -> None:
    """Run ``fn`` by ``role`` when a ``call`` calls it. An index map marked again for another
    operand keeps only the grid point: its blocks then mean nothing on their own."""
    known = _ROLES.get(fn, role)
    if known != role and isinstance(role, Blocks):
        role = Step(role.kernel, role.axes)
    _ROLES[fn] = role


def role_of(fn: Function) -> Role | None:
    return _ROLES.get(fn)
