"""The IR below the function: values, ops and blocks (regions).

A ``Value`` is defined exactly once, by an op result or a block parameter; values compare by
identity. An ``Op`` names its definition (``OpDef``), holds operands, results, static attributes,
nested regions and a source location, and is never edited in place: passes build new ops, using
``replace()`` for a changed copy. A ``Block`` is a region: parameters, ops, and the values it
yields (like a jaxpr's outvars).

These live apart from ``Function`` and ``Module`` (``ir.core``) because the printer, the effects
analysis and the op syntax rules need them at import time, and ``Function.__str__`` needs the
printer: with them here, ``ir.core`` imports the printer at its top and no import runs in a cycle.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

from minipallas.ir.errors import MiniPallasError
from minipallas.ir.location import UNKNOWN, Location
from minipallas.ir.opdef import OPS
from minipallas.ir.types import Type


class Value:
    """An SSA value. Equality is identity: two values are the same only if they are one object."""

    __slots__ = ("type",)

    def __init__(self, type: Type) -> None:  # noqa: A002 - the IR's own word
        self.type = type

    def __repr__(self) -> str:
        return f"<Value {self.type} at {id(self):#x}>"


def _named(
    op: Op, found: Mapping[str, slice] | None, name: str | None, what: str
) -> Mapping[str, slice]:
    """``found``, or an error naming the groups there are when it is ``None`` or lacks
    ``name``."""
    if found is None or (name is not None and name not in found):
        known = ", ".join(found or ()) or "none: its operands do not fit its declaration"
        raise MiniPallasError(
            f"op '{op.name}' has no {what} '{name}'" if name else f"op '{op.name}' has no {what}s",
            op=op.name,
            loc=op.loc,
            fix=f"its groups: {known}",
        )
    return found


_EMPTY: Mapping[str, Any] = MappingProxyType({})
_KEEP = object()  # ``Op.replace``: the field is not changed
_new = object.__new__


def _frozen(attrs: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """A read-only copy of ``attrs``."""
    return MappingProxyType(dict(attrs)) if attrs else _EMPTY


class Op:
    """One operation. Build with ``Builder`` (which checks types) or ``Op(...)`` then verify."""

    __slots__ = ("name", "operands", "results", "attrs", "regions", "loc")

    def __init__(
        self,
        name: str,
        operands: tuple[Value, ...] = (),
        results: tuple[Value, ...] = (),
        attrs: Mapping[str, Any] | None = None,
        regions: tuple[Block, ...] = (),
        loc: Location = UNKNOWN,
    ) -> None:
        self.name = name
        self.operands = tuple(operands)
        self.results = tuple(results)
        self.attrs = _frozen(attrs)
        self.regions = tuple(regions)
        self.loc = loc

    @classmethod
    def of_parts(
        cls,
        name: str,
        operands: tuple[Value, ...],
        results: tuple[Value, ...],
        attrs: Mapping[str, Any],
        regions: tuple[Block, ...],
        loc: Location,
    ) -> Op:
        """An op from parts already in final form, taken as they are: tuples, and an ``attrs``
        mapping that is read-only or that no one else holds. Skips ``__init__``'s defensive
        copies, for passes that build an op per input op in their hot loop."""
        op = _new(cls)
        op.name = name
        op.operands = operands
        op.results = results
        op.attrs = attrs
        op.regions = regions
        op.loc = loc
        return op

    def renamed(self, operands: tuple[Value, ...]) -> Op:
        """A copy with new operands (a tuple, taken as it is) and fresh results of the same
        types, sharing the rest: what a pass makes of an op it does not otherwise change."""
        op = _new(Op)
        op.name = self.name
        op.operands = operands
        results = []
        for old in self.results:
            value = _new(Value)  # ``Value(old.type)`` without a call: the hot path of passes
            value.type = old.type
            results.append(value)
        op.results = tuple(results)
        op.attrs = self.attrs
        op.regions = self.regions
        op.loc = self.loc
        return op

    def replace(self, **changes: Any) -> Op:
        """A copy with some fields changed; the original is untouched."""
        attrs = changes.pop("attrs", _KEEP)
        op = Op(
            changes.pop("name", self.name),
            changes.pop("operands", self.operands),
            changes.pop("results", self.results),
            None,
            changes.pop("regions", self.regions),
            changes.pop("loc", self.loc),
        )
        if changes:
            raise TypeError(f"Op.replace() got an unexpected field {next(iter(changes))!r}")
        # unchanged attrs are this op's own read-only copy: shared rather than copied
        op.attrs = self.attrs if attrs is _KEEP else _frozen(attrs)
        return op

    def group(self, name: str) -> tuple[Value, ...]:
        """The operands the op's declaration names ``name``: one (``"ref"``, ``"lower"``) or a
        group (``for``'s ``"consts"``, ``"inits"``; ``get``'s ``"indices"``), wherever the
        attributes that size the groups put it: ``op.group("consts")`` instead of
        ``op.operands[2 : 2 + op.attrs["num_consts"]]``."""
        return self.operands[self.slices(name)[name]]

    def slices(self, name: str | None = None) -> Mapping[str, slice]:
        """Where each named operand or group sits among the operands, by name: for a rule
        whose values line up with the operands (``args[op.slices()["consts"]]``). With
        ``name``, an error naming the op's groups when it has none of that name."""
        opdef = OPS.get(self.name)
        found = None if opdef is None else opdef.groups(len(self.operands), self.attrs)
        return _named(self, found, name, "operand group")

    def param_group(self, name: str, region: int = 0) -> tuple[Value, ...]:
        """The parameters of region ``region`` that receive operand group ``name``, as its
        declaration lines them up (``OpDef.params``): a ``for`` body's
        ``op.param_group("consts")`` instead of ``body.params[1 : 1 + n_consts]``, its carries'
        ``op.param_group("inits")``, its ``op.param_group("index")``."""
        return self.regions[region].params[self.param_slices(region, name)[name]]

    def param_slices(self, region: int = 0, name: str | None = None) -> Mapping[str, slice]:
        """Where each named group sits among region ``region``'s parameters, by name: for
        values that line up with them (``run(body, args)``, ``new_params[where["inits"]]``)."""
        opdef = OPS.get(self.name)
        count = len(self.regions[region].params)
        found = (
            None
            if opdef is None
            else opdef.param_groups(region, len(self.operands), self.attrs, count)
        )
        return _named(self, found, name, f"region {region} parameter group")

    @property
    def result(self) -> Value:
        """The single result of a one-result op."""
        (value,) = self.results
        return value

    def __repr__(self) -> str:
        return f"<Op {self.name} at {self.loc}>"


class Block:
    """A region: parameters bound on entry, ops run in order, values yielded on exit.

    Regions are closed: a block sees only its own parameters and values it defines. Whatever a
    region needs from outside arrives as an operand of the op that owns it.
    """

    __slots__ = ("params", "ops", "results")

    def __init__(
        self,
        params: tuple[Value, ...] = (),
        ops: list[Op] | tuple[Op, ...] = (),
        results: tuple[Value, ...] = (),
    ) -> None:
        self.params = tuple(params)
        self.ops = tuple(ops)
        self.results = tuple(results)

    @property
    def param_types(self) -> tuple[Type, ...]:
        return tuple(p.type for p in self.params)

    @property
    def result_types(self) -> tuple[Type, ...]:
        return tuple(r.type for r in self.results)

    def walk(self) -> Iterator[Op]:
        """Every op in this block and, recursively, in the regions of its ops (pre-order)."""
        for op in self.ops:
            yield op
            for region in op.regions:
                yield from region.walk()
