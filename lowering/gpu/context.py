"""The lowering context and the rule table: how a kernel body becomes Triton IR.

As for StableHLO, lowering is an interpreter over the IR: an environment maps each minipallas
``Value`` to what holds it in the Triton module, and each op goes to the rule registered for its
name. Two kinds of things live in the environment:

- an ``ir.Value`` for an array: a scalar (``i32``, ``f32``...) for shape ``()``, a ``tensor``
  otherwise;
- a ``BlockRef`` for a ref: the kernel operands stay in global memory (partial
  discharge left them as refs), so a ref is a pointer plus where its block lies in the array.
  Rules for state ops turn it into pointer tensors, loads and stores.

The block walk is ``EmitterContext.lower_block`` (``minipallas.lowering.emitter``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from minipallas.ir.core import Function, Op, Value
from minipallas.ir.opdef import OPS
from minipallas.ir.rules import RuleTable
from minipallas.ir.types import ArrayType
from minipallas.lowering.compat.jaxlib_shim import ir, make_triton_context
from minipallas.lowering.emitter import EmitterContext
from minipallas.lowering.gpu.emit import Index


@dataclass(frozen=True)
class Dim:
    """Positions ``start + stride * j`` (``j < size``) of one array dimension; ``size`` is
    ``None`` where the ref has no such dimension (squeezed, or fixed by an integer index) and
    sees position ``start`` only. ``overhang``: positions may pass the array's end."""

    start: Index
    size: int | None
    stride: int = 1
    overhang: bool = False


@dataclass(frozen=True)
class BlockRef:
    """A ref to (part of) one block of a kernel operand in global memory.

    ``order`` lists the array dimensions the ref has, in the ref's own order (a transposed view
    reorders them).
    """

    pointer: ir.Value
    array: ArrayType
    dims: tuple[Dim, ...]
    order: tuple[int, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.dims[d].size for d in self.order)  # type: ignore[misc]


def block_ref(
    pointer: ir.Value, array: ArrayType, starts: Sequence[Index], block: Sequence[int | None]
) -> BlockRef:
    """The ref the kernel body gets for an operand: the block at ``starts`` (element offsets,
    one per array dimension) of ``block`` shape, ``None`` for a squeezed dimension."""
    dims = tuple(
        Dim(start, size, 1, size is not None and n % size != 0)
        for start, size, n in zip(starts, block, array.shape, strict=True)
    )
    order = tuple(d for d, size in enumerate(block) if size is not None)
    return BlockRef(pointer, array, dims, order)


class Rule(Protocol):
    """Lowers one op: emits Triton IR at the current insertion point, returns one entry
    (``ir.Value`` or ``BlockRef``) per result. ``args`` are the entries of ``op.operands``."""

    def __call__(self, ctx: LoweringContext, op: Op, *args: Any) -> Sequence[Any]: ...


RULES: RuleTable[Rule] = RuleTable("Triton rule")
rule = RULES.register


class LoweringContext(EmitterContext):
    """One kernel being emitted: the MLIR module, the grid position, and which values are used.

    ``program_ids`` holds one ``i32`` per grid axis: ``tt.get_program_id`` for an axis the
    launch grid covers, the loop index for an axis the kernel iterates itself. ``grid`` is the
    kernel's grid (``num_programs`` folds to its entries).
    """

    rules = RULES
    target = "Triton"

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.mlir = make_triton_context()
        self.module = ir.Module.create(loc=ir.Location.unknown(self.mlir))
        self.grid: tuple[int, ...] = ()
        self.program_ids: list[Index] = []
        self._used: set[Value] = set()
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

    def missing_rule_fix(self, op: Op) -> str:
        opdef = OPS.get(op.name)
        if opdef is not None and opdef.effect:
            return "this state op is not supported on kernel operands in Triton"
        return "add a rule with @rule in minipallas.lowering.gpu"
