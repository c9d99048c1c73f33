"""Widening: ``c`` steps of a grid axis run as one step over blocks ``c`` times bigger.

Fusing consecutive steps into sub-steps (``substeps``) keeps the old block size, so a matmul in
128-blocks still multiplies 128x128 tiles, however many a step runs. Along an axis whose steps
are independent rows of work (the row and column axes of a matmul), a step can instead run the
old body once over a window ``c`` blocks wide: one 512-row dot in place of four 128-row ones.
Each output element still sees the same ops in the same order (its row of a dot contracts the
same elements, an elementwise op does not look at other rows), so the bits are the old ones.

Algorithm:
1. Each operand's block must stay put along the axis or advance one block a step in one
   dimension (``index_maps.motion``); every output must advance (an output that stays put sums
   over the axis). The body must not ask for its position along the axis.
2. Find the widened dimension of every value and ref of the body (``_Widths``): the moving
   operands' dimension, carried through one rule per op (elementwise ops keep it, a dot keeps
   its lhs rows or rhs columns, a ``get`` of a whole dimension keeps it, a max or min must not
   reduce it, and, unless ``rows_alone``, a float sum or product must not see it at all:
   XLA:CPU orders a sum's terms by its operand's whole shape, where Mosaic sums each row of a
   block on its own, so on the TPU a row sum of a wider block keeps every row's bits).
   Scratch buffers and broadcasts take the dimension their uses ask of them. An op without
   a rule, or one that would mix rows (a reduction over the widened dimension, a non-scalar
   value without it beside one with it), leaves the axis alone.
3. A scratch buffer the body reads must be overwritten whole at the start of every run of a
   later axis (``pl.when(program_id(k) == 0)``): then no step reads what a step with another
   index along the widened axis wrote, and one copy per widened row keeps every row's
   sequence.
4. Build the body anew with the widened shapes (broadcast shapes and whole-dimension indexers
   scaled; the rest inferred), the window block specs (``index_maps.window_spec``), the scratch
   widened and the axis ``c`` times shorter.
"""

from __future__ import annotations

from minipallas.ir import dtypes, indexing
from minipallas.ir.builder import Builder, params
from minipallas.ir.core import Block, Function, Op, Value
from minipallas.ir.kernel_spec import Kernel
from minipallas.ir.opset.arrays import (
    ARITHMETIC,
    BITWISE,
    COMPARISONS,
    FLOAT_BINARY,
    SHIFTS,
    UNARY,
)
from minipallas.ir.types import ArrayType, RefType, Type
from minipallas.passes.kernel.grid_fusion.index_maps import Motion, motion, rebuilt, window_spec

__all__ = ["widen_axis", "widths"]

ELEMENTWISE = frozenset(
    (*ARITHMETIC, *FLOAT_BINARY, *BITWISE, *SHIFTS, *COMPARISONS, *UNARY)
    + ("reciprocal", "convert", "select", "multiple_of", "optimization_barrier")
)
REDUCTIONS = ("reduce_sum", "reduce_max", "reduce_min", "reduce_prod")
WINDOWED = ("get", "swap", "addupdate")


class _Refused(Exception):
    """The body mixes rows of the widened dimension (or has an op without a rule): why."""


def widths(
    kernel: Kernel, axis: int, rows_alone: bool = False
) -> tuple[list[Motion], dict[Value, int | None]] | str:
    """Steps 1-3: how each operand moves along ``axis`` and the widened dimension of every
    value of the body (None: not widened); why not, in words, when the axis cannot be widened.
    ``rows_alone``: the compiler sums each row of a float reduction alone (Mosaic), so a sum
    may see the widened dimension as long as it does not reduce it."""
    moves = [motion(s, axis) for s in (*kernel.in_specs, *kernel.out_specs)]
    if None in moves:
        return "an index map it cannot follow (not one block a step in one dimension)"
    if any(m.dim is None for m in moves[kernel.num_inputs :]):
        return "an output block stays put along it (the steps add into it)"
    prefetch = len(kernel.scalar_prefetch)
    body = kernel.body
    fixed: dict[Value, int | None] = {p: None for p in body.params[:prefetch]}
    fixed.update(zip(body.params[prefetch:], (m.ref_dim for m in moves), strict=False))
    scratch = body.params[len(body.params) - len(kernel.scratch_types) :]
    try:
        found = _Widths(axis, fixed, rows_alone).run(body)
    except _Refused as refused:
        return str(refused)
    if any(_reads(body.body, r) and not _reset_each_run(body, r, axis) for r in scratch):
        return "a scratch buffer carries from one step to the next across it"
    return moves, found


