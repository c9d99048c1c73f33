"""Effects analysis: which refs an op, a region or a function reads, writes and accumulates into.

An effect names a *position*: for an op, the operand through which the ref reaches it; for a
block or function, the parameter. Because regions are closed, an effect inside a region on a ref
that came from outside is simply an effect on a region parameter, which the owning op maps to
its own operand. Effects on a ``run_scoped``'s own allocations stay inside it (upstream's
``_run_scoped_abstract_eval`` does the same).

Algorithm, for a block:
1. Give each block parameter that is a ref its own position; follow ``ref.*`` views so a view
   has the position of the ref it looks into.
2. For each op, take its effects on operand positions (state ops: the op's declared effect on
   operand 0; region ops: their regions' effects mapped back to operands) and re-express each
   one at the position of the block parameter the operand comes from. Effects on refs made
   inside the block (scoped allocations) have no position and are dropped.
Region effects are cached per block, so the whole analysis is linear in program size.

Each state op has upstream's effect kind: ``get`` and ``load`` read, ``store`` and ``swap``
write (upstream's ``swap`` and ``masked_swap`` are ``{WriteEffect(0)}`` though they return the
old contents), ``addupdate`` accumulates. A pass that must know whether a ref's old contents are
observed asks ``effects_with_swap_reads``, where a ``swap`` whose result is used also reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from minipallas.ir.errors import PassError
from minipallas.ir.nodes import Block, Op, Value
from minipallas.ir.opdef import ACCUM, OPS, READ, WRITE, EffectKind

if TYPE_CHECKING:  # ir.core imports the printer, which imports this module
    from minipallas.ir.core import Function

_ORDER = tuple(EffectKind)


@dataclass(frozen=True)
class Effect:
    """``kind`` on the ref at position ``input``.

    Effects sort by position, then kind in ``EffectKind``'s order, which is how they print:
    ``{read 0, write 0, accum 1}``.
    """

    kind: EffectKind
    input: int

    def __post_init__(self) -> None:
        if (
            not isinstance(self.kind, EffectKind)
            or not isinstance(self.input, int)
            or self.input < 0
        ):
            raise PassError(
                f"bad effect {self.kind!r} on input {self.input!r}",
                fix="kind is an EffectKind (READ, WRITE or ACCUM); input is an int >= 0",
            )

    def __lt__(self, other: Effect) -> bool:
        return (self.input, _ORDER.index(self.kind)) < (other.input, _ORDER.index(other.kind))

    def __str__(self) -> str:
        return f"{self.kind} {self.input}"

    def __repr__(self) -> str:
        return f"{self.kind.name.title()}({self.input})"  # as built: Read(0), Accum(1)


class Effects(frozenset):
    """A set of effects that prints as the IR does, ``{read 0, write 1}``, and whose
    repr can be typed back (``Effects({Read(0), Write(1)})``); otherwise a frozenset."""

    def __str__(self) -> str:
        return "{" + ", ".join(map(str, sorted(self))) + "}"

    def __repr__(self) -> str:
        return "Effects({" + ", ".join(map(repr, sorted(self))) + "})"


def Read(input: int) -> Effect:  # noqa: N802 - named like upstream's effect classes
    return Effect(READ, input)


def Write(input: int) -> Effect:  # noqa: N802
    return Effect(WRITE, input)


def Accum(input: int) -> Effect:  # noqa: N802
    return Effect(ACCUM, input)


def region_operand_map(op: Op, region_index: int) -> Mapping[int, int]:
    """For a region op: which of the op's operands each region parameter holds, as its
    declaration lines them up (``OpDef.params``).

    Parameters missing from the map (loop indices, carries, scoped allocations) hold no operand:
    a loop's carries receive its ``inits`` on the first trip only, then what the body yields.
    """
    opdef = OPS.get(op.name)
    if opdef is None or not opdef.params:
        raise PassError(
            "the effects analysis does not know how this op's regions use its operands",
            op=op.name,
            loc=op.loc,
        )
    operands, found = op.slices(), {}
    for name, where in op.param_slices(region_index).items():
        if name in operands and name != "inits":
            first = operands[name].start
            found.update((where.start + k, first + k) for k in range(where.stop - where.start))
    return found


class EffectsAnalysis:
    """Computes effects with a per-block cache; one instance per analysed program.

    With ``swap_reads``, a ``swap`` whose result is used in its block also reads its ref.
    """

    def __init__(self, swap_reads: bool = False) -> None:
        self.swap_reads = swap_reads
        self._blocks: dict[int, tuple[Block, frozenset[Effect]]] = {}

    def op(self, op: Op) -> frozenset[Effect]:
        """Effects of one op, at the positions of its operands."""
        if op.name == "call":
            return self.function(op.attrs["callee"])
        if op.regions:
            found = set()
            for r, region in enumerate(op.regions):
                to_operand = region_operand_map(op, r)
                for eff in self.block(region):
                    if eff.input in to_operand:
                        found.add(Effect(eff.kind, to_operand[eff.input]))
            return frozenset(found)
        opdef = OPS.get(op.name)
        if opdef is None:
            raise PassError(f"unknown op '{op.name}'", op=op.name, loc=op.loc)
        return frozenset(Effect(kind, i) for kind, i in opdef.effects)

    def block(self, block: Block) -> frozenset[Effect]:
        """Effects of a region, at the positions of its parameters."""
        cached = self._blocks.get(id(block))
        if cached is not None and cached[0] is block:
            return cached[1]
        position: dict[Value, int] = {p: i for i, p in enumerate(block.params)}
        used = _used_values(block) if self.swap_reads else set()
        found = set()
        for op in block.ops:
            if op.name.startswith("ref.") and op.operands[0] in position:
                position[op.results[0]] = position[op.operands[0]]
                continue
            own = self.op(op)
            if op.name == "swap" and op.results[0] in used:
                own = own | {Read(0)}
            for eff in own:
                source = op.operands[eff.input]
                if source in position:
                    found.add(Effect(eff.kind, position[source]))
        result = frozenset(found)
        self._blocks[id(block)] = (block, result)
        return result

    def function(self, fn: Function) -> frozenset[Effect]:
        return self.block(fn.body)

    def shared(self, op: Op) -> frozenset[Effect]:
        """A collective ``run_scoped``'s effects on its own allocations (at their positions):
        the group's effects. Each program's effects are over its parameters, and an
        allocation is none of them; a collective one is every program's of the group, so what
        the body does to it is what the group does to one shared buffer (issue 15)."""
        if op.name != "run_scoped" or not op.attrs.get("collective_axes"):
            return frozenset()
        allocs = op.param_slices()["allocs"]  # the first parameters
        return frozenset(e for e in self.block(op.regions[0]) if e.input < allocs.stop)


def _used_values(block: Block) -> set[Value]:
    """Values the block's ops or results use (regions are closed, so nothing deeper does)."""
    used = set(block.results)
    for op in block.ops:
        used.update(op.operands)
    return used


def effects(fn: Function | Block | Op) -> Effects:
    """The effects of a function (at parameter positions), a block, or an op (at operands),
    with upstream's kinds op by op; ``print`` shows them as the IR does: ``{read 0, write 1}``."""
    analysis = EffectsAnalysis()
    if isinstance(fn, Op):
        return Effects(analysis.op(fn))
    if isinstance(fn, Block):
        return Effects(analysis.block(fn))
    return Effects(analysis.function(fn))


def effects_with_swap_reads(fn: Function | Block) -> frozenset[Effect]:
    """Like ``effects``, but a ``swap`` whose old contents are used also reads its ref: what a
    pass needs to know whether a ref's incoming value is observed."""
    analysis = EffectsAnalysis(swap_reads=True)
    if isinstance(fn, Block):
        return analysis.block(fn)
    return analysis.function(fn)
