"""The kernel lowering context and the rule table: how a kernel body becomes Mosaic MLIR.

As for StableHLO, lowering is an interpreter over the IR: an environment maps each minipallas
``Value`` to what holds it in MLIR and each op goes to the rule registered for its name. The
difference is that a kernel body is *stateful*: its refs are not discharged but become
``memref``s, and the rules turn reads and writes into ``vector.load`` / ``tpu.vector_store``.
So the environment holds two kinds of things: an ``ir.Value`` for an array, a ``MemRef`` for a
ref. Rule files (``state``, ``views``, ``arrays``, ``control``, ``scoped``, ``kernel``,
``indexed``) register their rules with ``@register``; an op without a rule is an error naming it.

Algorithm of ``KernelContext.lower_block``:
1. Bind the block's parameters to the given MLIR values / memrefs.
2. For each op: look up its rule, set the op's source location, call the rule with what the
   operands are bound to, bind the op's results to what it returns.
3. Return what the block's yielded values are bound to.
Regions are closed in minipallas but open in MLIR, so a region parameter that stands for an
outer value (a ref passed to a ``cond`` branch, a loop constant) is bound to that outer value
itself; only loop carries become block arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from minipallas.errors import PassError
from minipallas.ir.core import Block, Op, Value
from minipallas.ir.location import Location
from minipallas.ir.types import MemorySpace
from minipallas.lowering.jaxlib_shim import ir, make_tpu_context
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
        """``vmem``, ``smem`` or ``any``."""
        return space_name(self.space)


Bound = ir.Value | MemRef


class Rule(Protocol):
    """Lowers one op: emits MLIR at the current insertion point, returns one entry per result.

    ``args`` are what ``op.operands`` are bound to, in order (``MemRef`` for refs). The MLIR
    location is already the op's source location.
    """

    def __call__(self, ctx: KernelContext, op: Op, *args: Bound) -> Sequence[Bound]: ...


RULES: dict[str, Rule] = {}


def register(*names: str) -> Callable[[Rule], Rule]:
    """Registers a rule for the ops ``names``."""

    def add(rule: Rule) -> Rule:
        for name in names:
            if name in RULES:
                raise ValueError(f"Mosaic TPU rule for {name!r} registered twice")
            RULES[name] = rule
        return rule

    return add


class KernelContext:
    """One kernel lowering in progress: the module, the grid and what the body knows about it.

    ``grid_indices`` are the kernel function's grid arguments (``program_id`` reads them);
    ``ranges`` bounds integer scalars so index clamps can be left out when they cannot fire.
    """

    def __init__(self, grid: Sequence[int], ranges: dict[Value, Interval]) -> None:
        self.mlir = make_tpu_context()
        self.module = ir.Module.create(loc=ir.Location.unknown(self.mlir))
        self.grid = tuple(grid)
        self.grid_indices: list[ir.Value] = []
        self.ranges = ranges
        self._locs: dict[tuple[Location, str], ir.Location] = {}

    def lower_block(self, block: Block, args: Sequence[Bound]) -> list[Bound]:
        """Emits ``block``'s ops at the current insertion point; returns its yielded values."""
        env: dict[Value, Bound] = dict(zip(block.params, args, strict=True))
        for op in block.ops:
            rule = RULES.get(op.name)
            if rule is None:
                raise PassError(
                    "has no Mosaic TPU lowering rule",
                    op=op.name,
                    loc=op.loc,
                    fix="add a rule with @register in minipallas.lowering.tpu",
                )
            with self.location(op.loc, op.name):
                outs = rule(self, op, *(env[v] for v in op.operands))
            env.update(zip(op.results, outs, strict=True))
        return [env[v] for v in block.results]

    def location(self, loc: Location, name: str) -> ir.Location:
        """``loc("op"("file":line:col))``: the user's line, named by the minipallas op."""
        key = (loc, name)
        if key not in self._locs:
            where = (
                ir.Location.file(loc.file or "<ir>", loc.line, loc.col)
                if loc
                else ir.Location.unknown()
            )
            self._locs[key] = ir.Location.name(name, childLoc=where)
        return self._locs[key]

    def range_of(self, v: Value) -> Interval | None:
        return self.ranges.get(v)


def unsupported(op: Op, message: str, fix: str) -> PassError:
    """The error for a construct Mosaic cannot express (upstream raises NotImplementedError)."""
    return PassError(message, op=op.name, loc=op.loc, fix=fix)