def widen_axis(
    kernel: Kernel, axis: int, moves: list[Motion], found: dict[Value, int | None], factor: int
) -> Kernel:
    """Step 4: ``kernel`` with ``factor`` steps of ``axis`` as one over wider blocks."""
    specs = [
        window_spec(s, m, axis, factor)
        for s, m in zip((*kernel.in_specs, *kernel.out_specs), moves, strict=True)
    ]
    body = _Rebuild(found, factor).function(kernel.body)
    first = len(body.params) - len(kernel.scratch_types)
    scratch = tuple(p.type for p in body.params[first:])
    return rebuilt(kernel, body, axis, kernel.grid[axis] // factor, specs, scratch_types=scratch)


class _Widths:
    """Step 2: one forward walk per round; a use that asks an unknown ref or a broadcast for
    a dimension fixes it and starts a new round, until a round fixes nothing (a refusal in a
    round that fixed something is not final)."""

    def __init__(self, axis: int, fixed: dict[Value, int | None], rows_alone: bool) -> None:
        self.axis, self.fixed, self.rows_alone = axis, fixed, rows_alone

    def run(self, body: Function) -> dict[Value, int | None]:
        for _ in range(64):
            self.dims: dict[Value, int | None] = dict(self.fixed)
            self.origin: dict[Value, Value] = {}  # a region's ref parameter -> the ref passed
            self.free: dict[Value, Op] = {}  # broadcasts and gets a use may widen
            self.changed = False
            try:
                self._block(body.body)
            except _Refused:
                if not self.changed:  # else an op met a value not yet known: walk again
                    raise
            if not self.changed:
                return self.dims
        raise _Refused("the widened dimensions did not settle in 64 rounds")

    def _ask(self, value: Value, dim: int) -> None:
        """``value`` must be widened along ``dim``: fix the broadcast, or the scratch ref a
        ``get`` reads or a region's parameter stands for, for the next round."""
        if self.dims.get(value) == dim:
            return
        made = self.free.get(value)
        if made is not None and made.name == "get":
            value, dim = made.operands[0], _ref_of_window(made.attrs["indexer"], dim)
        elif made is None and not isinstance(value.type, RefType):
            raise _Refused(f"{value.type} would mix widened rows with others")
        while value in self.origin:
            value = self.origin[value]
        if value in self.fixed:
            if self.fixed[value] != dim:
                raise _Refused("a ref would widen along two dimensions")
            return
        self.fixed[value] = dim
        self.changed = True

    def _block(self, block: Block) -> None:
        for op in block.ops:
            got = [self.dims.get(v) for v in op.operands]
            out = self._rule(op, got)
            for r, d in zip(op.results, out, strict=True):
                self.dims[r] = self.fixed.get(r, d)

    def _rule(self, op: Op, got: list[int | None]) -> list[int | None]:
        name = op.name
        if name in ("program_id", "num_programs"):
            if op.attrs["axis"] == self.axis:
                raise _Refused(f"the body reads {name} of this axis")
            return [None]
        if name == "constant":
            return [None]
        if name in ELEMENTWISE:
            return [self._same(op.operands, got)]
        if name == "broadcast_in_dim":
            return [self._broadcast(op, got[0])]
        if name in REDUCTIONS:
            (d,) = got
            if d is not None and d in op.attrs["axes"]:
                raise _Refused(f"{name} reduces the widened dimension")
            if d is not None and not self.rows_alone and _sums_floats(op):
                raise _Refused(f"a float {name} sees the widened dimension (XLA sums by shape)")
            return [None if d is None else d - sum(a < d for a in op.attrs["axes"])]
        if name == "reshape":
            return [self._reshape(op, got[0])]
        if name == "transpose":
            (d,) = got
            return [None if d is None else tuple(op.attrs["permutation"]).index(d)]
        if name == "dot":
            return [self._dot(op, got)]
        if name in WINDOWED:
            return [self._windowed(op, got)]
        if name == "cond":
            return self._cond(op, got)
        raise _Refused(f"{name} has no widening rule")

    def _same(self, values: tuple[Value, ...], got: list[int | None]) -> int | None:
        wide = {d for v, d in zip(values, got, strict=True) if d is not None}
        if len(wide) > 1:
            raise _Refused("an op mixes values widened along different dimensions")
        if not wide:
            return None
        (d,) = wide
        for v, g in zip(values, got, strict=True):
            if g is None and v.type.shape != ():
                self._ask(v, d)
        return d

    def _broadcast(self, op: Op, d: int | None) -> int | None:
        if d is not None:
            return op.attrs["dims"][d]
        wide = self.fixed.get(op.result)
        if wide is None:
            self.free[op.result] = op
            return None
        dims, shape = tuple(op.attrs["dims"]), op.operands[0].type.shape
        if wide in dims and shape[dims.index(wide)] != 1:
            raise _Refused("a broadcast's operand already spans the widened dimension")
        return wide

    def _reshape(self, op: Op, d: int | None) -> int | None:
        """Only a reshape that adds or drops dimensions of size 1 (``keepdims``) keeps rows."""
        if d is None:
            return None
        old, new = op.operands[0].type.shape, tuple(op.attrs["shape"])
        kept = [i for i, n in enumerate(old) if n != 1]
        placed = [i for i, n in enumerate(new) if n != 1]
        if [old[i] for i in kept] != [new[i] for i in placed] or d not in kept:
            raise _Refused("a reshape regroups the widened dimension")
        return placed[kept.index(d)]

    def _dot(self, op: Op, got: list[int | None]) -> int | None:
        (lhs, rhs), rank = got, len(op.operands[0].type.shape)
        if lhs is not None and rhs is not None:
            raise _Refused("a dot's two operands are both widened")
        if (lhs is not None and lhs != rank - 2) or (rhs is not None and rhs != rank - 1):
            raise _Refused("a dot contracts the widened dimension")
        if lhs is not None:
            return rank - 2
        if rhs is not None:
            return rank - 1
        return None

    def _windowed(self, op: Op, got: list[int | None]) -> int | None:
        ref, r = op.operands[0], got[0]
        indexer = op.attrs["indexer"]
        if r is None:
            if op.name == "get":
                self.free[op.result] = op  # a use may ask the ref for its dimension
                return None
            if got[-1] is not None:
                self._ask(ref, _ref_of_window(indexer, got[-1]))
            return None
        entry = indexer[r]
        whole = isinstance(entry, indexing.Slice) and (entry.start, entry.stride) == (0, 1)
        if not whole or entry.size != ref.type.shape[r]:
            raise _Refused(f"a {op.name} takes part of the widened dimension")
        d = r - sum(isinstance(e, indexing.Int) for e in indexer[:r])
        if op.name != "get" and got[-1] != d:
            self._ask(op.operands[-1], d)
        return d

    def _cond(self, op: Op, got: list[int | None]) -> list[int | None]:
        if got[0] is not None:
            raise _Refused("a cond's predicate is widened")
        for region in op.regions:
            for p, v, d in zip(region.params, op.operands[1:], got[1:], strict=True):
                self.dims[p] = d
                self.origin[p] = v
            self._block(region)
        yielded = zip(*(region.results for region in op.regions), strict=True)
        return [self._same(vs, [self.dims.get(v) for v in vs]) for vs in yielded]


def _sums_floats(op: Op) -> bool:
    """A float sum or product: XLA:CPU orders its terms by the operand's whole shape (a row sum
    of 16 rows and one of 64 round apart), so a wider operand may change a row's bits."""
    return op.name in ("reduce_sum", "reduce_prod") and dtypes.is_float(op.operands[0].type.dtype)


def _ref_of_window(indexer: indexing.Indexer, dim: int) -> int:
    """The ref dimension behind dimension ``dim`` of the window ``indexer`` selects."""
    kept = [i for i, e in enumerate(indexer) if not isinstance(e, indexing.Int)]
    return kept[dim]


def _reads(block: Block, ref: Value) -> bool:
    """Whether ``block`` reads ``ref`` (inside a ``cond``: as the branch's parameter)."""
    for op in block.ops:
        if op.name == "get" and op.operands[0] is ref:
            return True
        for region in op.regions:
            pairs = zip(region.params, op.operands[1:], strict=False)
            if any(v is ref and _reads(region, p) for p, v in pairs):
                return True
    return False


def _reset_each_run(body: Function, ref: Value, axis: int) -> bool:
    """Step 3: the first op of the body that touches ``ref`` is ``cond(program_id(k) == 0)``
    with ``k`` after ``axis``, whose taken branch first overwrites the whole ref."""
    first = next((op for op in body.body.ops if ref in op.operands), None)
    if first is None or first.name != "cond" or len(first.regions) != 2:
        return False
    defs = {r: op for op in body.body.ops for r in op.results}
    k = _first_step_of(defs, first.operands[0])
    if k is None or k <= axis:
        return False
    taken = first.regions[1]
    inner = taken.params[first.operands[1:].index(ref)]
    uses = [op for op in taken.ops if inner in op.operands]
    if not uses or uses[0].name != "swap" or uses[0].operands[0] is not inner:
        return False
    return uses[0].attrs["indexer"] == indexing.full(inner.type.shape)


def _first_step_of(defs: dict[Value, Op], pred: Value) -> int | None:
    """``k`` when ``pred`` is ``convert(eq(program_id(k), 0))``."""
    conv = defs.get(pred)
    eq = defs.get(conv.operands[0]) if conv is not None and conv.name == "convert" else None
    if eq is None or eq.name != "eq":
        return None
    pid, zero = (defs.get(v) for v in eq.operands)
    if pid is None or zero is None or pid.name != "program_id" or zero.name != "constant":
        return None
    return pid.attrs["axis"] if int(zero.attrs["value"].array()) == 0 else None


class _Rebuild:
    """Step 4's body: every op again over the widened types."""

    def __init__(self, found: dict[Value, int | None], factor: int) -> None:
        self.found, self.factor = found, factor
        self.env: dict[Value, Value] = {}

    def function(self, fn: Function) -> Function:
        return Function(fn.name, self._block(fn.body))

    def _type(self, value: Value) -> Type:
        d, t = self.found.get(value), value.type
        if d is None:
            return t
        shape = tuple(n * self.factor if i == d else n for i, n in enumerate(t.shape))
        if isinstance(t, RefType):
            return RefType(shape, t.dtype, t.memory_space)
        return ArrayType(shape, t.dtype)

    def _block(self, block: Block) -> Block:
        fresh = params([self._type(p) for p in block.params])
        self.env.update(zip(block.params, fresh, strict=True))
        b = Builder()
        for op in block.ops:
            attrs = dict(op.attrs)
            if op.name in ("broadcast_in_dim", "reshape") and self.found.get(op.result) is not None:
                attrs["shape"] = self._type(op.result).shape
            r = self.found.get(op.operands[0]) if op.name in WINDOWED else None
            if r is not None:
                old = attrs["indexer"]
                wide = indexing.Slice(0, old[r].size * self.factor, 1)
                attrs["indexer"] = tuple(wide if i == r else e for i, e in enumerate(old))
            operands = [self.env.get(v, v) for v in op.operands]
            regions = [self._block(region) for region in op.regions]
            new = b.create(op.name, operands, attrs, regions, op.loc)
            self.env.update(zip(op.results, new.results, strict=True))
        return b.block(fresh, [self.env.get(v, v) for v in block.results])
