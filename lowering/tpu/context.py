"""The kernel lowering context and the rule table: how a kernel body becomes Mosaic MLIR.

As for StableHLO, lowering is an interpreter over the IR: an environment maps each minipallas
``Value`` to what holds it in MLIR and each op goes to the rule registered for its name. The
difference is that a kernel body is *stateful*: its refs are not discharged but become
``memref``s, and the rules turn reads and writes into ``vector.load`` / ``tpu.vector_store``.
So the environment holds two kinds of things: an ``ir.Value`` for an array, a ``MemRef`` for a
ref. The rule files (``rules/``, one per op family) register their rules with ``@rule``; an
op without a rule is an error naming it.

The block walk is ``EmitterContext.lower_block`` (``minipallas.lowering.emitter``).
Regions are closed in minipallas but open in MLIR, so a region parameter that stands for an
outer value (a ref passed to a ``cond`` branch, a loop constant) is bound to that outer value
itself; only loop carries become block arguments.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from minipallas.ir.core import Op, Value
from minipallas.ir.errors import PassError
from minipallas.ir.location import Location
from minipallas.ir.rules import RuleTable
from minipallas.ir.types import MemorySpace
from minipallas.lowering.compat.jaxlib_shim import ir, make_tpu_context
from minipallas.lowering.emitter import EmitterContext
from minipallas.lowering.tpu.emit import space_name
from minipallas.lowering.tpu.ranges import Interval


@dataclass(frozen=True)
class MemRef:
    """A ref during lowering: the ``memref`` holding it and how the kernel sees it.

    ``squeezed`` has one flag per memref dimension: a squeezed dimension (a ``None`` in a block
    shape) is 1 in the memref, as upstream keeps it, but the kernel's ref does not have it, so
    an indexer has entries only for the other dimensions.
    """

    value: ir.Value
    dtype: str
    space: MemorySpace
    squeezed: tuple[bool, ...]

    @property
    def shape(self) -> list[int]:
        return list(ir.MemRefType(self.value.type).shape)

    @property
    def space_name(self) -> str:
        """``vmem``, ``smem``, ``any`` or ``semaphore_mem``."""
        return space_name(self.space)


Bound = ir.Value | MemRef


class Rule(Protocol):
    """Lowers one op: emits MLIR at the current insertion point, returns one entry per result.

    ``args`` are what ``op.operands`` are bound to, in order (``MemRef`` for refs). The MLIR
    location is already the op's source location.
    """

    def __call__(self, ctx: LoweringContext, op: Op, *args: Bound) -> Sequence[Bound]: ...


RULES: RuleTable[Rule] = RuleTable("Mosaic TPU rule")
rule = RULES.register


class LoweringContext(EmitterContext):
    """One kernel lowering in progress: the module, the grid and what the body knows about it.

    ``grid_indices`` are the kernel function's grid arguments (``program_id`` reads them);
    ``ranges`` bounds integer scalars so index clamps can be left out when they cannot fire;
    ``pieces`` maps each ``tpu.concatenate`` result to its axis and parts (``pieces``).
    """

    rules = RULES
    target = "Mosaic TPU"

    def __init__(self, grid: Sequence[int], ranges: dict[Value, Interval]) -> None:
        super().__init__()
        self.mlir = make_tpu_context()
        self.module = ir.Module.create(loc=ir.Location.unknown(self.mlir))
        self.grid = tuple(grid)
        self.grid_indices: list[ir.Value] = []
        self.ranges = ranges
        self.pieces: dict[ir.Value, tuple[int, tuple[ir.Value, ...]]] = {}
        # upstream's fuse_transposed_lhs_in_matmul: a transposed left side's matmul says so
        self.fuse_transposed_lhs = False
        self._named_locs: dict[tuple[Location, str], ir.Location] = {}

    def missing_rule_fix(self, op: Op) -> str:
        return "add a rule with @rule in minipallas.lowering.tpu"

    def op_location(self, op: Op) -> ir.Location:
        """``loc("op"("file":line:col))``: the user's line, named by the minipallas op."""
        key = (op.loc, op.name)
        if key not in self._named_locs:
            self._named_locs[key] = ir.Location.name(op.name, childLoc=self.location(op.loc))
        return self._named_locs[key]

    def range_of(self, v: Value) -> Interval | None:
        return self.ranges.get(v)


def unsupported(op: Op, message: str, fix: str) -> PassError:
    """The error for a construct Mosaic cannot express (upstream raises NotImplementedError)."""
    return PassError(message, op=op.name, loc=op.loc, fix=fix)


def no_mosaic_rule(op: Op, fix: str) -> PassError:
    """The error for an op upstream Pallas's Mosaic lowering has no rule for."""
    message = f"{op.name} has no Mosaic TPU lowering (upstream Pallas TPU has no rule for it)"
    return unsupported(op, message, fix)
