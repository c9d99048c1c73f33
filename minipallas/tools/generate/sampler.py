"""The sampler: draws a random, well-typed stateful ``Program`` one statement at a time.

Algorithm:
1. Draw the parameters: one to four refs of random shapes and dtypes (0-d included) and a few
   arrays (often integer scalars, which then serve as dynamic indices).
2. Draw statements into the top-level body until the statement budget (hypothesis) or the op
   target (benchmarks) is reached. Each statement comes from a weighted menu, simplest first:
   array computation, ``get``, ``swap``, ``addupdate``, masked ``load``/``store``, a view, and
   the region statements ``run_scoped``, ``for``, ``while``, ``cond`` and ``call``, which draw
   their bodies the same way, one level deeper, up to ``Config.max_depth``.
3. Yield a few arrays as the program's results.

Values come from *pools*: every array a statement defines is filed under its type in its
scope, and a statement that needs an operand of type ``T`` either reuses a visible variable of
that type (inner or outer scope: outer ones become captures in the IR) or makes a fresh one
(a constant, or a small expression). Picks look only at the most recent few candidates, so
drawing a statement costs the same at op 100 000 as at op 10: the sampler is linear.

Every statement's result types come from the op's own type rule (``infer_result_types``), so
a program that samples is well typed by construction. What keeps results bit-reproducible:
float sums and products of matrices are never drawn (order-dependent); floats are never
converted to integers (undefined for NaN); masked-off lanes of a load without ``other`` are
always replaced through a ``select`` with the same mask; integer-array writes use distinct
in-range positions (duplicates only for integer ``addupdate``, where order cannot matter).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.builder import infer_result_types
from minipallas.ir.conversions import to_dtype
from minipallas.ir.literal import Literal
from minipallas.ir.types import ArrayType, RefType, Type
from minipallas.tools.generate import regions, state
from minipallas.tools.generate.choices import Choices
from minipallas.tools.generate.program import Body, Program, Stmt, Var
from minipallas.tools.generate.scope import (
    BITCAST_PARTNERS,
    SampleScope,
    factor_shape,
    permutation,
)

ALL_DTYPES = dtypes.NAMES


@dataclass(frozen=True)
class Config:
    """What the generator may draw. Switch a feature off to isolate a bug or suit a back end."""

    dtypes: tuple[str, ...] = ALL_DTYPES
    max_stmts: int = 10  # statements drawn into the top-level body; nested bodies get half
    max_depth: int = 3  # how deeply regions (run_scoped, loops, cond, call) nest
    max_rank: int = 3
    max_dim: int = 4
    view_kinds: tuple[str, ...] = ("at", "reshape", "bitcast", "transpose")
    max_view_chain: int = 3  # views of views of ... of a root ref, at most this deep
    array_indexers: bool = True
    masked: bool = True
    scoped: bool = True
    loops: bool = True
    conds: bool = True
    calls: bool = True
    memory_spaces: tuple[str, ...] = ("any", "tpu.vmem", "tpu.smem", "gpu.smem")
    read_uninitialized: bool = True  # scratch may be read before anything is written to it
    transcendental: bool = True  # exp and tanh on floats
    # pass-directed generation (``python -m minipallas.tools.fuzz.programs --target-pass``):
    # ops drawn more often, and numbers splat into constants more often, than the plain menus
    favour_ops: tuple[str, ...] = ()
    favour_numbers: tuple[float, ...] = ()


RECENT = 8  # picks look at this many most recent candidates of a scope


class Sampler:
    """Draws one ``Program`` from a ``Choices`` source under a ``Config``."""

    def __init__(self, choices: Choices, config: Config | None = None) -> None:
        self.c = choices
        self.cfg = config or Config()
        self._ids = itertools.count()
        self.root: dict[Var, Var] = {}  # ref variable -> the parameter or allocation it views
        self.chain_length: dict[Var, int] = {}  # view -> how many views it is from its root
        self.ops = 0
        self.callees: list[Program] = []  # drawn callees, which a later call may call again
        self.liked: dict[SampleScope, list[Var]] = {}  # results of favoured ops, by scope

    # -- programs and bodies -------------------------------------------------------------

    def program(self, n_ops: int | None = None, name: str = "generated") -> Program:
        """Draws a program; ``n_ops`` asks for about that many ops instead of a small budget."""
        body = Body()
        scope = SampleScope(None, body)
        refs = [self.ref_param(scope) for _ in range(self.c.integer(1, 4))]
        arrays = [self.array_param(scope) for _ in range(self.c.integer(0, 3))]
        body.params = (*refs, *arrays)
        if self.cfg.favour_ops:  # pass-directed: a favoured op on the inputs, as they come
            favoured_update(self, scope)
        if n_ops is None:
            self.fill(scope, self.c.integer(min(2, self.cfg.max_stmts), self.cfg.max_stmts))
        else:
            while self.ops < n_ops:
                self.statement(scope)
        if self.cfg.favour_ops:  # and last, so that nothing after it hides what it computes
            favoured_update(self, scope)
        results = self.some_arrays(scope, self.c.integer(0, 3))
        liked = self.liked.get(scope, [])
        if liked:  # pass-directed: the favoured ops' results live, so cleanup keeps them
            results += [self.recent(liked) for _ in range(self.c.integer(1, 2))]  # type: ignore[misc]
        body.results = tuple(results)
        return Program(name, body)

    def ref_param(self, scope: SampleScope) -> Var:
        space = "any" if self.c.chance(0.7) else self.c.pick(self.cfg.memory_spaces)
        return self.new_root(scope, RefType(self.shape(), self.dtype(), space))

    def array_param(self, scope: SampleScope) -> Var:
        t = ArrayType((), "int32") if self.c.chance(0.6) else ArrayType(self.shape(), self.dtype())
        v = self.var(t)
        scope.add(v)
        return v

    def new_root(self, scope: SampleScope, t: RefType) -> Var:
        v = self.var(t)
        self.root[v] = v
        scope.refs.append(v)
        scope.roots.append(v)
        return v

    def fill(self, scope: SampleScope, n: int) -> None:
        for _ in range(n):
            self.statement(scope)

    def nested_count(self) -> int:
        return self.c.integer(0, self.cfg.max_stmts // 2 + 1)

    def statement(self, scope: SampleScope) -> None:
        cfg, deep = self.cfg, scope.depth < self.cfg.max_depth
        menu: list[tuple[int, Callable[[Sampler, SampleScope], None]]] = [
            (6, compute),
            (8, state.get),
            (6, state.swap),
            (4, state.addupdate),
            (3 * cfg.masked, state.load),
            (3 * cfg.masked, state.store),
            (4 * bool(cfg.view_kinds), state.view),
            (2 * (cfg.scoped and deep), regions.run_scoped),
            (2 * (cfg.loops and deep), regions.for_loop),
            (1 * (cfg.loops and deep), regions.while_loop),
            (2 * (cfg.conds and deep), regions.cond),
            (1 * (cfg.calls and deep), regions.call),
            (12 * bool(cfg.favour_ops), favoured_update),
        ]
        self.c.weighted([(w, f) for w, f in menu if w])(self, scope)

    # -- variables and statements --------------------------------------------------------

    def var(self, t: Type) -> Var:
        return Var(t, next(self._ids))

    def emit(
        self,
        scope: SampleScope,
        op: str,
        args: Sequence[Var],
        attrs: dict | None = None,
        *,
        out_types: Sequence[Type] | None = None,
        bodies: tuple[Body, ...] = (),
        pool: bool = True,
    ) -> tuple[Var, ...]:
        """Appends a statement; plain ops get their result types from the op's type rule."""
        attrs = attrs or {}
        if out_types is None:
            out_types = infer_result_types(op, [a.type for a in args], attrs, ())
        outs = tuple(self.var(t) for t in out_types)
        scope.body.stmts.append(Stmt(op, tuple(args), attrs, outs, bodies))
        self.ops += 1
        if pool:
            for v in outs:
                scope.add(v)
        if op in self.cfg.favour_ops and op != "constant":
            self.liked.setdefault(scope, []).extend(outs)
        return outs

    def emit1(
        self, scope: SampleScope, op: str, args: Sequence[Var], attrs: dict | None = None
    ) -> Var:
        (out,) = self.emit(scope, op, args, attrs)
        return out

    # -- picking what is visible ---------------------------------------------------------

    def recent(self, items: list) -> object:
        return items[-1 - self.c.integer(0, min(len(items), RECENT) - 1)]

    def find(self, scope: SampleScope, t: Type) -> Var | None:
        """A visible array variable of type ``t``, or None."""
        lists = [lst for s in scope.chain() if (lst := s.arrays.get(t))]
        return self.recent(self.c.pick(lists)) if lists else None  # type: ignore[return-value]

    def any_array(self, scope: SampleScope) -> Var | None:
        lists = [s.all_arrays for s in scope.chain() if s.all_arrays]
        return self.recent(self.c.pick(lists)) if lists else None  # type: ignore[return-value]

    def some_arrays(self, scope: SampleScope, n: int) -> list[Var]:
        found = (self.any_array(scope) for _ in range(n))
        return [v for v in found if v is not None]

    def writable(self, scope: SampleScope, ref: Var) -> bool:
        return None not in scope.readonly and self.root[ref] not in scope.readonly

    def pick_ref(
        self, scope: SampleScope, write: bool = False, ok: Callable[[Var], bool] | None = None
    ) -> Var | None:
        """A visible ref (a writable one when ``write``), tried a few times; None if none fit."""
        if write and None in scope.readonly:
            return None
        lists = [s.refs for s in scope.chain() if s.refs]
        for _ in range(4):
            ref: Var = self.recent(self.c.pick(lists))  # type: ignore[assignment]
            if (not write or self.writable(scope, ref)) and (ok is None or ok(ref)):
                return ref
        return None

    def region_readonly(self, scope: SampleScope) -> frozenset[Var]:
        """For a loop or branch body: the enclosing read-only roots plus a random few more."""
        roots = [r for s in scope.chain() for r in s.roots]
        return scope.readonly | frozenset(self.c.subset(roots, 0.3))

    # -- types -----------------------------------------------------------------------------

    def dtype(self) -> str:
        return self.c.pick(self.cfg.dtypes)

    def shape(self) -> tuple[int, ...]:
        rank = self.c.integer(0, self.cfg.max_rank)
        return tuple(
            0 if self.c.chance(0.02) else self.c.integer(1, self.cfg.max_dim) for _ in range(rank)
        )

    # -- values ------------------------------------------------------------------------------

    def obtain(self, scope: SampleScope, t: ArrayType, depth: int = 0) -> Var:
        """A variable of type ``t``: reused from a visible pool, a constant, or an expression."""
        how = self.c.weighted([(6, "reuse"), (2, "constant"), (3 * (depth < 2), "derive")])
        if how == "reuse":
            found = self.find(scope, t) or self.adapt(scope, t)
            if found is not None:
                return found
        if how == "derive":
            return derive(self, scope, t, depth + 1)
        return self.constant(scope, t)

    def adapt(self, scope: SampleScope, t: ArrayType) -> Var | None:
        """A visible value of ``t``'s shape converted to ``t``'s dtype, or None if none is."""
        for dtype in self.cfg.dtypes:
            if dtype != t.dtype and convertible(dtype, t.dtype):
                found = self.find(scope, ArrayType(t.shape, dtype))
                if found is not None:
                    return self.emit1(scope, "convert", (found,), {"dtype": t.dtype})
        return None

    def constant(self, scope: SampleScope, t: ArrayType) -> Var:
        favoured = _fitting(self.cfg.favour_numbers, t.dtype)
        if favoured and not self.c.chance(0.5):  # shrinks to the favoured number
            value = np.full(t.shape, self.c.pick(favoured))
        elif t.size <= 1 or self.c.chance(0.6):
            value = np.full(t.shape, self.c.pick(_SPLATS[_kind(t.dtype)]))
        else:
            value = random_values(np.random.default_rng(self.c.integer(0, 1 << 16)), t)
        return self.emit1(scope, "constant", (), {"value": Literal.of(value, t.dtype)})

    def index_constant(self, scope: SampleScope, value: np.ndarray, dtype: str = "int32") -> Var:
        return self.emit1(scope, "constant", (), {"value": Literal.of(value, dtype)})


