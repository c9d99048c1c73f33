"""Random region statements: ``run_scoped``, ``for``, ``while``, ``cond`` and ``call``.

Each draws its body (or bodies) in a child scope, so the body may read and write anything
visible outside it: those uses become captured operands when the program is built as IR.
Loop and branch bodies are told a random few of the visible refs are read-only, so some refs
are written in a region and others only read there. A ``while`` always counts: its condition
is ``counter < bound`` (possibly and-ed with a value read from a ref), so it terminates.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from minipallas.ir import indexing
from minipallas.ir.types import ArrayType, RefType
from minipallas.tools.generate.program import Body, Program, Var
from minipallas.tools.generate.scope import NO_WRITES, SampleScope
from minipallas.tools.generate.state import indexer

if TYPE_CHECKING:  # the sampler's menu holds these statements: it imports this module
    from minipallas.tools.generate.sampler import Sampler

I32 = ArrayType((), "int32")
BOOL = ArrayType((), "bool")


def _yields(s: Sampler, inner: SampleScope, types: list[ArrayType]) -> tuple[Var, ...]:
    return tuple(s.obtain(inner, t) for t in types)


def _out_types(s: Sampler, scope: SampleScope, n: int) -> list[ArrayType]:
    return [v.type for v in s.some_arrays(scope, n)]  # type: ignore[misc]


def run_scoped(s: Sampler, scope: SampleScope) -> None:
    """Scratch refs for a body; usually written whole first, sometimes read uninitialized."""
    body = Body()
    inner = SampleScope(scope, body, scope.readonly)
    allocs = []
    for _ in range(s.c.integer(1, 2)):
        space = s.c.pick(s.cfg.memory_spaces)
        allocs.append(s.new_root(inner, RefType(s.shape(), s.dtype(), space)))
    body.params = tuple(allocs)
    for ref in allocs:
        if not s.cfg.read_uninitialized or s.c.chance(0.7):
            full = indexing.full(ref.type.shape)
            value = s.obtain(inner, ref.type.value_type)  # type: ignore[union-attr]
            s.emit(inner, "store", (ref, value), {"indexer": full, "masked": False})
    s.fill(inner, s.nested_count())
    body.results = tuple(s.some_arrays(inner, s.c.integer(0, 2)))
    out_types = [v.type for v in body.results]
    s.emit(scope, "run_scoped", (), {"collective_axes": ()}, out_types=out_types, bodies=(body,))


def for_loop(s: Sampler, scope: SampleScope) -> None:
    """``for i in range(lower, upper)`` with 0-2 carries; 0-3 trips (or none: upper < lower)."""
    lo = s.c.integer(-1, 2)
    hi = lo + s.c.integer(-1, 3)
    lower = s.index_constant(scope, np.array(lo))
    upper = s.index_constant(scope, np.array(hi))
    types = _out_types(s, scope, s.c.integer(0, 2))
    inits = [s.obtain(scope, t) for t in types]
    i, carries = s.var(I32), [s.var(t) for t in types]
    body = Body(params=(i, *carries))
    inner = SampleScope(scope, body, s.region_readonly(scope))
    for v in (i, *carries):
        inner.add(v)
    s.fill(inner, s.nested_count())
    body.results = _yields(s, inner, types)
    s.emit(scope, "for", (lower, upper, *inits), {}, out_types=types, bodies=(body,))


def while_loop(s: Sampler, scope: SampleScope) -> None:
    """A counted ``while``; the condition may also read a ref (which the body may write)."""
    start = s.index_constant(scope, np.array(s.c.integer(-1, 1)))
    types = _out_types(s, scope, s.c.integer(0, 1))
    inits = [s.obtain(scope, t) for t in types]
    # Bound: a constant made outside (captured by the condition) or inside it.
    outer_bound = s.c.chance(0.5)
    bound = s.index_constant(scope, np.array(s.c.integer(0, 3))) if outer_bound else None

    counter, extras = s.var(I32), [s.var(t) for t in types]
    cond_body = Body(params=(counter, *extras))
    cond = SampleScope(scope, cond_body, NO_WRITES)
    for v in extras:
        cond.add(v)
    if bound is None:
        bound = s.index_constant(cond, np.array(s.c.integer(0, 3)))
    keep_going = s.emit1(cond, "lt", (counter, bound))
    if s.c.chance(0.4):
        keep_going = s.emit1(cond, "and", (keep_going, _scalar_test(s, cond)))
    cond_body.results = (keep_going,)

    counter2, extras2 = s.var(I32), [s.var(t) for t in types]
    body = Body(params=(counter2, *extras2))
    inner = SampleScope(scope, body, s.region_readonly(scope))
    for v in (counter2, *extras2):
        inner.add(v)
    s.fill(inner, s.nested_count())
    one = s.index_constant(inner, np.array(1))
    body.results = (s.emit1(inner, "add", (counter2, one)), *_yields(s, inner, types))
    s.emit(scope, "while", (start, *inits), {}, out_types=[I32, *types], bodies=(cond_body, body))


def _scalar_test(s: Sampler, scope: SampleScope) -> Var:
    """A bool scalar read from a visible ref (any of its elements), or drawn from the pools."""
    ref = s.pick_ref(scope, ok=lambda r: 0 not in r.type.shape)
    if ref is None:
        return s.obtain(scope, BOOL)
    idx, dyn = indexer(s, scope, ref.type.shape, arrays=False)
    idx = tuple(e if isinstance(e, indexing.Int) else indexing.Int(0) for e in idx)
    dyn = [dyn[e.index.pos] for e in idx if isinstance(e.index, indexing.Dyn)]
    idx = _renumber(idx)
    x = s.emit1(scope, "get", (ref, *dyn), {"indexer": idx})
    if x.type.dtype == "bool":
        return x
    return s.emit1(scope, "gt", (x, s.constant(scope, x.type)))  # type: ignore[arg-type]


def _renumber(idx: tuple) -> tuple:
    """Dyn positions renumbered in order of appearance (after entries were dropped)."""
    out, k = [], 0
    for e in idx:
        if isinstance(e.index, indexing.Dyn):
            e, k = indexing.Int(indexing.Dyn(k)), k + 1
        out.append(e)
    return tuple(out)


def cond(s: Sampler, scope: SampleScope) -> None:
    """One to three branches on an index that may be out of range (it is clamped)."""
    n = s.c.integer(1, 3)
    if s.c.chance(0.3):
        pred = s.obtain(scope, BOOL)
        index = s.emit1(scope, "convert", (pred,), {"dtype": "int32"})
    else:
        index = s.index_constant(scope, np.array(s.c.integer(-1, n)))
    types = _out_types(s, scope, s.c.integer(0, 2))
    branches = []
    for _ in range(n):
        body = Body()
        inner = SampleScope(scope, body, s.region_readonly(scope))
        s.fill(inner, s.nested_count())
        body.results = _yields(s, inner, types)
        branches.append(body)
    s.emit(scope, "cond", (index,), {}, out_types=types, bodies=tuple(branches))


def call(s: Sampler, scope: SampleScope) -> None:
    """A call of a freshly drawn function (or again of an earlier one), passed refs with
    distinct roots and some arrays."""
    if s.callees and s.c.chance(0.3) and _call_again(s, scope, s.c.pick(s.callees)):
        return
    refs: list[Var] = []
    for _ in range(s.c.integer(1, 2)):
        ref = s.pick_ref(scope, ok=lambda r: all(s.root[r] is not s.root[q] for q in refs))
        if ref is not None:
            refs.append(ref)
    args = refs + s.some_arrays(scope, s.c.integer(0, 2))
    params = [s.var(a.type) for a in args]
    body = Body(params=tuple(params))
    readonly = frozenset(
        p for p, a in zip(params, args, strict=True) if a in refs and not s.writable(scope, a)
    )
    inner = SampleScope(None, body, readonly)
    inner.depth = scope.depth + 1
    for p in params:
        if isinstance(p.type, RefType):
            s.root[p] = p
            inner.refs.append(p)
            inner.roots.append(p)
        else:
            inner.add(p)
    s.fill(inner, s.nested_count())
    body.results = tuple(s.some_arrays(inner, s.c.integer(0, 2)))
    callee = Program(f"callee{len(s.callees) + 1}", body)
    s.callees.append(callee)
    out_types = [v.type for v in body.results]
    s.emit(scope, "call", args, {"callee": callee}, out_types=out_types)


def _call_again(s: Sampler, scope: SampleScope, callee: Program) -> bool:
    """Calls an earlier callee if visible refs of its parameter types (distinct roots, and
    writable unless the callee never writes them) can be found; arrays are obtained."""
    args: list[Var] = []
    for p in callee.params:
        if isinstance(p.type, RefType):
            ref = s.pick_ref(
                scope,
                ok=lambda r, t=p.type: (
                    r.type == t
                    and s.writable(scope, r)
                    and all(s.root[r] is not s.root[q] for q in args if q in s.root)
                ),
            )
            if ref is None:
                return False
            args.append(ref)
        else:
            args.append(s.obtain(scope, p.type))  # type: ignore[arg-type]
    out_types = [v.type for v in callee.body.results]
    s.emit(scope, "call", args, {"callee": callee}, out_types=out_types)
    return True
