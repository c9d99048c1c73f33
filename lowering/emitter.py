"""What the three emitters (StableHLO, Mosaic TPU, Triton) share: lowering a block op by op.

Each target keeps its own rule table (``minipallas.ir.rules.RuleTable``), its own typed ``Rule``
protocol and its own ``LoweringContext`` (derived from ``EmitterContext``), which walks a
block, hands each op to its rule at the op's MLIR location, and makes an op without a rule a
``PassError`` naming it and the target.

Algorithm of ``EmitterContext.lower_block``:
1. Bind the block's parameters to the given entries (MLIR values, or a target's ref objects).
2. For each op: look up its rule, set the op's source location as the MLIR location, call the
   rule with the entries of the operands, bind the op's results to what it returns.
3. Return the entries of the block's yielded values.

``lower_body`` does this for a function's body, and an error on the way shows the IR around the
op whose rule raised it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from minipallas.ir.core import Block, Function, Op
from minipallas.ir.errors import MiniPallasError, PassError
from minipallas.ir.excerpt import show_ir
from minipallas.ir.location import Location
from minipallas.ir.rules import RuleTable, run_block
from minipallas.lowering.compat.jaxlib_shim import ir


class EmitterContext:
    """The op-by-op walk of an emitter. A subclass sets ``rules`` and ``target`` (the name in
    "has no ... lowering rule") and may override ``op_location`` and ``missing_rule_fix``."""

    rules: RuleTable[Callable[..., Sequence[Any]]]
    target: str
    mlir: ir.Context
    module: ir.Module

    def __init__(self) -> None:
        self._locs: dict[Location, ir.Location] = {}

    def lower_block(self, block: Block, args: Sequence[Any]) -> list[Any]:
        """Emits ``block``'s ops at the current insertion point; returns its yielded entries."""
        return run_block(block, args, self.lower_op)

    def lower_body(self, fn: Function, args: Sequence[Any]) -> list[Any]:
        """``lower_block`` of ``fn``'s body; an error at one of its ops (or its callees') notes
        the IR around that op (``ir.excerpt``)."""
        try:
            return self.lower_block(fn.body, args)
        except MiniPallasError as e:
            show_ir(e, fn)
            raise

    def lower_op(self, op: Op, args: Sequence[Any]) -> Sequence[Any]:
        """Emits one op on the given operand entries, at its source location."""
        rule = self.rules.get(op.name)
        if rule is None:
            raise PassError(
                f"has no {self.target} lowering rule",
                op=op.name,
                loc=op.loc,
                fix=self.missing_rule_fix(op),
            )
        with self.op_location(op):
            return rule(self, op, *args)

    def verify(self, name: str, fix: str) -> None:
        """Runs the MLIR verifier on the module emitted for ``@name``; a failure is a bug in
        the rules, reported as a ``PassError`` with ``fix``."""
        with self.mlir:
            try:
                self.module.operation.verify()
            except ir.MLIRError as e:
                raise PassError(
                    f"the {self.target} module emitted for @{name} fails the MLIR verifier: {e}",
                    fix=fix,
                ) from None

    def missing_rule_fix(self, op: Op) -> str:
        """The fix printed when ``op`` has no rule."""
        raise NotImplementedError

    def op_location(self, op: Op) -> ir.Location:
        """The MLIR location the op's rule emits at."""
        return self.location(op.loc)

    def location(self, loc: Location) -> ir.Location:
        """The MLIR location of a source location: ``file:line:col``, or unknown."""
        if loc not in self._locs:
            if loc:
                self._locs[loc] = ir.Location.file(loc.file or "<ir>", loc.line, loc.col)
            else:
                self._locs[loc] = ir.Location.unknown()
        return self._locs[loc]