def _fitting(numbers: Sequence[float], dtype: str) -> list[float]:
    """The favoured numbers a constant of ``dtype`` can hold exactly."""
    if dtype == "bool" or not numbers:
        return []
    if dtypes.is_float(dtype):
        return list(numbers)
    info = np.iinfo(dtypes.to_numpy(dtype))
    return [n for n in numbers if n == int(n) and info.min <= n <= info.max]


def _favoured(s: Sampler, ops: Sequence[str]) -> str:
    """One of ``ops``, a favoured one (``Config.favour_ops``) most of the time."""
    liked = [op for op in ops if op in s.cfg.favour_ops]
    return s.c.pick(liked) if liked and not s.c.chance(0.2) else s.c.pick(ops)


def _kind(dtype: str) -> str:
    if dtypes.is_float(dtype):
        return "float"
    return dtype


_SPLATS = {
    "float": (0.0, 1.0, -1.0, 0.5, 2.0, -0.0, 3.25, -7.5, float("nan"), float("inf")),
    "int32": (0, 1, -1, 2, 3, -5, 7, 1 << 30, -(1 << 31)),
    "int16": (0, 1, -1, 2, 3, -5, 7, 1 << 14, -(1 << 15)),
    "int8": (0, 1, -1, 2, 3, -5, 127, -128),
    "uint32": (0, 1, 2, 3, 7, 1 << 31, (1 << 32) - 1),
    "uint16": (0, 1, 2, 3, 7, 1 << 15, (1 << 16) - 1),
    "uint8": (0, 1, 2, 3, 7, 128, 255),
    "bool": (False, True),
}


