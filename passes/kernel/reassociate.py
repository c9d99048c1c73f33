"""Sums across grid steps as vectors of partial sums: the ``optimize="fast"`` level's pass.

A kernel that sums a long array a block a step, ``o_ref[...] += x_ref[...].sum()``, reduces
each block to one scalar before adding it in: a cross-lane reduction per step, and a chain of
scalar adds through the output's VMEM, which no fusion of steps can shorten without changing
the order of the float additions (``fuse-grid-steps`` keeps upstream's bits). Summing the
blocks elementwise into a block-shaped accumulator and reducing it once, at the last step,
computes the same sum in another order: the bits change, within the order bound of one sum of
all the terms (``minipallas/tools/envelope/reorder.py``), so this pass runs only at the opt-in level
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

With ``window_bytes``, before step 3 (``_widened``): when the body does nothing but the resets
and the sum of its inputs' blocks (``e`` made of whole-block ``get`` s of inputs that advance
along the axis, elementwise ops and scalars), each step takes ``c`` of those blocks at once, up
to ``window_bytes`` of them: the axis ``c`` times shorter, each step's sum over ``c`` blocks,
and ``acc`` as long as the window. Fusing steps into sub-steps (``fuse-grid-steps``) keeps the
resets' and the last step's conditions in every sub-step, and chains the sub-steps' adds; a
wider step has neither.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from minipallas.ir import dtypes, indexing
from minipallas.ir.builder import Builder, params
from minipallas.ir.core import Block, Function, Op, Value
from minipallas.ir.kernel_spec import Kernel, TracedBlockSpec
from minipallas.ir.literal import Literal
from minipallas.ir.types import TPU_SMEM, TPU_VMEM, RefType
from minipallas.passes.kernel.grid_fusion.index_maps import Motion, motion, window_spec
from minipallas.passes.kernel.grid_fusion.widen import ELEMENTWISE
from minipallas.passes.pipeline import pass_names
from minipallas.passes.registry import INT, Option, register

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
    Option("window_bytes", INT, "take that many bytes of summed blocks a step (0: as written)"),
    doc="a float sum added into an output every grid step is kept as a vector of partial "
    'sums, reduced once at the last step (reorders float sums: optimize="fast")',
    subject="kernel",
)
def reassociate_sums(kernel: Kernel, *, window_bytes: int = 0) -> Kernel:
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
        ref = kernel.body.params[first + k]
        found = _accumulation(kernel.body.body, ref, axis)
        if found is None:
            continue
        wider = _widened(kernel, found, axis, window_bytes) if window_bytes else kernel
        if wider is not kernel:
            kernel, found = wider, _accumulation(wider.body.body, ref, axis)
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


def _widened(kernel: Kernel, found: _Accumulation, axis: int, most: int) -> Kernel:
    """``kernel`` with ``c`` steps of ``axis`` taken at once (module doc, ``window_bytes``);
    ``kernel`` itself when its body does more, or no ``c`` above 1 fits in ``most`` bytes."""
    body, params_ = kernel.body.body, kernel.body.params
    chain = _chain(body, found.summed)
    specs = (*kernel.in_specs, *kernel.out_specs)
    moves = [motion(s, axis) for s in specs]
    prefetch = len(kernel.scalar_prefetch)
    moving = {
        params_[prefetch + k]: (s, m)
        for k, (s, m) in enumerate(zip(specs, moves, strict=True))
        if m is not None and m.dim is not None
    }
    gets = {op.operands[0] for op in chain or () if op.name == "get"}
    dims = {m.ref_dim for _, m in moving.values()}
    if chain is None or None in moves or set(moving) != gets or len(dims) != 1:
        return kernel
    (dim,) = dims
    if dim not in found.sum.attrs["axes"] or not _only_resets(body, chain, found):
        return kernel
    c = _factor(kernel.grid[axis], list(moving.values()), most)
    if c < 2:
        return kernel
    new_body = _wide_body(kernel.body, chain, set(moving), dim, c)
    specs = [window_spec(s, m, axis, c) for s, m in zip(specs, moves, strict=True)]
    grid = tuple(size // c if a == axis else size for a, size in enumerate(kernel.grid))
    return dataclasses.replace(
        kernel,
        body=new_body,
        grid=grid,
        in_specs=tuple(specs[: kernel.num_inputs]),
        out_specs=tuple(specs[kernel.num_inputs :]),
    )


def _factor(n: int, moving: list[tuple[TracedBlockSpec, Motion]], most: int) -> int:
    """The largest divisor of ``n`` whose windows of the ``moving`` blocks take at most
    ``most`` bytes and stay within their arrays."""
    step = sum(_bytes(s.ref_type) for s, _ in moving)
    fits = [
        c
        for c in range(1, n + 1)
        if n % c == 0 and c * step <= most
        and all(m.allows(c) and s.block_shape[m.dim] * c <= s.array.shape[m.dim]
                for s, m in moving)
    ]  # fmt: skip
    return fits[-1] if fits else 1


def _chain(block: Block, value: Value) -> list[Op] | None:
    """The ops ``value`` is computed by, in block order, when they are whole-block ``get`` s,
    elementwise ops, scalar constants and broadcasts of scalars; else None."""
    defs = {r: op for op in block.ops for r in op.results}
    found: dict[int, Op] = {}
    todo = [value]
    while todo:
        op = defs.get(todo.pop())
        if op is None or id(op) in found:
            continue
        whole = op.name == "get" and op.attrs["indexer"] == indexing.full(op.operands[0].type.shape)
        scalar = op.name == "constant" and op.result.type.shape == ()
        spread = op.name == "broadcast_in_dim" and op.operands[0].type.shape == ()
        if not (whole and len(op.operands) == 1 or scalar or spread or op.name in ELEMENTWISE):
            return None
        found[id(op)] = op
        todo.extend(() if op.name == "get" else op.operands)
    return [op for op in block.ops if id(op) in found]


def _only_resets(block: Block, chain: list[Op], found: _Accumulation) -> bool:
    """Whether every op of ``block`` outside ``chain`` and the accumulation is a reset of the
    output (a ``cond`` over it alone) or a scalar op feeding their conditions."""
    known = {id(op) for op in (*chain, found.get, found.sum, found.shape, found.add, found.swap)}
    for op in block.ops:
        if id(op) in known:
            continue
        if op.name == "cond":
            if not op.operands[1:] or any(v is not found.ref for v in op.operands[1:]):
                return False
        elif op.name not in ("program_id", "constant", "eq", "convert") or any(
            r.type.shape != () for r in op.results
        ):
            return False
    return True


def _wide_body(body: Function, chain: list[Op], moving: set[Value], dim: int, c: int) -> Function:
    """``body`` over blocks ``c`` times longer in ``dim`` for the ``moving`` refs, ``chain``
    built anew at the wider shapes and every other op copied."""
    env: dict[Value, Value] = {}
    for p in body.params:
        if p in moving:
            shape = tuple(n * c if d == dim else n for d, n in enumerate(p.type.shape))
            env[p] = Value(RefType(shape, p.type.dtype, p.type.memory_space))
    chained = {id(op) for op in chain}
    b = Builder()
    for op in body.body.ops:
        operands = tuple(env.get(v, v) for v in op.operands)
        if id(op) not in chained:
            new = b.add(op.renamed(operands))
        elif op.name == "get":
            whole = {"indexer": indexing.full(operands[0].type.shape)}
            new = b.create("get", operands, whole, loc=op.loc)
        elif op.name == "broadcast_in_dim":
            shape = tuple(n * c if d == dim else n for d, n in enumerate(op.attrs["shape"]))
            new = b.create(op.name, operands, {**op.attrs, "shape": shape}, loc=op.loc)
        else:
            new = b.create(op.name, operands, op.attrs, loc=op.loc)
        env.update(zip(op.results, new.results, strict=True))
    results = [env.get(v, v) for v in body.body.results]
    return b.function(body.name, [env.get(p, p) for p in body.params], results)


def _bytes(t: RefType) -> int:
    return math.prod(t.shape) * dtypes.itemsize(t.dtype)


def _rewrite(kernel: Kernel, found: _Accumulation, axis: int) -> Kernel:
    """Step 3."""
    summed = found.summed.type
    space = found.ref.type.memory_space  # a scalar output's SMEM holds no vector: VMEM then
    acc_type = RefType(summed.shape, summed.dtype, TPU_VMEM if space == TPU_SMEM else space)
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
