"""One device's lowering context for a kernel that spans devices (issue 47): the device's rows
as its memrefs (``DeviceRef``), its position from ``tpu.device_id``, the barrier semaphore, and
the table of its rules (``DEVICE_RULES``, registered by ``rules/remote.py``, whose docstring
gives the model step by step). Apart from the rules, as ``context.py`` is for the one-chip
lowering: a support module imports no rule file.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from minipallas.ir.core import Block, Function, Op, Value
from minipallas.ir.location import Location
from minipallas.ir.rules import RuleTable
from minipallas.ir.types import SEMAPHORE
from minipallas.lowering.compat.jaxlib_shim import arith, ir, tpu
from minipallas.lowering.tpu import emit
from minipallas.lowering.tpu.context import Bound, LoweringContext, MemRef, unsupported
from minipallas.lowering.tpu.ranges import Interval

Mesh = tuple[tuple[str, ...], tuple[int, ...]]
VIEWS = ("tpu.memref_slice", "tpu.memref_squeeze", "tpu.memref_reshape", "tpu.memref_bitcast")


@dataclass(frozen=True)
class DeviceRef(MemRef):
    """A device's row of a row-per-device ref: its memref, the row's logical device id, and
    whether the row is the device's own."""

    device: ir.Value | None = None
    own: bool = True


def remote_device(ref: Bound) -> ir.Value | None:
    """The logical id of the device ``ref`` lives on, when that is not the device itself."""
    return ref.device if isinstance(ref, DeviceRef) and not ref.own else None


def signal_device(ctx: LoweringContext, op: Op, ref: Bound) -> ir.Value | None:
    """The device a ``semaphore_signal`` of ``ref`` names (step 6): another device's, or its
    own where the kernel's text signals remotely at the op's line."""
    remote = isinstance(ctx, DeviceContext) and op.loc in ctx.remote_signals
    return ref.device if isinstance(ref, DeviceRef) and (remote or not ref.own) else None


@dataclass(frozen=True)
class Copy:
    """A remote copy as emitted: its buffers, the root memrefs of its send and receive
    semaphores, its device id, and the block it was started in."""

    source: ir.Value
    target: ir.Value
    send: ir.Value
    recv: ir.Value
    device: ir.Value | None
    block: ir.Block


class DeviceContext(LoweringContext):
    """One device's lowering: the mesh (names, sizes), the device's position values, and the
    remote copies in flight between their start and send side (module doc)."""

    def __init__(
        self,
        grid: Sequence[int],
        ranges: dict[Value, Interval],
        *,
        mesh: Mesh,
        remote_signals: frozenset[Location] = frozenset(),
    ):
        super().__init__(grid, ranges)
        self.names, self.sizes = mesh
        self.remote_signals = remote_signals
        self.positions: list[list[ir.Value]] = [[] for _ in self.sizes]
        self.send_side: dict[Op, Op] = {}  # a remote start -> its send side
        self.started: dict[Op, tuple[MemRef, MemRef, MemRef]] = {}
        self.copies: list[Copy] = []  # the remote copies started so far

    def lower_body(self, fn: Function, args: Sequence[Bound]) -> list[Bound]:
        """The body's parameters past ``args`` hold the barrier semaphore (step 3)."""
        for block in (b for g in (fn, *fn.callees()) for b in _blocks(g.body)):
            self.send_side.update(_send_sides(block))
        barrier = fn.body.params[len(args) :]
        used = {v for op in fn.body.ops for v in op.operands}
        bound = [self.barrier() if p in used else None for p in barrier]
        out = super().lower_body(fn, [*args, *bound])
        if self.started:
            op = next(iter(self.started))
            raise unsupported(op, "a remote copy's start has no send side after it",
                              fix="this is a bug in minipallas's import of the copy")  # fmt: skip
        return out

    def barrier(self) -> DeviceRef:
        t = emit.memref_type((), "int32", SEMAPHORE)
        return DeviceRef(tpu.sem_barrier(t), "int32", SEMAPHORE, ())

    def lower_op(self, op: Op, args: Sequence[Bound]) -> Sequence[Bound]:
        rule = DEVICE_RULES.get(op.name)
        if rule is None:
            return super().lower_op(op, args)
        with self.op_location(op):
            return rule(self, op, *args)

    def position(self, axis: int) -> ir.Value:
        """The device's position along mesh axis ``axis`` (step 2)."""
        stride = math.prod(self.sizes[axis + 1 :])
        here = arith.divsi(tpu.device_id(), emit.i32(stride))
        value = arith.remsi(here, emit.i32(self.sizes[axis]))
        self.positions[axis].append(value)
        return value

    def logical(self, indices: Sequence[ir.Value]) -> ir.Value:
        """The logical id of the device at ``indices`` (step 1)."""
        total = emit.i32(0)
        for k, index in enumerate(indices):
            stride = emit.i32(math.prod(self.sizes[k + 1 :]))
            total = arith.addi(total, arith.muli(index, stride))
        return total


def _blocks(block: Block) -> list[Block]:
    return [block, *(b for op in block.ops for r in op.regions for b in _blocks(r))]


def _send_sides(block: Block) -> dict[Op, Op]:
    """Each remote start of ``block`` and its send side: a copy of a source onto itself after
    the start from that source (the importer emits them together, views between)."""
    pairs, last = {}, {}
    for op in block.ops:
        if op.name != "dma_start":
            continue
        src, dst, _ = op.operands
        if src is dst and src in last:
            pairs[last.pop(src)] = op
        else:
            last[src] = op
    return pairs


def view_root(value: ir.Value) -> ir.Value:
    """The memref a view was made from (through slices, squeezes, reshapes, bitcasts)."""
    while not isinstance(value.owner, ir.Block) and value.owner.name in VIEWS:
        value = value.owner.operands[0]
    return value


def holds(values: Sequence[ir.Value], value: ir.Value) -> bool:
    return any(v == value for v in values)


DEVICE_RULES: RuleTable = RuleTable("Mosaic TPU rule for a device's program")