def random_values(rng: np.random.Generator, t: ArrayType) -> np.ndarray:
    """Random contents of type ``t``, with a sprinkle of edge values for floats."""
    np_dtype = dtypes.to_numpy(t.dtype)
    if t.dtype == "bool":
        return rng.random(t.shape) < 0.5
    if dtypes.is_float(t.dtype):
        x = np.round(rng.standard_normal(t.shape) * 4, 2)
        specials = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0])
        x = np.where(rng.random(t.shape) < 0.05, rng.choice(specials, t.shape), x)
        return to_dtype(x, t.dtype)
    info = np.iinfo(np_dtype)
    if rng.random() < 0.2:
        return rng.integers(info.min, info.max, t.shape, endpoint=True, dtype=np_dtype)
    return rng.integers(max(info.min, -6), 14, t.shape, dtype=np.int64).astype(np_dtype)


# -- array computation ------------------------------------------------------------------------

BINARY = {
    "float": ("add", "sub", "mul", "div", "max", "min"),
    "int": ("add", "sub", "mul", "max", "min", "and", "or", "xor"),
    "bool": ("and", "or", "xor", "max", "min"),
}
UNARY = {"float": ("neg", "abs"), "int": ("neg", "abs", "not"), "bool": ("not",)}
COMPARE = ("eq", "ne", "lt", "le", "gt", "ge")


