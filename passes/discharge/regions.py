"""Moving discharged refs into and out of the regions of a new region op.

Regions are closed, so a discharged ref reaches a region as an operand of its op. Inside, it must
become an array parameter (a loop const or carry, a branch argument) bound to a fresh ``Root``;
afterwards the region's final value of that root, if it wrote it, goes back to the ref outside.

Operands that name the same buffer (the same root) form one ``RefGroup`` and travel as one
array, so a write through one of them is seen through the others inside the region:

- one operand, or several that are the very same handle: the group's ``base`` is that handle,
  and the array passed in is the ref's own (possibly view-shaped) value;
- several different views of one root: the base is the root, each member re-applies its views
  inside the region, and the views' dynamic indices are passed in as extra parameters.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from minipallas.ir.core import Op, Value
from minipallas.ir.effects import region_operand_map
from minipallas.ir.opdef import READ
from minipallas.passes.discharge.engine import DischargeScope, Handle, Root, View
from minipallas.passes.discharge.views import Access


@dataclass(eq=False)
class RefGroup:
    """Discharged ref operands of one op that share a buffer."""

    base: Handle
    members: dict[int, tuple[View, ...]]  # operand position -> views from ``base`` to it
    written: bool = False
    _outer: Value | None = field(default=None, repr=False)

    def outer_value(self, scope: DischargeScope) -> Value:
        """The base's current value in the enclosing scope (read once per op)."""
        if self._outer is None:
            self._outer = Access(scope, self.base).value()
        return self._outer

    def write_back(self, scope: DischargeScope, final: Value) -> None:
        """Gives the region's final value of the group back to the ref outside."""
        Access(scope, self.base).write(final)


def group_refs(
    scope: DischargeScope, operands: Sequence[Value], positions: Iterable[int], writes: set[int]
) -> tuple[list[RefGroup], list[Value]]:
    """Groups the discharged refs among ``operands[positions]`` by root.

    Returns the groups (``written`` when a member position is in ``writes``) and the new values
    of the dynamic indices that members' views need inside the region.
    """
    by_root: dict[int, list[int]] = {}
    for pos in positions:
        handle = scope.handles.get(operands[pos])
        if handle is not None:
            by_root.setdefault(id(handle.root), []).append(pos)
    groups, dyn = [], []
    for members in by_root.values():
        handles = [scope.handles[operands[pos]] for pos in members]
        if all(h is handles[0] for h in handles):
            group = RefGroup(handles[0], {pos: () for pos in members})
        else:
            group = RefGroup(
                Handle(handles[0].root), {p: h.chain for p, h in zip(members, handles, strict=True)}
            )
            dyn.extend(v for h in handles for step in h.chain for v in step.dyn)
        group.written = any(pos in writes for pos in members)
        groups.append(group)
    return groups, list(dict.fromkeys(dyn))


def finish(
    scope: DischargeScope, new: Op, n_results: int, carried: Sequence[RefGroup]
) -> list[Value]:
    """Writes a new op's extra results back to the refs they carry; returns its first results."""
    for group, final in zip(carried, new.results[n_results:], strict=True):
        group.write_back(scope, final)
    return list(new.results[:n_results])


def positions(op: Op, *names: str) -> range:
    """The operand positions of the named groups, which must be adjacent (``while``'s
    ``"cond_consts", "body_consts"``)."""
    where = op.slices()
    return range(where[names[0]].start, where[names[-1]].stop)


def params_by_operand(op: Op, region_index: int) -> dict[int, Value]:
    """For a region of ``op``: the region parameter that receives each operand position."""
    region = op.regions[region_index]
    return {pos: region.params[k] for k, pos in region_operand_map(op, region_index).items()}


def written_operands(scope: DischargeScope, op: Op, region_index: int) -> set[int]:
    """Operand positions whose refs region ``region_index`` writes or accumulates into."""
    to_operand = region_operand_map(op, region_index)
    inside = scope.ctx.effects.block(op.regions[region_index])
    return {to_operand[e.input] for e in inside if e.kind is not READ and e.input in to_operand}


class Section:
    """Values a new region op passes into one region at one place of its operand list, with the
    region parameters that receive them, bound in the region's scope."""

    def __init__(self, outer: DischargeScope, inner: DischargeScope) -> None:
        self.outer = outer
        self.inner = inner
        self.operands: list[Value] = []
        self.params: list[Value] = []

    def add(self, outer_value: Value) -> Value:
        """Passes a new value in; returns the parameter that receives it."""
        param = Value(outer_value.type)
        self.operands.append(outer_value)
        self.params.append(param)
        return param

    def forward(self, old_param: Value, old_operand: Value) -> None:
        """Passes an operand that is not discharged (an array or a kept ref) through as is."""
        self.inner.bind(old_param, self.add(self.outer.value(old_operand)))

    def forward_all(self, op: Op, region_index: int, positions: Iterable[int]) -> None:
        """Forwards each operand at ``positions`` that is not a discharged ref."""
        params = params_by_operand(op, region_index)
        for pos in positions:
            if not self.outer.is_discharged(op.operands[pos]) and pos in params:
                self.forward(params[pos], op.operands[pos])

    def add_dyn(self, dyn: Sequence[Value]) -> dict[Value, Value]:
        """Passes in the dynamic indices of members' views; maps outer values to parameters."""
        return {v: self.add(v) for v in dyn}

    def add_group(
        self, group: RefGroup, dyn_map: Mapping[Value, Value], params: Mapping[int, Value]
    ) -> Root:
        """Passes a group's array in and binds each member's old parameter to a handle on it."""
        root = Root(self.add(group.outer_value(self.outer)), group.base.type)
        for pos, chain in group.members.items():
            param = params.get(pos)
            if param is not None:
                chain = tuple(step.with_dyn(tuple(dyn_map[v] for v in step.dyn)) for step in chain)
                self.inner.bind(param, Handle(root, chain))
        return root
