"""Sums across grid steps as vectors of partial sums: the ``optimize="fast"`` level's pass.

A kernel that sums a long array a block a step, ``o_ref[...] += x_ref[...].sum()``, reduces
each block to one scalar before adding it in: a cross-lane reduction per step, and a chain of
scalar adds through the output's VMEM, which no fusion of steps can shorten without changing
the order of the float additions (``fuse-grid-steps`` keeps upstream's bits). Summing the
blocks elementwise into a block-shaped accumulator and reducing it once, at the last step,
computes the same sum in another order: the bits change, within the order bound of one sum of
all the terms (``minipallas/difftest/reorder.py``), so this pass runs only at the opt-in level
``optimize="fast"``, never by default.

Algorithm (``reassociate-sums``, a kernel pass):
1. Take the innermost grid axis longer than one (the reduction axis: every later axis has one
   step). Leave a kernel with a dynamic axis alone.
2. For each output whose block stays put along that axis, find in the body's top level the
   accumulation ``g = get o[I]; r = reduce_sum e; [r2 = reshape r]; w = add g, r2; swap o[I],
   w`` of a float32 sum, ``I`` static, each result used once. Every other use of ``o`` must be
   a ``cond`` before it that writes ``o`` only at the axis's first step (``pl.when(
   program_id(k) == 0)``: the reset). Anything else that touches ``o`` leaves it alone.
3. Rewrite: a new scratch buffer ``acc`` shaped like ``e``, zeroed at the axis's first step;
   the accumulation becomes ``acc += e``; at the axis's last step ``o[I] = o[I] + r2`` with
   ``r2`` the same reduction (and reshape) of ``acc``. ``o`` then holds at each step what it
   held before, but for the sums not yet added in, which the last step of each run adds.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from minipallas.ir import indexing
from minipallas.ir.builder import Builder, params
from minipallas.ir.core import Block, Op, Value
from minipallas.ir.kernel_spec import Kernel
from minipallas.ir.literal import Literal
from minipallas.ir.types import RefType
from minipallas.passes.grid_fusion.index_maps import motion
from minipallas.passes.pipeline import pass_names
from minipallas.passes.registry import register

__all__ = ["REASSOCIATING", "reassociate_sums", "reassociates"]

REASSOCIATING = frozenset({"reassociate-sums"})  # passes whose results may move float sums


def reassociates(pipeline: str) -> bool:
    """Whether ``pipeline`` has a pass that may reorder float sums (``REASSOCIATING``)."""
    return bool(pipeline) and any(name in REASSOCIATING for name in pass_names(pipeline))


@dataclasses.dataclass(frozen=True)
class _Accumulation:
    """Step 2's match: the ops of ``o[I] = o[I] + reshape(reduce_sum(e))``."""

    ref: Value
    get: Op
    sum: Op
    shape: Op | None  # the reshape between the sum and the add, if any (``_reshapes``)
    add: Op
    swap: Op

    @property
    def dropped(self) -> set[int]:
        return {id(op) for op in (self.get, self.sum, self.shape, self.add) if op is not None}

    @property
    def summed(self) -> Value:
        return self.sum.operands[0]


@register(
    "reassociate-sums",
    doc="a float sum added into an output every grid step is kept as a vector of partial "
    'sums, reduced once at the last step (reorders float sums: optimize="fast")',
    subject="kernel",
)
def reassociate_sums(kernel: Kernel) -> Kernel:
    """``kernel`` with each accumulation of step 2 rewritten (module doc); ``kernel`` itself
    when there is none."""
    axis = _innermost(kernel.grid)
    if kernel.dynamic_axes or axis is None:
        return kernel
    first = len(kernel.scalar_prefetch) + kernel.num_inputs
    for k, spec in enumerate(kernel.out_specs):
        moves = motion(spec, axis)
        if moves is None or moves.dim is not None:
            continue
        found = _accumulation(kernel.body.body, kernel.body.params[first + k], axis)
        if found is not None:
            kernel = _rewrite(kernel, found, axis)
    return kernel


def _innermost(grid: tuple[int | None, ...]) -> int | None:
    longer = [a for a, n in enumerate(grid) if n != 1]
    return longer[-1] if longer else None


def _accumulation(block: Block, ref: Value, axis: int) -> _Accumulation | None:
    """Step 2 for output ``ref``; None when its uses are not exactly that."""
    defs = {r: op for op in block.ops for r in op.results}
    uses: dict[Value, list[Op]] = {}
    for op in block.ops:
        for v in op.operands:
            uses.setdefault(v, []).append(op)
    touching = uses.get(ref, [])
    gets = [op for op in touching if op.name == "get"]
    swaps = [op for op in touching if op.name == "swap"]
    if len(gets) != 1 or len(swaps) != 1 or swaps[0].results[0] in uses:
        return None
    get, swap = gets[0], swaps[0]
    if get.operands != (ref,) or swap.operands[:-1] != (ref,):
        return None
    if get.attrs["indexer"] != swap.attrs["indexer"]:
        return None
    order = {id(op): k for k, op in enumerate(block.ops)}
    for op in touching:
        if op not in (get, swap) and not (
            order[id(op)] < order[id(get)] and _resets_first(op, ref, defs, axis)
        ):
            return None
    add = defs.get(swap.operands[-1])
    if add is None or add.name != "add" or uses[get.result] != [add]:
        return None
    (other,) = [v for v in add.operands if v is not get.result] or [None]
    shape = defs.get(other)
    if shape is not None and _reshapes(shape) and uses[other] == [add]:
        other = shape.operands[0]
    else:
        shape = None
    total = defs.get(other)
    if total is None or total.name != "reduce_sum" or uses[other] != [shape or add]:
        return None
    if total.operands[0].type.dtype != "float32":
        return None
    return _Accumulation(ref, get, total, shape, add, swap)


