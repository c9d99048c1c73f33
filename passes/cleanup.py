"""Cleanup: shrink a (discharged) program to what a careful person would have written.

Discharge is mechanical: every read becomes a ``slice`` of the ref's current value, every write a
``dynamic_update_slice``, every scoped ref starts as ``uninitialized``, and loops carry whatever
their body writes. Most of that is removed here, without changing what the program computes.

Algorithm (each step is linear in the program's size; the pair repeats while it removes ops,
unless the first pair already reached a fixed point, see ``cleanup``):
1. Simplify, forward, building a new program. For each op, take its operands after earlier
   replacements, then:
   a. inline a region whose op does nothing at run time: a ``run_scoped`` that allocates
      nothing (and has no collective axes), a ``cond`` whose index is a constant or that has one
      branch, a ``for`` that runs exactly once; a ``for`` that never runs gives its inits;
   b. fold it into a constant when its operands are constants (``fold``: by the interpreter's
      own rule), else try its rewrite patterns (``cleanup_patterns``: forwarding a written
      window to a read of it, dropping a write of what was read, a whole-window write, no-op
      reshapes ...; then ``cleanup_identities``: exact ``x + 0``, ``x * 1``, convert round
      trips ...), until none matches (at most ``MAX_WALK`` times); a pattern may replace the op
      by an existing value. Folding a ``cond``'s index removes its dead branches (step a).
      ``fold=False`` skips folding and the identities;
   c. reuse an identical earlier pure op in the same block (common subexpressions).
2. Prune, backward from each block's results: drop ops whose results are unused and that write
   or accumulate into no ref (``pure`` ops, and region ops and calls whose effects only read),
   unless they are or hold an ``observable`` op (``debug_print``).
   A region op whose results are partly used loses the unused ones: ``cond`` branches stop
   yielding them, loops drop carries that no live carry needs, and regions drop parameters
   (loop constants, ``cond`` arguments, ``run_scoped`` operands and allocations) they no longer
   use.
Callees are cleaned once each and keep their signatures. The input is never changed: the new
program shares only values and unchanged ops with it.

Removing a dead ``while`` assumes it terminates, as XLA's dead-code elimination does.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from minipallas.ir.core import Block, Function, Op, Value
from minipallas.ir.effects import EffectsAnalysis
from minipallas.ir.errors import PassError
from minipallas.ir.opdef import OPS, READ, OpDef
from minipallas.ir.rewrite import Callees
from minipallas.passes.cleanup_identities import IDENTITIES
from minipallas.passes.cleanup_patterns import MAX_WALK, PATTERNS, Pattern
from minipallas.passes.collector import collector_paused
from minipallas.passes.fold import fold as fold_constants
from minipallas.passes.registry import BOOL, Option, register

MAX_ROUNDS = 4


def _patterns(fold: bool) -> dict[str, list[Pattern]]:
    """The patterns to try, by op name, read when a cleanup starts: so a pattern registered
    with ``@pattern`` after this module was imported (a user's own) is tried too. Folding adds
    the algebraic identities after each op's patterns."""
    if not fold:
        return PATTERNS
    names = {*PATTERNS, *IDENTITIES}
    return {name: [*PATTERNS.get(name, ()), *IDENTITIES.get(name, ())] for name in names}


@register(
    "cleanup",
    Option("fold", BOOL, "false: no constant folding and no algebraic identities"),
    doc="remove dead and duplicate ops, fold constants and simplify",
)
def cleanup(fn: Function, *, fold: bool = True) -> Function:
    """A new function computing what ``fn`` computes, with fewer ops (see the module doc)."""
    size = None  # counted only when a round leaves work for the next
    with collector_paused():
        for _ in range(MAX_ROUNDS):
            simplify, prune = _Simplify(fold), _Prune()
            new = prune.function(simplify.function(fn))
            if simplify.settled and not prune.unlocked:
                return new
            size = count_ops(fn) if size is None else size
            new_size = count_ops(new)
            if new_size >= size:
                return new
            fn, size = new, new_size
    return fn


def count_ops(fn: Function) -> int:
    """Ops in ``fn``, its regions and (each once) the functions it calls."""
    return sum(1 for f in (fn, *fn.callees()) for _ in f.walk())


# --- step 1: simplify ----------------------------------------------------------------------


class _CleanupScope:
    """The ops of one block being built, with what CSE and the patterns need to look up."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.defs: dict[Value, Op] = {}
        self.seen: dict[Hashable, Op] = {}


class _Simplify:
    """Step 1. ``settled``: every op it emitted is one no pattern rewrites (no op used up its
    ``MAX_WALK`` rewrites). Then simplifying the pruned program again changes nothing: a kept
    op sees the same defining ops (its operands' definitions are kept too), and pruning only
    enables an inlining by dropping a ``run_scoped``'s allocations (``_Prune.unlocked``)."""

    def __init__(self, fold: bool) -> None:
        self.fold = fold
        self.patterns = _patterns(fold)
        self.env: dict[Value, Value] = {}  # old value -> the value that replaces it
        self.function = Callees(lambda fn: Function(fn.name, self.block(fn.body)))
        self.settled = True
        self.numbers: dict[tuple, int] = {}  # sorted attribute items -> their number
        self.attrs_numbers: dict[int, tuple[Mapping[str, Any], int | None]] = {}

    def block(self, block: Block) -> Block:
        scope = _CleanupScope()
        self.ops(block.ops, scope)
        return Block(block.params, scope.ops, self.values(block.results))

    def values(self, values: Sequence[Value]) -> tuple[Value, ...]:
        return tuple(map(self.env.get, values, values))  # env.get(v, v): v unless replaced

    def ops(self, ops: Sequence[Op], scope: _CleanupScope) -> None:
        replaced = self.env.get
        for op in ops:
            operands = tuple(map(replaced, op.operands, op.operands))  # ``values``, inline
            if op.regions:
                if self.inline(op, operands, scope):
                    continue
                changes = {"operands": operands, "regions": tuple(map(self.block, op.regions))}
                op = op.replace(**changes)
            elif op.name == "call":
                op = self.function.call(op, operands=operands)
            elif operands != op.operands:
                op = Op.of_parts(op.name, operands, op.results, op.attrs, (), op.loc)
            self.emit(op, scope)

    def emit(self, op: Op, scope: _CleanupScope) -> None:
        """Fold ``op`` or rewrite it by its patterns, reuse an equal op, or append it."""
        defs, patterns = scope.defs, self.patterns
        for _ in range(MAX_WALK):
            rewritten = fold_constants(op, defs) if self.fold and op.operands else None
            if rewritten is None:
                for rule in patterns.get(op.name, ()):  # the first pattern that matches
                    rewritten = rule(op, defs)
                    if rewritten is not None:
                        break
                else:  # none matches: ``op`` is final
                    break
            if isinstance(rewritten, Value):
                self.env[op.results[0]] = rewritten
                return
            op = rewritten
        else:
            self.settled = False
        key = self.cse_key(op)
        if key is not None:
            earlier = scope.seen.setdefault(key, op)
            if earlier is not op:
                for old, new in zip(op.results, earlier.results, strict=True):
                    self.env[old] = new
                return
        scope.ops.append(op)
        for r in op.results:
            defs[r] = op

    def cse_key(self, op: Op) -> Hashable | None:
        """What makes two pure, region-free ops interchangeable; None when ``op`` is not such
        or an attribute does not hash.

        Equal attributes get one number (``attrs_number``): a key then hashes in C, while
        hashing an indexer calls each entry's ``__hash__``.
        """
        if op.regions or not _opdef(op).pure:
            return None
        attrs = op.attrs
        if not attrs:
            return (op.name, op.operands)
        number = self.attrs_number(attrs)
        return None if number is None else (op.name, op.operands, number)

    def attrs_number(self, attrs: Mapping[str, Any]) -> int | None:
        """One number per distinct ``attrs`` content (None if it does not hash), kept by the
        mapping's identity: ops copied from one another share theirs."""
        found = self.attrs_numbers.get(id(attrs))
        if found is not None and found[0] is attrs:
            return found[1]
        items = tuple(sorted(attrs.items()))
        try:
            number = self.numbers.setdefault(items, len(self.numbers))
        except TypeError:  # an unhashable attribute: no reuse
            number = None
        self.attrs_numbers[id(attrs)] = (attrs, number)
        return number

    def inline(self, op: Op, operands: tuple[Value, ...], scope: _CleanupScope) -> bool:
        """Step 1a: emit the one region that runs, in place of ``op``; False if none applies."""
        if op.name == "run_scoped":
            (body,) = op.regions
            if len(body.params) != len(operands) or op.attrs.get("collective_axes"):
                return False
            return self.splice(op, body, operands, scope)
        where = op.slices()  # ``operands`` line up with the op's
        if op.name == "cond":
            (index,) = operands[where["index"]]
            index = _constant_int(index, scope)
            if index is None and len(op.regions) > 1:
                return False
            branch = op.regions[min(max(index or 0, 0), len(op.regions) - 1)]
            return self.splice(op, branch, operands[where["args"]], scope)
        if op.name == "for":
            (lower,), (upper,) = operands[where["lower"]], operands[where["upper"]]
            lower, upper = _constant_int(lower, scope), _constant_int(upper, scope)
            if lower is None or upper is None or upper - lower > 1:
                return False
            inits = operands[where["inits"]]
            if upper <= lower:
                for old, init in zip(op.results, inits, strict=True):
                    self.env[old] = init
                return True
            args = (*operands[where["lower"]], *operands[where["consts"]], *inits)  # one trip
            return self.splice(op, op.regions[0], args, scope)
        return False

    def splice(self, op: Op, region: Block, args: Sequence[Value], scope: _CleanupScope) -> bool:
        """Bind ``region``'s parameters to ``args``, emit its ops here, and take its yields."""
        for param, arg in zip(region.params, args, strict=True):
            self.env[param] = arg
        self.ops(region.ops, scope)
        for old, new in zip(op.results, self.values(region.results), strict=True):
            self.env[old] = new
        return True


def _opdef(op: Op) -> OpDef:
    opdef = OPS.get(op.name)
    if opdef is None:
        raise PassError(f"unknown op '{op.name}'", op=op.name, loc=op.loc)
    return opdef


def _constant_int(value: Value, scope: _CleanupScope) -> int | None:
    source = scope.defs.get(value)
    if source is None or source.name != "constant" or value.type.shape != ():
        return None
    return int(source.attrs["value"].array())


# --- step 2: prune -------------------------------------------------------------------------


class _Prune:
    """Step 2. ``unlocked``: some ``run_scoped`` lost allocations, so step 1 may now inline it."""

    def __init__(self) -> None:
        self.effects = EffectsAnalysis()
        self.function = Callees(self.prune)
        self.unlocked = False
        self.observed: dict[int, tuple[Block, bool]] = {}

    def prune(self, fn: Function) -> Function:
        body, _ = self.block(fn.body, [True] * len(fn.body.results))
        return Function(fn.name, body)

    def block(self, block: Block, keep: Sequence[bool]) -> tuple[Block, set[Value]]:
        """``block`` yielding only the results marked in ``keep``, and the values it uses."""
        results = tuple(r for r, k in zip(block.results, keep, strict=True) if k)
        used: set[Value] = set(results)
        kept: list[Op] = []
        for op in reversed(block.ops):
            if op.regions or op.name == "call":
                live = [r in used for r in op.results]
                if not any(live) and self.removable(op):
                    continue
                op = self.shrink(op, live)
            elif used.isdisjoint(op.results) and self.removable(op):
                continue
            kept.append(op)
            used.update(op.operands)
        return Block(block.params, kept[::-1], results), used

    def removable(self, op: Op) -> bool:
        """Unused, ``op`` can go if it changes no ref and prints nothing: only writes and prints
        are visible from outside."""
        if self.observable(op):
            return False
        if _opdef(op).pure:
            return True
        return all(e.kind is READ for e in self.effects.op(op))

    def observable(self, op: Op) -> bool:
        """Whether ``op`` is, or its regions or callee hold, an op acting outside the program."""
        if op.name == "call":
            return self.observable_block(op.attrs["callee"].body)
        return _opdef(op).observable or any(self.observable_block(r) for r in op.regions)

    def observable_block(self, block: Block) -> bool:
        cached = self.observed.get(id(block))
        if cached is None or cached[0] is not block:
            cached = (block, any(self.observable(op) for op in block.ops))
            self.observed[id(block)] = cached
        return cached[1]

    def shrink(self, op: Op, live: list[bool]) -> Op:
        """``op`` with its regions pruned and whatever they no longer use dropped."""
        if op.name == "call":
            return self.function.call(op)
        if op.name == "cond":
            return self.shrink_cond(op, live)
        if op.name == "run_scoped":
            return self.shrink_run_scoped(op, live)
        if op.name == "for":
            return self.shrink_for(op, live)
        if op.name == "while":
            return self.shrink_while(op, live)
        return op

    def shrink_cond(self, op: Op, live: list[bool]) -> Op:
        pruned = [self.block(branch, live) for branch in op.regions]
        args = op.group("args")  # each branch's parameters, one each
        needed = [any(b.params[k] in used for b, used in pruned) for k in range(len(args))]
        branches = tuple(_select_params(b, needed) for b, _ in pruned)
        return op.replace(
            operands=(*op.group("index"), *_select(args, needed)),
            results=_select(op.results, live),
            regions=branches,
        )

    def shrink_run_scoped(self, op: Op, live: list[bool]) -> Op:
        body, used = self.block(op.regions[0], live)
        needed = [p in used for p in body.params]
        where = op.param_slices()
        if not all(needed[where["allocs"]]):
            self.unlocked = True
        return op.replace(
            operands=_select(op.group("args"), needed[where["args"]]),
            results=_select(op.results, live),
            regions=(_select_params(body, needed),),
        )

    def shrink_for(self, op: Op, live: list[bool]) -> Op:
        """Keep the carries the results need and, to a fixed point, those kept carries need."""
        body, used, live = self.live_carries(op.regions[0], op.param_group("inits"), live)
        consts = [p in used for p in op.param_group("consts")]
        return op.replace(
            operands=(
                *op.group("lower"),
                *op.group("upper"),
                *_select(op.group("consts"), consts),
                *_select(op.group("inits"), live),
            ),
            results=_select(op.results, live),
            attrs={**op.attrs, "num_consts": sum(consts)},
            regions=(_select_params(body, [True, *consts, *live]),),  # the index, always
        )

    def shrink_while(self, op: Op, live: list[bool]) -> Op:
        cond_region, body_region = op.regions
        cond, cond_used = self.block(cond_region, [True])
        cond_carries = op.param_group("inits", region=0)
        live = [k or p in cond_used for p, k in zip(cond_carries, live, strict=True)]
        body, used, live = self.live_carries(body_region, op.param_group("inits", region=1), live)
        cond_consts = [p in cond_used for p in op.param_group("cond_consts", region=0)]
        body_consts = [p in used for p in op.param_group("body_consts", region=1)]
        operands = (
            *_select(op.group("cond_consts"), cond_consts),
            *_select(op.group("body_consts"), body_consts),
            *_select(op.group("inits"), live),
        )
        return op.replace(
            operands=operands,
            results=_select(op.results, live),
            attrs={**op.attrs, "cond_nconsts": sum(cond_consts), "body_nconsts": sum(body_consts)},
            regions=(
                _select_params(cond, [*cond_consts, *live]),
                _select_params(body, [*body_consts, *live]),
            ),
        )

    def live_carries(
        self, body: Block, carries: Sequence[Value], live: list[bool]
    ) -> tuple[Block, set[Value], list[bool]]:
        """Prune a loop body, growing ``live`` until no kept carry needs a dropped one."""
        while True:
            pruned, used = self.block(body, live)
            grown = [k or p in used for p, k in zip(carries, live, strict=True)]
            if grown == live:
                return pruned, used, live
            live = grown


def _select(values: Sequence[Value], keep: Sequence[bool]) -> tuple[Value, ...]:
    return tuple(v for v, k in zip(values, keep, strict=True) if k)


def _select_params(block: Block, keep: Sequence[bool]) -> Block:
    return Block(_select(block.params, keep), block.ops, block.results)
