"""The discharge interpreter: walks a stateful block and builds its pure counterpart.

Discharge never edits the input. It *interprets* each block in a ``DischargeScope``:

- ``env`` maps each old value (an array, or a ref that is not discharged) to its new value;
- ``handles`` maps each old *discharged* ref (a parameter, a scoped allocation, or a view
  of one) to a ``Handle``: the ``Root`` cell that holds the ref's current array value, plus the
  chain of views (``View``) between that root and the ref.

Algorithm, for one block (``DischargeScope.run``):
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
from types import MappingProxyType
from typing import Any, NoReturn, Protocol

from minipallas.ir.builder import Builder
from minipallas.ir.core import Block, Function, Op, Value
from minipallas.ir.effects import EffectsAnalysis
from minipallas.ir.errors import MiniPallasError, PassError
from minipallas.ir.excerpt import at_op, show_ir
from minipallas.ir.location import UNKNOWN, Location
from minipallas.ir.opdef import READ
from minipallas.ir.rules import RuleTable
from minipallas.ir.types import ArrayType, RefType


class Root:
    """The current array value of one discharged ref (a parameter or a scoped allocation).

    A mutable cell: every handle on the same buffer shares it, so a write through one view is
    seen by reads through all the others. ``derived`` remembers values already computed from
    the current value (a view's contents, a window read), so reading the same thing twice
    between writes emits it once; giving it a new value forgets them (``Access.write``).
    """

    __slots__ = ("value", "type", "derived")

    def __init__(self, value: Value, type: RefType) -> None:  # noqa: A002 - the IR's own word
        self.value = value
        self.type = type
        self.derived: dict[tuple, Value] = {}


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


class Handle:
    """What a discharged ref is during discharge: its root and the views in between.

    ``type`` is the ref's type: the last view's, or the root's when there is no view.
    Compares by identity.
    """

    __slots__ = ("root", "chain", "type")

    def __init__(self, root: Root, chain: tuple[View, ...] = ()) -> None:
        self.root = root
        self.chain = chain
        self.type = chain[-1].type if chain else root.type


class DischargeRule(Protocol):
    """The contract every discharge rule follows.

    Called with the scope being built and the old op. It emits the op's pure form through
    ``scope.emit`` / ``scope.emit_typed`` / ``scope.emit_op``, looks up the new values of its
    operands with ``scope.value`` (``scope.handles`` for discharged refs), reads and writes
    discharged refs through ``views.Access`` (which updates their roots), and returns one entry
    per result of the old op: its new ``Value``, or a ``Handle`` for a view of a discharged ref.
    """

    def __call__(self, scope: DischargeScope, op: Op) -> Sequence[Value | Handle]: ...


class DischargeRules(RuleTable[DischargeRule]):
    """The discharge rules by op name, and which of them run for every op of their name.

    A rule runs for an op that uses a discharged ref; one registered with ``always=True`` runs
    for every op of its name (``run_scoped`` allocates a ref to discharge; a region op's body
    or a callee may hold such allocations). An op whose rule did not run is copied unchanged
    (e.g. a ``get`` on a ref that is not discharged).
    """

    def __init__(self) -> None:
        super().__init__("discharge rule")
        self.always: set[str] = set()

    def register(
        self, *names: str, always: bool = False
    ) -> Callable[[DischargeRule], DischargeRule]:
        add = super().register(*names)
        if always:
            self.always.update(names)
        return add


RULES = DischargeRules()
rule = RULES.register
# a kernel over a mesh: its rule lives with the kernel programs it becomes
# (``minipallas.kernels.collective.mesh``); until that registers it, meeting one is an error
RULES.always.add("mesh_call")


ScopedPredicate = Callable[[RefType], bool]


class Context:
    """What one ``discharge`` call shares across all blocks: effects, callees, options."""

    def __init__(self, discharge_scoped: ScopedPredicate) -> None:
        self.effects = EffectsAnalysis()
        self.discharge_scoped = discharge_scoped
        self.collectives = "reject"  # discharge(..., collectives=): how a mesh_call's cores run
        self._callees: dict[tuple[int, tuple[bool, ...]], tuple[Function, Function]] = {}
        # id(indexer) -> (it, a number shared by equal indexers, attrs naming it): ``window``
        self.windows: dict[int, tuple[tuple, int, Mapping[str, Any]]] = {}
        self._numbers: dict[tuple, int] = {}
        self._active: set[tuple[int, tuple[bool, ...]]] = set()

    def window(self, indexer: tuple) -> tuple[tuple, int, Mapping[str, Any]]:
        """For a windowed read or write through ``indexer``: ``indexer``, a number that is the
        same for equal indexers (a cheap cache key: hashing an indexer hashes each entry), and
        one read-only ``{"indexer": indexer}`` for all the ops it emits.

        Kept in ``windows`` by the indexer's id, holding the indexer so its id is not reused
        while this context lives (a hot caller may look there first, checking that the entry
        holds its indexer). Pass ``facts(indexer).canonical``, which equal indexers share, so
        that lookup seldom misses.
        """
        found = self.windows.get(id(indexer))
        if found is None or found[0] is not indexer:
            number = self._numbers.setdefault(indexer, len(self._numbers))
            attrs = MappingProxyType({"indexer": indexer})
            found = self.windows[id(indexer)] = (indexer, number, attrs)
        return found

    def function(self, fn: Function, mask: Sequence[bool], name: str | None = None) -> Function:
        """``fn`` discharged: each param whose ``mask`` entry is true (and is a ref) becomes an
        array, and its final value is appended to the results in parameter order."""
        scope = DischargeScope(self)
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
        try:
            scope.run(fn.body.ops)
        except MiniPallasError as e:
            show_ir(e, fn)
            raise
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


class DischargeScope:
    """One block under construction: the environment and the new ops emitted so far."""

    __slots__ = ("ctx", "env", "handles", "_builder", "ops")

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.env: dict[Value, Value] = {}
        self.handles: dict[Value, Handle] = {}
        self._builder = Builder(error=PassError)
        self.ops: list[Op] = self._builder.ops  # the new ops emitted so far, in order

    def child(self) -> DischargeScope:
        """A fresh scope for a region of an op emitted here."""
        return DischargeScope(self.ctx)

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
        self.ops.append(
            Op.of_parts(name, tuple(operands), (value,), MappingProxyType(attrs), (), loc)
        )
        return value

    # -- interpreting ------------------------------------------------------------------------

    def run(self, ops: Sequence[Op]) -> None:
        """Discharges ``ops`` into this scope, in order.

        The hot loop, kept inline: an op that uses a discharged ref, or whose rule always runs
        (region ops, ``call``), runs its rule and its results are bound to what the rule
        returns; any other op is copied with its operands renamed. An error learns the op it
        came from (``excerpt.at_op``); ``Context.function`` shows it in the IR.
        """
        env = self.env
        handles = self.handles
        lookup = env.__getitem__
        discharged = handles.keys()
        emitted = self.ops
        rules = RULES
        always = RULES.always
        try:
            for op in ops:
                if not discharged.isdisjoint(op.operands) or op.name in always:
                    rule = rules.get(op.name)
                    if rule is None:
                        self._no_rule(op)
                    olds = op.results
                    news = rule(self, op)
                    if len(news) != len(olds):
                        raise PassError(
                            f"discharge rule returned {len(news)} values for {len(olds)} results",
                            op=op.name,
                            loc=op.loc,
                        )
                    for old, new in zip(olds, news, strict=False):  # lengths checked above
                        if type(new) is Handle:
                            handles[old] = new
                        else:
                            env[old] = new
                    continue
                if op.regions and op.name not in rules:
                    self._no_rule(op)
                try:
                    operands = tuple(map(lookup, op.operands))
                except KeyError:  # an undefined value: ``value`` raises the located error
                    for v in op.operands:
                        self.value(v)
                    raise
                copy = op.renamed(operands)
                emitted.append(copy)
                olds = op.results
                if len(olds) == 1:
                    env[olds[0]] = copy.results[0]
                else:
                    env.update(zip(olds, copy.results, strict=True))
        except MiniPallasError as e:
            at_op(e, op)  # the innermost block is first: its op is the one that failed
            raise

    def _no_rule(self, op: Op) -> NoReturn:
        """The error for an op that uses a discharged ref or has regions but has no rule."""
        fix = (
            "import minipallas.kernels, whose collective.mesh registers it"
            if op.name == "mesh_call"
            else "register one with minipallas.passes.discharge.rule"
        )
        raise PassError(f"no discharge rule for op '{op.name}'", op=op.name, loc=op.loc, fix=fix)

    def inline(self, block: Block, args: Sequence[Value]) -> list[Value]:
        """Runs ``block``'s ops right here, its params bound to old values ``args`` bound in
        this scope; returns the new values of its yields."""
        for param, arg in zip(block.params, args, strict=True):
            self.alias(param, arg)
        self.run(block.ops)
        return [self.value(r) for r in block.results]


def written(effects: frozenset) -> set[int]:
    """Positions an effect set writes or accumulates into."""
    return {e.input for e in effects if e.kind is not READ}
