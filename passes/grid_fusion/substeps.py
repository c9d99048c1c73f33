"""The body of a fused grid step: the old body run once per sub-step, in order.

Sub-step ``s`` of fused step ``k`` is old step ``k * factor + s``. It gets a view of each
operand's window (the ``s``-th block of a window that moves, the whole block of one that stays
put; scratch and scalar-prefetch refs as they are) and calls a copy of the old body in which
``program_id`` of the axis reads ``program_id * factor + s`` and ``num_programs`` the old size.
Each sub-step therefore runs exactly the ops the old step ran, on the same elements, in the
same order: the results are the old ones bit for bit. When ``factor`` does not divide the axis,
the sub-steps past its old end are skipped (a ``cond`` on the old step index).

Every function made here has a name of its own, so the fused kernel's text parses back as a
module: the old body a sub-step calls is ``@NAME_substep`` (``@NAME_substepS`` for sub-step
``S``'s copy when it asks for its grid position), and a callee copied for sub-step ``S`` is
``@CALLEE_substepS``; the fused body keeps the old body's name.
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir import indexing
from minipallas.ir.builder import Builder, params
from minipallas.ir.core import Block, Function, Op, Value
from minipallas.ir.literal import Literal
from minipallas.ir.rewrite import Callees
from minipallas.ir.types import Type
from minipallas.passes.grid_fusion.carried import Threading
from minipallas.passes.grid_fusion.index_maps import Motion


def fused_body(
    body: Function,
    param_types: Sequence[Type],
    moves: Sequence[Motion],
    axis: int,
    factor: int,
    size: int,
    threaded: Sequence[bool] = (),
) -> Function:
    """The body of a step that runs ``factor`` old steps of grid ``axis`` (``size`` steps
    long). ``param_types``: the new body's refs; ``moves``: how each one's block moves;
    ``threaded``: per ref, whether its value is threaded through the sub-steps (``carried``)."""
    b = Builder()
    refs = params(param_types)
    thread = Threading(threaded)
    values = thread.load(b, refs)
    same = Function(f"{body.name}_substep", body.body)  # the sub-steps that do not ask
    for s in range(factor):
        views = [view(b, ref, move, factor, s) for ref, move in zip(refs, moves, strict=True)]
        step = GridPosition(axis, factor, s, size).substitute(body)
        step = thread.step(same if step is body else step)
        args = thread.arguments(views, values)
        if size % factor and s >= size % factor:
            values = _call_while_in_grid(b, step, args, thread.positions, (axis, factor, s, size))
        else:
            values = b.create("call", args, {"callee": step}).results
    thread.store(b, refs, values)
    return b.function(body.name, refs, [])


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


def _call_while_in_grid(
    b: Builder, step: Function, args: list[Value], threaded: list[int], where: tuple
) -> tuple[Value, ...]:
    """``call step(args)`` when old step ``program_id * factor + s`` is before ``size``
    (``where``: axis, factor, s, size); the threaded arguments (positions ``threaded``) pass
    through unchanged when it is not."""
    axis, factor, s, size = where
    index = _old_index(b, axis, factor, s)
    end = i32(b, size)
    inside = b.create("convert", [b.create("lt", [index, end]).result], {"dtype": "int32"})
    skip, run = Builder(), Builder()
    skip_params, run_params = params([a.type for a in args]), params([a.type for a in args])
    ran = run.create("call", run_params, {"callee": step}).results
    regions = [
        skip.block(skip_params, [skip_params[k] for k in threaded]),
        run.block(run_params, ran),
    ]
    return b.create("cond", [inside.result, *args], {}, regions).results


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
        return _old_index(b, self.axis, self.factor, self.offset, op)


def _old_index(
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