def _reshapes(op: Op) -> bool:
    """A ``reshape``, or a ``broadcast_in_dim`` that only adds dimensions of size 1 (what
    ``sum(keepdims=True)`` traces to): the same elements in another shape."""
    if op.name not in ("reshape", "broadcast_in_dim"):
        return False
    return math.prod(op.operands[0].type.shape) == math.prod(op.results[0].type.shape)


def _resets_first(op: Op, ref: Value, defs: dict[Value, Op], axis: int) -> bool:
    """Whether ``op`` is a ``cond`` on ``program_id(axis) == 0`` whose other branch leaves
    ``ref`` alone (it may write it only at the axis's first step)."""
    if op.name != "cond" or len(op.regions) != 2 or op.operands[0] is ref:
        return False
    if not _first_step(op.operands[0], defs, axis):
        return False
    positions = [k for k, v in enumerate(op.operands[1:]) if v is ref]
    skip = op.regions[0]
    inner = [p for k, p in enumerate(skip.params) if k in positions]
    return not any(v in inner for o in _walk(skip) for v in o.operands)


def _first_step(pred: Value, defs: dict[Value, Op], axis: int) -> bool:
    """``pred`` is ``convert(program_id(axis) == 0)`` (either side of the ``eq``)."""
    op = defs.get(pred)
    if op is not None and op.name == "convert":
        op = defs.get(op.operands[0])
    if op is None or op.name != "eq":
        return False
    sides = [defs.get(v) for v in op.operands]
    names = sorted(s.name for s in sides if s is not None)
    if names != ["constant", "program_id"]:
        return False
    pid = next(s for s in sides if s.name == "program_id")
    zero = next(s for s in sides if s.name == "constant")
    return pid.attrs["axis"] == axis and not zero.attrs["value"].array().any()


def _walk(block: Block) -> list[Op]:
    return [o for op in block.ops for o in (op, *(x for r in op.regions for x in _walk(r)))]


def _rewrite(kernel: Kernel, found: _Accumulation, axis: int) -> Kernel:
    """Step 3."""
    summed = found.summed.type
    acc_type = RefType(summed.shape, summed.dtype, found.ref.type.memory_space)
    acc = Value(acc_type)
    old = kernel.body
    b = Builder()
    _at_step(b, axis, 0, [acc], lambda inner, refs: _zero(inner, refs[0], found.sum))
    dropped = found.dropped
    for op in old.body.ops:
        if op is found.swap:
            _store(b, acc, _add(b, _load(b, acc, found.sum), found.summed, found.add), found.swap)
        elif id(op) not in dropped:
            b.add(op)
    last = kernel.grid[axis] - 1
    _at_step(b, axis, last, [found.ref, acc], lambda inner, refs: _flush(inner, refs, found))
    body = b.function(old.name, (*old.params, acc), old.body.results)
    return dataclasses.replace(kernel, body=body, scratch_types=(*kernel.scratch_types, acc_type))


def _at_step(b: Builder, axis: int, step: int, refs: Sequence[Value], then) -> None:  # noqa: ANN001
    """``cond(program_id(axis) == step)`` over ``refs``, running ``then(builder, params)``."""
    pid = b.create("program_id", attrs={"axis": axis}).result
    at = b.create("constant", attrs={"value": Literal.of(step, "int32")}).result
    same = b.create("eq", [pid, at]).result
    pred = b.create("convert", [same], {"dtype": "int32"}).result
    skip, run = Builder(), Builder()
    skip_params, run_params = params([r.type for r in refs]), params([r.type for r in refs])
    then(run, run_params)
    regions = [skip.block(skip_params, []), run.block(run_params, [])]
    b.create("cond", [pred, *refs], {}, regions)


def _zero(b: Builder, acc: Value, like: Op) -> None:
    zero = b.create("constant", attrs={"value": Literal.of(0.0, "float32")}, loc=like.loc)
    shape = acc.type.shape
    filled = b.create("broadcast_in_dim", [zero.result], {"shape": shape, "dims": ()})
    _store(b, acc, filled.result, like)


def _flush(b: Builder, refs: Sequence[Value], found: _Accumulation) -> None:
    """``o[I] = o[I] + reshape(reduce_sum(acc))``, the old ops' attributes and order."""
    out, acc = refs
    total = b.create("reduce_sum", [_load(b, acc, found.sum)], found.sum.attrs, loc=found.sum.loc)
    value = total.result
    if found.shape is not None:
        value = b.create(found.shape.name, [value], found.shape.attrs, loc=found.shape.loc).result
    held = b.create("get", [out], found.get.attrs, loc=found.get.loc).result
    first = found.add.operands[0] is found.get.result
    _store(b, out, _add(b, held, value, found.add) if first else _add(b, value, held, found.add),
           found.swap, found.swap.attrs)  # fmt: skip


def _load(b: Builder, ref: Value, like: Op) -> Value:
    indexer = indexing.full(ref.type.shape)
    return b.create("get", [ref], {"indexer": indexer}, loc=like.loc).result


def _add(b: Builder, x: Value, y: Value, like: Op) -> Value:
    return b.create("add", [x, y], like.attrs, loc=like.loc).result


def _store(b: Builder, ref: Value, value: Value, like: Op, attrs: dict | None = None) -> None:
    indexer = {"indexer": indexing.full(ref.type.shape)} if attrs is None else attrs
    b.create("swap", [ref, value], indexer, loc=like.loc)
