"""Where a sub-step is: its block of each window, and the old step index its body reads.

Sub-step ``s`` of fused step ``k`` is old step ``k * factor + s`` (``s`` a number when the
sub-steps are unrolled, a loop's index when they run in a loop). Its block of a window that
moves is the ``s``-th of ``factor`` (``view``); its body's ``program_id`` of the axis reads
``program_id * factor + s`` and ``num_programs`` the old size (``GridPosition``).
"""

from __future__ import annotations

from minipallas.ir import indexing
from minipallas.ir.builder import Builder, params
from minipallas.ir.core import Block, Function, Op, Value
from minipallas.ir.literal import Literal
from minipallas.ir.rewrite import Callees
from minipallas.passes.kernel.grid_fusion.index_maps import Motion


def view(b: Builder, ref: Value, move: Motion, factor: int, s: int | Value) -> Value:
    """Sub-step ``s``'s block of the window ``ref``: its ``s``-th of ``factor`` along the
    moving dimension (``s`` a number, or a loop's index); ``ref`` itself when the block stays
    put."""
    if move.dim is None:
        return ref
    shape = ref.type.shape
    block = shape[move.ref_dim] // factor
    if isinstance(s, int):
        start, dyn = s * block, []
    else:
        start, dyn = indexing.Dyn(0), [b.create("mul", [s, i32(b, block)]).result]
    indexer = indexing.along(shape, move.ref_dim, indexing.Slice(start, block, 1))
    return b.create("ref.at", [ref, *dyn], {"indexer": indexer}).result


class GridPosition:
    """Rewrites a body so it sees old step ``program_id(axis) * factor + offset`` of an axis
    ``size`` steps long. Functions that never ask are returned as they are. ``offset`` is a
    number, or a value of the block ``copy_into`` copies into (a loop's index, ``looped``)."""

    def __init__(self, axis: int, factor: int, offset: int | Value, size: int) -> None:
        self.axis, self.factor, self.offset, self.size = axis, factor, offset, size
        self.callees = Callees(self._function)

    def substitute(self, fn: Function) -> Function:
        return self.callees(fn)

    def _function(self, fn: Function) -> Function:
        if not self._asks(fn):
            return fn
        return Function(f"{fn.name}_substep{self.offset}", self._block(fn.body))

    def _asks(self, fn: Function) -> bool:
        return any(self._reads_axis(op) for f in (fn, *fn.callees()) for op in f.walk())

    def asks_below_top(self, fn: Function) -> bool:
        """Whether ``fn`` asks inside a region or a callee (not only in its own block)."""
        top = set(map(id, fn.body.ops))
        inside = (op for op in fn.walk() if id(op) not in top)
        below = (inside, *(f.walk() for f in fn.callees()))
        return any(self._reads_axis(op) for ops in below for op in ops)

    def _reads_axis(self, op: Op) -> bool:
        return op.name in ("program_id", "num_programs") and op.attrs["axis"] == self.axis

    def _block(self, block: Block) -> Block:
        fresh = params(block.param_types)
        b = Builder()
        results = self.copy_into(b, block, dict(zip(block.params, fresh, strict=True)))
        return b.block(fresh, results)

    def copy_into(self, b: Builder, block: Block, env: dict[Value, Value]) -> list[Value]:
        """``block``'s ops copied into ``b``, its parameters bound by ``env``; its results."""
        for op in block.ops:
            if self._reads_axis(op):
                env[op.result] = self._position(b, op)
                continue
            operands = tuple(env.get(v, v) for v in op.operands)
            regions = tuple(self._block(r) for r in op.regions)
            attrs = op.attrs
            if op.name == "call":
                attrs = {**attrs, "callee": self.callees(attrs["callee"])}
            new = Op(op.name, operands, tuple(Value(r.type) for r in op.results), attrs,
                     regions, op.loc)  # fmt: skip
            env.update(zip(op.results, new.results, strict=True))
            b.add(new)
        return [env.get(v, v) for v in block.results]

    def _position(self, b: Builder, op: Op) -> Value:
        if op.name == "num_programs":
            return i32(b, self.size, op)
        return old_index(b, self.axis, self.factor, self.offset, op)


def old_index(
    b: Builder, axis: int, factor: int, offset: int | Value, like: Op | None = None
) -> Value:
    """``program_id(axis) * factor + offset``: the old step index of a sub-step."""
    loc = {"loc": like.loc} if like is not None else {}
    fused = b.create("program_id", attrs={"axis": axis}, **loc).result
    scaled = b.create("mul", [fused, i32(b, factor, like)], **loc).result
    offset = i32(b, offset, like) if isinstance(offset, int) else offset
    return b.create("add", [scaled, offset], **loc).result


def i32(b: Builder, value: int, like: Op | None = None) -> Value:
    loc = {"loc": like.loc} if like is not None else {}
    return b.create("constant", attrs={"value": Literal.of(value, "int32")}, **loc).result