def _family(dtype: str) -> str:
    return "float" if dtypes.is_float(dtype) else ("bool" if dtype == "bool" else "int")


def derive(s: Sampler, scope: SampleScope, t: ArrayType, depth: int) -> Var:
    """A small expression of type ``t`` over visible values."""
    fam = _family(t.dtype)
    menu = [(3, "binary"), (2, "unary"), (2, "convert"), (1, "select"), (1, "broadcast")]
    if fam != "bool" and t.ndim:
        menu.append((1, "iota"))
    if fam == "bool":
        menu.append((4, "compare"))
    unary = (*UNARY[fam], *(("exp", "tanh") if fam == "float" and s.cfg.transcendental else ()))
    liked = s.cfg.favour_ops and any(op in s.cfg.favour_ops for op in (*BINARY[fam], *unary))
    how = "binary" if liked and not s.c.chance(0.3) else s.c.weighted(menu)
    if how == "binary":
        op = _favoured(s, BINARY[fam]) if liked else s.c.pick(BINARY[fam])
        x = s.obtain(scope, t, depth)
        if op in s.cfg.favour_ops and s.cfg.favour_numbers and not s.c.chance(0.5):
            return s.emit1(scope, op, (x, s.constant(scope, t)))  # x op a favoured number
        return s.emit1(scope, op, (x, s.obtain(scope, t, depth)))
    if how == "unary":
        op = _favoured(s, unary) if liked else s.c.pick(unary)
        return s.emit1(scope, op, (s.obtain(scope, t, depth),))
    if how == "compare":
        src = ArrayType(t.shape, s.c.pick([d for d in s.cfg.dtypes if d != "bool"] or ["int32"]))
        op = s.c.pick(COMPARE)
        return s.emit1(scope, op, (s.obtain(scope, src, depth), s.obtain(scope, src, depth)))
    if how == "select":
        pred = s.obtain(scope, ArrayType(t.shape, "bool"), depth)
        return s.emit1(
            scope, "select", (pred, s.obtain(scope, t, depth), s.obtain(scope, t, depth))
        )
    if how == "broadcast":
        x = s.obtain(scope, ArrayType((), t.dtype), depth)
        return s.emit1(scope, "broadcast_in_dim", (x,), {"shape": t.shape, "dims": ()})
    if how == "iota":
        return s.emit1(scope, "iota", (), {"type": t, "dimension": s.c.integer(0, t.ndim - 1)})
    sources = [d for d in s.cfg.dtypes if d != t.dtype and convertible(d, t.dtype)]
    if not sources:
        return s.constant(scope, t)
    x = s.obtain(scope, ArrayType(t.shape, s.c.pick(sources)), depth)
    return s.emit1(scope, "convert", (x,), {"dtype": t.dtype})


