"""Other devices' rows in the program one device runs (``local``): views of them, reads, copies.

A kernel that spans devices reaches another device only through the row of a buffer that the
device owns: ``ref.at %r[%t, ...]`` with a target's position ``%t`` instead of the device's
own. ``Rows`` holds the rules for those rows, mixed into the rebuild (``local._Device``):

- ``row_view``: a view of a row per device is the device's own shard, or a ``Remote`` view
  (the target's position and the window), composed with further views (``compose``);
- ``remote_read``: a ``get`` of other devices' rows is a ``gather_rows`` of every device's own
  row, then the window read from it;
- ``remote_copy``: a ``dma_start`` into a target's row is an ``exchange``, static ``pairs``
  where the target is a function of the device's position (``pairs``: evaluated for every
  device at compile time), else with the target as data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from minipallas.ir import indexing
from minipallas.ir.builder import infer_result_types
from minipallas.ir.core import Block, Op, Value
from minipallas.ir.errors import MiniPallasError
from minipallas.ir.indexing import Dyn, Int, Slice
from minipallas.ir.literal import Literal
from minipallas.ir.opdef import OPS
from minipallas.ir.types import ArrayType

# How a value depends on what: the device's position and constants only; loop indices too;
# anything else (a loaded value, a loop's carry, a semaphore's count).
STATIC, LOOP, DATA = 0, 1, 2
SIMULATE = "run it with collectives='simulate' (mp.interpret(fn, x, collectives='simulate'))"


@dataclass(frozen=True)
class Remote:
    """A view of another device's row: ``base`` (the device's own shard of the same buffer,
    rebuilt), the target's position per mesh axis (old values), and the window in the row:
    its indexer over ``base``, its dynamic indices (rebuilt) and what they depend on."""

    base: Value
    targets: tuple[Value | None, ...]  # None: the rows of every device along that axis
    indexer: indexing.Indexer
    dyn: tuple[Value, ...]
    kind: int


class Mark(NamedTuple):
    """A remote copy, or a wait only some devices make, where the rebuild met it: its place
    in program order, the loops around, its masked cond's branch (``masked``), and for a wait
    the semaphore it waits on (``local._Device.check_handshakes``)."""

    seq: int
    loops: tuple[Op, ...]
    op: Op
    branch: tuple[int, int] | None
    root: Value | None


class Rows:
    """The rules for other devices' rows. The rebuild (``local._Device``) provides the state
    below and ``value``, ``refuse``, ``made``, ``check_around``, ``values_at``, ``devices``,
    ``same_core``, ``_loops``, ``root``."""

    axes: tuple[str, ...]
    sizes: tuple[int, ...]
    env: dict[Value, Value | Remote]  # old values to rebuilt ones
    kind: dict[Value, int]  # what an old value depends on: STATIC, LOOP or DATA
    defs: dict[Value, Op]
    source: dict[Value, Value]  # a region or callee parameter -> the operand it receives
    senders: set[int] | None  # in a masked cond: the devices that take the branch
    branch: tuple[int, int] | None  # in a masked cond: (its id, the branch)
    copies: list[Mark]
    reached: set[Value]  # the semaphores other devices signal (old roots)

    def row_view(self, op: Op) -> list[Op]:
        """``ref.at`` of a ref with a row per device: the device's own row is its shard, any
        other row a ``Remote`` view of the target's."""
        ref, dyn = op.operands[0], op.operands[1:]
        n = len(self.axes)
        rows, rest = op.attrs["indexer"][:n], op.attrs["indexer"][n:]
        targets = [self.row(op, e, size, dyn) for e, size in zip(rows, self.sizes, strict=True)]
        dyn_positions = indexing.dyn_positions(rest)
        renumber = {p: k for k, p in enumerate(dyn_positions)}
        entries = tuple(_renumber(e, renumber) for e in rest)
        old_dyn = tuple(dyn[p] for p in dyn_positions)
        base = self.value(ref, op)
        own = all(t is not None and self.is_position(t, a) for a, t in enumerate(targets))
        if not own:
            new_dyn = tuple(self.value(v, op) for v in old_dyn)
            kind = max((self.kind.get(v, DATA) for v in old_dyn), default=STATIC)
            self.env[op.result] = Remote(base, tuple(targets), entries, new_dyn, kind)
            return []
        if entries == indexing.full(base.type.shape):
            self.env[op.result] = base
            return []
        operands = (base, *(self.value(v, op) for v in old_dyn))
        attrs = {"indexer": entries}
        types = infer_result_types("ref.at", [v.type for v in operands], attrs, (), op.loc)
        return self.made(op, Op("ref.at", operands, (Value(types[0]),), attrs, (), op.loc))

    def sub_view(self, op: Op, remote: Remote) -> list[Op]:
        """``ref.at`` of a ``Remote`` view: a ``Remote`` view of the window within it."""
        ops, self.env[op.result] = self.compose(op, remote)
        return ops

    def compose(self, op: Op, remote: Remote) -> tuple[list[Op], Remote]:
        """The window ``op`` (a ``ref.at`` or ``get``) takes of a ``Remote`` view, as one window
        over the target's row: each start the outer window's plus the inner one's (``add``
        ops, computed by the device that takes it)."""
        inner, inner_dyn = op.attrs["indexer"], op.operands[1:]
        kind = max([remote.kind, *(self.kind.get(v, DATA) for v in inner_dyn)])
        ops: list[Op] = []
        dyn: list[Value] = []

        def place(at: int | Value) -> int | Dyn:
            if isinstance(at, int):
                return at
            dyn.append(at)
            return Dyn(len(dyn) - 1)

        def outer(at: int | Dyn) -> int | Value:
            return remote.dyn[at.pos] if isinstance(at, Dyn) else at

        entries, inner_entries = [], iter(inner)
        targets = [self.row(op, next(inner_entries), n, inner_dyn) if t is None else t
                   for t, n in zip(remote.targets, self.sizes, strict=True)]  # fmt: skip
        for e in remote.indexer:
            if isinstance(e, Int):
                entries.append(Int(place(outer(e.index))))
                continue
            e2 = next(inner_entries)
            if (
                not (isinstance(e, Slice) and e.stride == 1)
                or isinstance(e2, indexing.Array)
                or (isinstance(e2, Slice) and e2.stride != 1)
            ):
                raise self.refuse(op, "takes a strided or gathered window of another device's row")
            at = e2.index if isinstance(e2, Int) else e2.start
            offset = self.value(inner_dyn[at.pos], op) if isinstance(at, Dyn) else at
            start = _sum(outer(e.start), offset, ops, op)
            entries.append(Int(place(start)) if isinstance(e2, Int) else
                           Slice(place(start), e2.size, 1))  # fmt: skip
        return ops, Remote(remote.base, tuple(targets), tuple(entries), tuple(dyn), kind)

    def remote_read(self, op: Op, remote: Remote) -> list[Op]:
        """``get`` of other devices' rows: every device's own row gathered (``gather_rows``,
        which every device reaches together), then the window read from it. In a race-free
        kernel the rows read hold, when every device gathers, what the reader would read."""
        self.check_around(op)
        ops, remote = self.compose(op, remote)
        full = {"indexer": indexing.full(remote.base.type.shape)}
        ops.append(_op("get", (remote.base,), full, op))
        ops.append(_op("gather_rows", (ops[-1].result,), {"axes": self.axes,
                                                          "shape": self.sizes}, op))  # fmt: skip
        rows: list[indexing.Entry] = []
        at: list[Value] = []
        for t, n in zip(remote.targets, self.sizes, strict=True):
            if t is None:
                rows.append(Slice(0, n, 1))
                continue
            if t not in self.env:  # a row given as a static int (``constant``)
                ops.append(self.defs[t])
                self.env[t] = t
            at.append(self.value(t, op))
            rows.append(Int(Dyn(len(at) - 1)))
        shift = {p: p + len(at) for p in range(len(remote.dyn))}
        entries = (*rows, *(_renumber(e, shift) for e in remote.indexer))
        name = "slice" if indexing.is_static(entries) else "dynamic_slice"
        ops.append(_op(name, (ops[-1].result, *at, *remote.dyn), {"indexer": entries}, op))
        self.kind[op.result] = DATA
        self.env[op.result] = ops[-1].result
        return ops

    def row(self, op: Op, entry: indexing.Entry, size: int, dyn: Sequence[Value]) -> Value | None:
        """The row an indexer entry on a mesh axis picks (an old value), or None for all."""
        if isinstance(entry, Slice) and entry == Slice(0, size, 1):
            return None
        if not isinstance(entry, Int):
            raise self.refuse(op, "takes part of the rows of several devices")
        return dyn[entry.index.pos] if isinstance(entry.index, Dyn) else self.constant(entry.index)

    def is_position(self, v: Value, axis: int) -> bool:
        while v in self.source:
            v = self.source[v]
        op = self.defs.get(v)
        if op is not None and op.name == "axis_index":
            return op.attrs["name"] == self.axes[axis]
        return op is not None and op.name == "program_id" and op.attrs["axis"] == axis

    def constant(self, n: int) -> Value:
        v = Value(ArrayType((), "int32"))
        self.kind[v] = STATIC
        self.defs[v] = Op("constant", (), (v,), {"value": Literal.of(n, "int32")})
        return v

    # --- remote copies -----------------------------------------------------------------------

    def remote_copy(self, op: Op, payload: Op | None = None) -> list[Op]:
        """``dma_start`` into a target's row as an ``exchange`` (``local``, 2): read the source
        (or take what ``payload`` makes), exchange it into the destination shard, write that
        back."""
        src, remote = self.value(op.operands[0], op), self.env[op.operands[1]]
        assert isinstance(remote, Remote)
        self.check_around(op)
        self.copies.append(Mark(self.seq, self._loops(), op, self.branch, None))
        self.same_core(op, self.env[op.operands[2]])
        self.reached.add(self.root(op.operands[2]))
        if None in remote.targets:
            raise self.refuse(op, "copies into the rows of several devices at once")
        if remote.kind == DATA:
            raise self.refuse(op, "writes a window computed from loaded values")
        target_kind = max(self.kind.get(v, DATA) for v in remote.targets)
        if target_kind == DATA:
            raise self.refuse(op, "targets a device computed from loaded values")
        pairs: tuple[tuple[int, int], ...] = ()
        targets: tuple[Value, ...] = ()
        if target_kind == STATIC:
            pairs = self.pairs(op, remote.targets)
        if self.senders is not None:
            if target_kind != STATIC:
                raise self.refuse(op, "is under a condition and targets a device computed "
                                  "from loop indices")  # fmt: skip
            if not pairs:
                return []  # no device takes this branch
        ops = [
            payload or _op("get", (src,), {"indexer": indexing.full(src.type.shape)}, op),
            _op("get", (remote.base,), {"indexer": indexing.full(remote.base.type.shape)}, op),
        ]
        if not pairs:  # computed from loop indices, or several senders to one receiver
            for v in remote.targets:
                if v not in self.env:  # a row given as a static int (``constant``)
                    ops.append(self.defs[v])
                    self.env[v] = v
            targets = tuple(self.value(v, op) for v in remote.targets)
        payload, old = ops[0].result, ops[1].result  # the source as of the copy's start
        attrs = {"indexer": remote.indexer, "axes": self.axes, "shape": self.sizes,
                 "pairs": pairs, "n_targets": len(targets)}  # fmt: skip
        ops.append(_op("exchange", (old, *remote.dyn, payload, *targets), attrs, op))
        full = {"indexer": indexing.full(remote.base.type.shape)}
        ops.append(_op("swap", (remote.base, ops[-1].result), full, op))
        return ops

    def pairs(self, op: Op, targets: Sequence[Value]) -> tuple[tuple[int, int], ...]:
        """(sender, receiver) device numbers of a target that is a function of the device's
        position; empty when two devices send to one (then it travels as data)."""
        out = []
        for d, position in enumerate(self.devices()):
            if self.senders is not None and d not in self.senders:
                continue
            at = self.values_at(targets, position)
            if not all(0 <= t < n for t, n in zip(at, self.sizes, strict=True)):
                raise MiniPallasError(
                    f"device {position} copies to device {tuple(at)}, outside the mesh "
                    f"{dict(zip(self.axes, self.sizes, strict=True))}",
                    op=op.name,
                    loc=op.loc,
                    fix="take the target modulo the mesh axis' size (lax.rem)",
                )
            out.append((d, int(np.ravel_multi_index(at, self.sizes))))
        receivers = [r for _, r in out]
        if len(set(receivers)) == len(receivers):
            return tuple(out)
        if self.senders is not None:
            raise self.refuse(op, "is under a condition and copies from two devices to one")
        return ()


