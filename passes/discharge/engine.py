"""The discharge interpreter: walks a stateful block and builds its pure counterpart.

Discharge never edits the input. It *interprets* each block with an environment:

- ``Scope.env`` maps each old value (an array, or a ref that is not discharged) to its new value;
- ``Scope.handles`` maps each old *discharged* ref (a parameter, a scoped allocation, or a view
  of one) to a ``Handle``: the ``Root`` cell that holds the ref's current array value, plus the
  chain of views (``View``) between that root and the ref.

Algorithm, for one block (``Scope.run``):
1. The caller binds the block's parameters (arrays and kept refs in ``env``, discharged refs to
   handles).
2. For each op: when it has regions, is a ``call``, or uses a discharged ref, its registered rule
   runs; otherwise it is copied with its operands renamed. A rule emits pure ops into the scope,
   updates roots for the refs the op writes, and returns the new value of each result (a
   ``Handle`` for a view).
3. The block's yields are looked up in ``env``; the roots' final values are what the caller
   threads out (function results, loop carries, branch results).

Each op is visited once per time its block is interpreted, rules read effects from one cached
``EffectsAnalysis`` and discharged callees are cached per discharge pattern, so the pass is
linear in program size.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from minipallas.errors import PassError
from minipallas.ir.builder import Builder
from minipallas.ir.core import Block, Function, Op, Value
from minipallas.ir.location import UNKNOWN, Location
from minipallas.ir.types import ArrayType, RefType
from minipallas.passes.effects import EffectsAnalysis


class Root:
    """The current array value of one discharged ref (a parameter or a scoped allocation).

    A mutable cell: every handle on the same buffer shares it, so a write through one view is
    seen by reads through all the others. ``derived`` remembers values already computed from
    the current value (a view's contents, a window read), so reading the same thing twice
    between writes emits it once; setting a new value forgets them.
    """

    __slots__ = ("_value", "type", "derived")

    def __init__(self, value: Value, type: RefType) -> None:  # noqa: A002 - the IR's own word
        self._value = value
        self.type = type
        self.derived: dict[tuple, Value] = {}

    @property
    def value(self) -> Value:
        return self._value

    @value.setter
    def value(self, new: Value) -> None:
        self._value = new
        self.derived = {}


@dataclass(frozen=True, eq=False)
class View:
    """One ``ref.at`` / ``ref.reshape`` / ``ref.bitcast`` / ``ref.transpose`` step.

    ``dyn`` holds the *new* values of the view's dynamic indices; ``parent`` and ``type`` are
    the ref types before and after the step.
    """

    op: str
    attrs: Mapping[str, Any]
    dyn: tuple[Value, ...]
    parent: RefType
    type: RefType
    loc: Location = UNKNOWN

    def with_dyn(self, dyn: tuple[Value, ...]) -> View:
        return View(self.op, self.attrs, dyn, self.parent, self.type, self.loc)


@dataclass(frozen=True, eq=False)
class Handle:
    """What a discharged ref is during discharge: its root and the views in between."""

    root: Root
    chain: tuple[View, ...] = ()

    @property
    def type(self) -> RefType:
        return self.chain[-1].type if self.chain else self.root.type


class DischargeRule(Protocol):
    """The contract every discharge rule follows.

    Called with the scope being built and the old op. It emits the op's pure form through
    ``scope.emit`` / ``scope.emit_typed`` / ``scope.emit_op``, looks up the new values of its
    operands with ``scope.value`` (``scope.handles`` for discharged refs), reads and writes
    discharged refs through ``views.Access`` (which updates their roots), and returns one entry
    per result of the old op: its new ``Value``, or a ``Handle`` for a view of a discharged ref.
    """

    def __call__(self, scope: Scope, op: Op) -> Sequence[Value | Handle]: ...


@dataclass(frozen=True)
class _Entry:
    rule: DischargeRule
    always: bool  # run even when no operand is a discharged ref (region ops, calls)


_RULES: dict[str, _Entry] = {}


def register(*names: str, always: bool = False) -> Callable[[DischargeRule], DischargeRule]:
    """Registers ``rule`` for ops ``names``.

    Without ``always`` the rule runs only for ops that use a discharged ref; other ops with that
    name are copied unchanged (e.g. a ``get`` on a ref that is not discharged).
    """

    def add(rule: DischargeRule) -> DischargeRule:
        for name in names:
            if name in _RULES:
                raise ValueError(f"discharge rule for {name!r} registered twice")
            _RULES[name] = _Entry(rule, always)
        return rule

    return add


ScopedPredicate = Callable[[RefType], bool]


class Context:
    """What one ``discharge`` call shares across all blocks: effects, callees, options."""

    def __init__(self, discharge_scoped: ScopedPredicate) -> None:
        self.effects = EffectsAnalysis()
        self.discharge_scoped = discharge_scoped
        self._callees: dict[tuple[int, tuple[bool, ...]], tuple[Function, Function]] = {}
        self._active: set[tuple[int, tuple[bool, ...]]] = set()

    def function(self, fn: Function, mask: Sequence[bool], name: str | None = None) -> Function:
        """``fn`` discharged: each param whose ``mask`` entry is true (and is a ref) becomes an
        array, and its final value is appended to the results in parameter order."""
        scope = Scope(self)
        params: list[Value] = []
        roots: list[Root] = []
        for p, discharge in zip(fn.params, mask, strict=True):
            if discharge and isinstance(p.type, RefType):
                new = Value(p.type.value_type)
                root = Root(new, p.type)
                roots.append(root)
                scope.handles[p] = Handle(root)
            else:
                new = Value(p.type)
                scope.env[p] = new
            params.append(new)
        scope.run(fn.body.ops)
        results = [scope.value(r) for r in fn.body.results]
        results += [root.value for root in roots]
        return Function(name or fn.name, Block(tuple(params), scope.ops, tuple(results)))

    def callee(self, fn: Function, mask: tuple[bool, ...]) -> Function:
        """The discharged version of a callee for one pattern of discharged params (cached)."""
        key = (id(fn), mask)
        cached = self._callees.get(key)
        if cached is not None:
            return cached[1]
        if key in self._active:
            raise PassError(
                f"@{fn.name} calls itself; recursive calls cannot be discharged", op="call"
            )
        self._active.add(key)
        ref_mask = [m for m, p in zip(mask, fn.params, strict=True) if isinstance(p.type, RefType)]
        if not any(ref_mask):
            name = fn.name
        elif all(ref_mask):
            name = f"{fn.name}_discharged"
        else:
            name = f"{fn.name}_discharged_{''.join('1' if m else '0' for m in ref_mask)}"
        new = self.function(fn, mask, name)
        self._active.discard(key)
        self._callees[key] = (fn, new)
        return new


class Scope:
    """One block under construction: the environment and the new ops emitted so far."""

    __slots__ = ("ctx", "env", "handles", "_builder")

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.env: dict[Value, Value] = {}
        self.handles: dict[Value, Handle] = {}
        self._builder = Builder(error=PassError)

    @property
    def ops(self) -> list[Op]:
        return self._builder.ops

    def child(self) -> Scope:
        """A fresh scope for a region of an op emitted here."""
        return Scope(self.ctx)

    # -- environment -------------------------------------------------------------------------

    def value(self, old: Value) -> Value:
        """The new value standing for ``old`` (an array, or a ref that is not discharged)."""
        new = self.env.get(old)
        if new is not None:
            return new
        if old in self.handles:
            raise PassError(
                f"a discharged ref ({old.type}) is used where a value is expected",
                fix="only state ops, views and region ops may take discharged refs",
            )
        raise PassError(
            f"a value of type {old.type} is used before it is defined",
            fix="verify the input function (minipallas.verify)",
        )

    def bind(self, old: Value, new: Value | Handle) -> None:
        if isinstance(new, Handle):
            self.handles[old] = new
        else:
            self.env[old] = new

    def alias(self, old: Value, to: Value) -> None:
        """Binds ``old`` to whatever ``to`` (an old value already bound here) stands for."""
        handle = self.handles.get(to)
        self.bind(old, handle if handle is not None else self.value(to))

    def is_discharged(self, old: Value) -> bool:
        return old in self.handles

    # -- emitting ----------------------------------------------------------------------------

    def emit_op(
        self,
        name: str,
        operands: Sequence[Value],
        loc: Location = UNKNOWN,
        regions: Sequence[Block] = (),
        **attrs: Any,
    ) -> Op:
        """Appends a new, type-checked op."""
        return self._builder.create(name, operands, attrs, regions, loc)

    def emit(
        self, name: str, operands: Sequence[Value], loc: Location = UNKNOWN, **attrs: Any
    ) -> Value:
        """Appends a new one-result op and returns its result."""
        return self._builder.create(name, operands, attrs, (), loc).result

    def emit_typed(
        self,
        name: str,
        operands: Sequence[Value],
        result: ArrayType,
        loc: Location = UNKNOWN,
        **attrs: Any,
    ) -> Value:
        """Like ``emit``, for an op whose result type the caller already knows (the hot path:
        windowed reads and writes); skips the type rule, which the verifier runs later."""
        value = Value(result)
        self._builder.add(Op(name, tuple(operands), (value,), attrs, (), loc))
        return value

    # -- interpreting ------------------------------------------------------------------------

    def run(self, ops: Sequence[Op]) -> None:
        """Discharges ``ops`` into this scope, in order."""
        handles = self.handles
        for op in ops:
            touches = not handles.keys().isdisjoint(op.operands)
            entry = _RULES.get(op.name)
            if entry is None:
                if touches or op.regions:
                    raise PassError(
                        f"no discharge rule for op '{op.name}'",
                        op=op.name,
                        loc=op.loc,
                        fix="register one with minipallas.passes.discharge.register",
                    )
                self._copy(op)
            elif touches or entry.always:
                news = entry.rule(self, op)
                if len(news) != len(op.results):
                    raise PassError(
                        f"discharge rule returned {len(news)} values for {len(op.results)} results",
                        op=op.name,
                        loc=op.loc,
                    )
                for old, new in zip(op.results, news, strict=True):
                    self.bind(old, new)
            else:
                self._copy(op)

    def inline(self, block: Block, args: Sequence[Value]) -> list[Value]:
        """Runs ``block``'s ops right here, its params bound to old values ``args`` bound in
        this scope; returns the new values of its yields."""
        for param, arg in zip(block.params, args, strict=True):
            self.alias(param, arg)
        self.run(block.ops)
        return [self.value(r) for r in block.results]

    def _copy(self, op: Op) -> None:
        env = self.env
        try:
            operands = tuple(env[v] for v in op.operands)
        except KeyError:
            operands = tuple(self.value(v) for v in op.operands)  # raises the located error
        results = tuple(Value(r.type) for r in op.results)
        self._builder.add(op.replace(operands=operands, results=results))
        for old, new in zip(op.results, results, strict=True):
            env[old] = new


def written(effects: frozenset) -> set[int]:
    """Positions an effect set writes or accumulates into."""
    return {e.input for e in effects if e.kind != "read"}
