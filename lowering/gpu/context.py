"""The lowering context and the rule table: how a kernel body becomes Triton IR.

As for StableHLO, lowering is an interpreter over the IR: an environment maps each minipallas
``Value`` to what holds it in the Triton module, and each op goes to the rule registered for its
name. Two kinds of things live in the environment:

- an ``ir.Value`` for an array: a scalar (``i32``, ``f32``...) for shape ``()``, a ``tensor``
  otherwise;
- a ``memory.BlockRef`` for a ref: the kernel operands stay in global memory (partial
  discharge left them as refs), so a ref is a pointer plus where its block lies in the array.
  Rules for state ops turn it into pointer tensors, loads and stores.

Algorithm of ``LoweringContext.lower_block``:
1. Bind the block's parameters to the given values.
2. For each op: look up its rule, set the op's source location as the MLIR location, call the
   rule with the environment's entries for the operands, bind the op's results to what it
   returns.
3. Return the entries of the block's yielded values.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, Protocol

from minipallas.errors import PassError
from minipallas.ir.core import Block, Function, Op, Value
from minipallas.ir.location import Location
from minipallas.ir.opdef import OPS
from minipallas.lowering.gpu.emit import Index
from minipallas.lowering.jaxlib_shim import ir, make_triton_context


class Rule(Protocol):
    """Lowers one op: emits Triton IR at the current insertion point, returns one entry
    (``ir.Value`` or ``BlockRef``) per result. ``args`` are the entries of ``op.operands``."""

    def __call__(self, ctx: LoweringContext, op: Op, *args: Any) -> Sequence[Any]: ...


RULES: dict[str, Rule] = {}


def register(*names: str) -> Callable[[Rule], Rule]:
    """Registers a rule for the ops ``names``."""

    def add(rule: Rule) -> Rule:
        for name in names:
            if name in RULES:
                raise ValueError(f"Triton rule for {name!r} registered twice")
            RULES[name] = rule
        return rule

    return add


class LoweringContext:
    """One kernel being emitted: the MLIR module, the grid position, and which values are used.

    ``program_ids`` holds one ``i32`` per grid axis: ``tt.get_program_id`` for an axis the
    launch grid covers, the loop index for an axis the kernel iterates itself. ``grid`` is the
    kernel's grid (``num_programs`` folds to its entries).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.mlir = make_triton_context()
        self.module = ir.Module.create(loc=ir.Location.unknown(self.mlir))
        self.grid: tuple[int, ...] = ()
        self.program_ids: list[Index] = []
        self._used: set[Value] = set()
        self._locs: dict[Location, ir.Location] = {}
        self._memo: dict[tuple, Any] = {}

    def note_uses(self, fn: Function) -> None:
        """Records every value ``fn`` uses, so rules can skip work nobody reads (a store's
        old value)."""
        for f in (fn, *fn.callees()):
            for op in f.walk():
                self._used.update(op.operands)
                for region in op.regions:
                    self._used.update(region.results)
            self._used.update(f.body.results)

    def is_used(self, value: Value) -> bool:
        return value in self._used

    def memo(self, key: Hashable, build: Callable[[], Any]) -> Any:
        """``build()``, or what an identical earlier ``build`` gave in the current block (values
        defined earlier in the same block dominate what follows)."""
        where = (ir.InsertionPoint.current.block, key)
        if where not in self._memo:
            self._memo[where] = build()
        return self._memo[where]

    def lower_block(self, block: Block, args: Sequence[Any]) -> list[Any]:
        """Emits ``block``'s ops at the current insertion point; returns its yielded entries."""
        env: dict[Value, Any] = dict(zip(block.params, args, strict=True))
        for op in block.ops:
            outs = self.lower_op(op, [env[v] for v in op.operands])
            env.update(zip(op.results, outs, strict=True))
        return [env[v] for v in block.results]

    def lower_op(self, op: Op, args: Sequence[Any]) -> Sequence[Any]:
        """Emits one op on the given operand entries, at its source location."""
        rule = RULES.get(op.name)
        if rule is None:
            raise PassError("has no Triton lowering rule", op=op.name, loc=op.loc, fix=_fix(op))
        with self.location(op.loc):
            return rule(self, op, *args)

    def location(self, loc: Location) -> ir.Location:
        """The MLIR location of a source location: ``file:line:col``, or unknown."""
        if loc not in self._locs:
            if loc:
                self._locs[loc] = ir.Location.file(loc.file or "<ir>", loc.line, loc.col)
            else:
                self._locs[loc] = ir.Location.unknown()
        return self._locs[loc]


def _fix(op: Op) -> str:
    opdef = OPS.get(op.name)
    if opdef is not None and opdef.effect:
        return "this state op is not supported on kernel operands in Triton"
    return "add a rule with @register in minipallas.lowering.gpu"