def convertible(src: str, dst: str) -> bool:
    """Conversions with one defined result on every input (no float -> integer)."""
    return not (dtypes.is_float(src) and dtypes.is_int(dst))


def compute(s: Sampler, scope: SampleScope) -> None:
    """One array statement reshaping, reducing, converting or combining a visible value."""
    x = s.any_array(scope)
    if x is None:
        s.constant(scope, ArrayType(s.shape(), s.dtype()))
        return
    t: ArrayType = x.type  # type: ignore[assignment]
    if s.cfg.favour_ops and not s.c.chance(0.4):
        derive(s, scope, t, 1)  # pass-directed: the menus that hold the favoured ops
        return
    how = s.c.pick(("elementwise", "convert", "bitcast", "reshape", "transpose", "reduce", "dot"))
    if how == "convert":
        targets = [d for d in s.cfg.dtypes if convertible(t.dtype, d)]
        s.emit1(scope, "convert", (x,), {"dtype": s.c.pick(targets)})
    elif how == "bitcast" and t.dtype in BITCAST_PARTNERS:
        s.emit1(scope, "bitcast", (x,), {"dtype": s.c.pick(BITCAST_PARTNERS[t.dtype])})
    elif how == "reshape":
        s.emit1(scope, "reshape", (x,), {"shape": factor_shape(s.c, t.size, t.shape)})
    elif how == "transpose" and t.ndim >= 2:
        perm = tuple(permutation(s.c, t.ndim))
        s.emit1(scope, "transpose", (x,), {"permutation": perm})
    elif how == "reduce" and t.ndim >= 1:
        ops = ["reduce_max", "reduce_min"] + (["reduce_sum"] * dtypes.is_int(t.dtype))
        axes = tuple(a for a in range(t.ndim) if s.c.chance(0.5))
        s.emit1(scope, s.c.pick(ops), (x,), {"axes": axes})
    elif how == "dot" and t.ndim == 2 and t.dtype == "int32":
        y = s.obtain(scope, ArrayType((t.shape[1], s.c.integer(1, s.cfg.max_dim)), "int32"))
        s.emit1(scope, "dot", (x, y), {"dtype": "int32"})
    else:
        derive(s, scope, t, 1)


def favoured_update(s: Sampler, scope: SampleScope) -> None:
    """Pass-directed (``Config.favour_ops``): ``r[idx] = op(r[idx], y)`` with a favoured op
    and often a favoured number as ``y``: the op reads a ref and its result is written back,
    so neither folding nor dead-code removal takes it away before the pass sees it."""

    def liked(dtype: str) -> list[str]:
        fam = _family(dtype)
        return [op for op in (*BINARY[fam], *UNARY[fam]) if op in s.cfg.favour_ops]

    found = state.access(s, scope, "set", lambda r: bool(liked(r.type.dtype)))
    if found is None:
        return
    ref, idx, dyn = found
    t = state.window(ref, idx, dyn)
    (x,) = s.emit(scope, "get", (ref, *dyn), {"indexer": idx})
    op = s.c.pick(liked(t.dtype))
    if op in UNARY[_family(t.dtype)]:
        value = s.emit1(scope, op, (x,))
    else:
        numbers = _fitting(s.cfg.favour_numbers, t.dtype)
        y = s.constant(scope, t) if numbers and not s.c.chance(0.3) else s.obtain(scope, t)
        value = s.emit1(scope, op, (x, y))
    s.emit(scope, "swap", (ref, *dyn, value), {"indexer": idx})