def fed(op: Op, region: int, block: Block) -> dict[int, tuple[str, Value]]:
    """Which of region ``region``'s parameters receives which operand of ``op`` (by
    position), and the operand group it comes from."""
    opdef = OPS[op.name]
    params = opdef.param_groups(region, len(op.operands), op.attrs, len(block.params))
    groups = opdef.groups(len(op.operands), op.attrs)
    found: dict[int, tuple[str, Value]] = {}
    if params is None or groups is None:
        return found
    for name, where in params.items():
        if name in groups:
            operands = op.operands[groups[name]]
            for i, v in zip(range(where.start, where.stop), operands, strict=True):
                found[i] = (name, v)
    return found


def _renumber(entry: indexing.Entry, renumber: dict[int, int]) -> indexing.Entry:
    if isinstance(entry, Int) and isinstance(entry.index, Dyn):
        return Int(Dyn(renumber[entry.index.pos]))
    if isinstance(entry, Slice) and isinstance(entry.start, Dyn):
        return Slice(Dyn(renumber[entry.start.pos]), entry.size, entry.stride)
    return entry


def _sum(a: int | Value, b: int | Value, ops: list[Op], at: Op) -> int | Value:
    """``a + b``, folded where either is a static 0 or both are static; else an ``add`` (in
    ``int32``) appended to ``ops``."""
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    if isinstance(a, int) or isinstance(b, int):
        n, v = (a, b) if isinstance(a, int) else (b, a)
        if n == 0:
            return v
    values = []
    for x in (a, b):
        if isinstance(x, int):
            ops.append(_op("constant", (), {"value": Literal.of(x, "int32")}, at))
            x = ops[-1].result
        elif x.type.dtype != "int32":
            ops.append(_op("convert", (x,), {"dtype": "int32"}, at))
            x = ops[-1].result
        values.append(x)
    ops.append(_op("add", tuple(values), {}, at))
    return ops[-1].result


def _op(name: str, operands: tuple[Value, ...], attrs: dict, at: Op) -> Op:
    types = infer_result_types(name, [v.type for v in operands], attrs, (), at.loc)
    return Op(name, operands, tuple(Value(t) for t in types), attrs, (), at.loc)
