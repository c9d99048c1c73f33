"""The kernel's entry: the ``tt.func``, its program ids, block offsets, and the grid loops.

``emit_kernel`` builds, for a kernel whose body is already partially discharged (operands
still refs, scratch as arrays):

1. ``tt.func public @name`` with one ``!tt.ptr<dtype>`` per operand (inputs, then outputs),
   each ``tt.divisibility = 32`` as upstream Pallas declares them;
2. one ``tt.get_program_id`` per launched grid axis (``grid.Schedule``);
3. the scratch's starting value (the fill value: scratch is uninitialized), then one
   ``scf.for`` per looped grid axis, carrying the scratch;
4. each operand's block offsets from its index map (``index_bounds``), evaluated as soon as
   the grid indices it reads exist (outside the loops when it ignores them). The evaluation
   folds as it goes: integer constants are not emitted, ``x * 1`` and ``x + 0`` vanish, and
   two operands with the same index map share its ops;
5. the body, with each operand a ``context.BlockRef``; its results (the scratch's final
   values) are yielded to the enclosing loop.

The rules for ``program_id`` (the launch id or the loop index) and ``num_programs`` are
``rules/kernel.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from minipallas.ir.core import Function
from minipallas.ir.dtypes import fill_value
from minipallas.ir.errors import PassError
from minipallas.ir.kernel_spec import Kernel, TracedBlockSpec
from minipallas.ir.location import user_location
from minipallas.ir.rules import RuleTable
from minipallas.ir.types import ArrayType
from minipallas.lowering.gpu import emit
from minipallas.lowering.gpu.context import BlockRef, LoweringContext, block_ref
from minipallas.lowering.gpu.emit import Index, arith, ir, scf, tt
from minipallas.lowering.gpu.grid import Schedule, dependencies

DIVISIBILITY = 32
_I32 = ArrayType((), "int32")


def emit_kernel(ctx: LoweringContext, kernel: Kernel, body: Function, plan: Schedule) -> None:
    """Steps 1-5 of the module doc, into ``ctx.module``; a tensor size Triton refuses is
    reported at the user's op or block spec (``emit.sizes_named``)."""
    with emit.sizes_named(kernel, body):
        _emit_kernel(ctx, kernel, body, plan)


def _emit_kernel(ctx: LoweringContext, kernel: Kernel, body: Function, plan: Schedule) -> None:
    specs = (*kernel.in_specs, *kernel.out_specs)
    ctx.grid = kernel.grid
    with ctx.mlir, ir.Location.unknown():
        types = [emit.pointer_type(s.array.dtype) for s in specs]
        fn = tt.FuncOp(
            kernel.name,
            ir.TypeAttr.get(ir.FunctionType.get(types, [])),
            sym_visibility="public",
            ip=ir.InsertionPoint(ctx.module.body),
        )
        attr = ir.DictAttr.get(
            {"tt.divisibility": ir.IntegerAttr.get(emit.element_type("int32"), DIVISIBILITY)}
        )
        fn.arg_attrs = ir.ArrayAttr.get([attr] * len(types))
        entry = fn.body.blocks.append(*types)
        with ir.InsertionPoint(entry):
            ctx.program_ids = _program_ids(kernel.grid, plan)
            scratch = [
                emit.constant(fill_value(t.dtype), t.dtype, t.shape) for t in kernel.scratch_types
            ]
            _Nest(ctx, kernel, body, plan, list(entry.arguments), specs).level(0, scratch)
            tt.return_([])


def _program_ids(grid: tuple[int, ...], plan: Schedule) -> list[Index]:
    """One ``i32`` per grid axis; looped axes get theirs when their loop opens."""
    ids: list[Index] = [0] * len(grid)
    folded = plan.folded(grid)
    if not folded:
        for k, axis in enumerate(plan.launched):
            ids[axis] = tt.get_program_id(k)
        return ids
    x = tt.get_program_id(0)
    for axis in plan.launched[:folded]:
        size = emit.i32(grid[axis])
        ids[axis] = arith.remui(x, size)
        x = arith.divui(x, size)
    for k, axis in enumerate(plan.launched[folded:]):
        ids[axis] = tt.get_program_id(k + 1)
    return ids


class _Nest:
    """Steps 3-5: opens one loop per looped axis, placing each operand's block as early as its
    index map allows, and emits the body innermost."""

    def __init__(
        self,
        ctx: LoweringContext,
        kernel: Kernel,
        body: Function,
        plan: Schedule,
        pointers: list[ir.Value],
        specs: Sequence[TracedBlockSpec],
    ) -> None:
        self.ctx, self.kernel, self.body, self.plan = ctx, kernel, body, plan
        self.pointers, self.specs = pointers, specs
        self.refs: list[BlockRef | None] = [None] * len(specs)
        self.depth = [_depth(s, plan) for s in specs]
        self.cache: dict[tuple, Index] = {}

    def level(self, depth: int, scratch: list[ir.Value]) -> list[ir.Value]:
        for k, spec in enumerate(self.specs):
            if self.depth[k] == depth:
                self.refs[k] = self.place(k, spec)
        if depth == len(self.plan.looped):
            return self.ctx.lower_body(self.body, [*self.refs, *scratch])
        axis = self.plan.looped[depth]
        loop = scf.ForOp(emit.i32(0), emit.i32(self.kernel.grid[axis]), emit.i32(1), scratch)
        with ir.InsertionPoint(loop.body):
            self.ctx.program_ids[axis] = loop.induction_variable
            saved, self.cache = self.cache, dict(self.cache)
            scf.YieldOp(self.level(depth + 1, list(loop.inner_iter_args)))
            self.cache = saved
        return list(loop.results)

    def place(self, k: int, spec: TracedBlockSpec) -> BlockRef:
        """The operand's block: element offsets ``block index * block size`` per dimension
        (the index itself for a squeezed or ``Element`` one). As on the CPU path, a negative
        index counts once from the end and is then clamped into the array (padded to whole
        blocks), unless its range shows it is inside. ``Element`` padding raises upstream
        Triton lowering's error, and so does a ``pipeline_mode`` (Triton has no pipeline)."""
        if spec.pipeline_mode is not None:
            raise PassError(
                f"Pipeline mode is not supported in Triton lowering. (block spec {k} of kernel "
                f"'{self.kernel.name}': pipeline_mode={spec.pipeline_mode!r})",
                op="pallas_call",
                loc=user_location(),
                fix="leave pipeline_mode unset for the GPU: it is a TPU pipeline's setting",
            )
        if spec.padding:
            raise PassError(
                f"Unblocked indexing with padding is not supported in Triton lowering (block "
                f"spec {k} of kernel '{self.kernel.name}': Element padding {spec.padding})",
                op="pallas_call",
                loc=user_location(),
                fix="pad the array before the call (jnp.pad) and use Element(n) without padding",
            )
        ranges = [(0, n - 1) for n in self.kernel.grid]
        indices = self.index_map(spec.index_map, self.ctx.program_ids, ranges)
        starts = []
        for (i, (low, high)), (unit, count, last) in zip(indices, index_bounds(spec), strict=True):
            if low < 0:
                i = self.fold("wrap", emit.wrap_negative, i, count)
                i = self.fold("max", emit.at_least, i, 0)
            if high > last:
                i = self.fold("min", emit.at_most, i, last)
            starts.append(i if unit == 1 else self.fold("mul", emit.mul, i, unit))
        return block_ref(self.pointers[k], spec.array, starts, spec.block_shape)

    def index_map(
        self, fn: Function, ids: Sequence[Index], ranges: Sequence[tuple[float, float]]
    ) -> list[tuple[Index, tuple[float, float]]]:
        """Evaluates an index map on ``i32`` scalars with the range each value may take,
        folding integer constants, ``add``, ``sub`` and ``mul``; any other op is lowered by its
        rule (and its range is unknown)."""
        env = {p: (i, r) for p, i, r in zip(fn.params, ids, ranges, strict=True)}
        for op in fn.body.ops:
            args = [env[v][0] for v in op.operands]
            if op.name == "constant" and op.result.type == _I32:
                c = int(op.attrs["value"].array())
                env[op.result] = (c, (c, c))
            elif op.name in _FOLDS and all(v.type == _I32 for v in op.operands):
                value = self.fold(op.name, _FOLDS[op.name], *args, loc=op.loc)
                env[op.result] = (value, _RANGES[op.name](*(env[v][1] for v in op.operands)))
            else:
                values = [
                    emit.constant(a, v.type.dtype) if isinstance(a, int) else a
                    for a, v in zip(args, op.operands, strict=True)
                ]
                outs = self.ctx.lower_op(op, values)
                env.update((r, (o, _UNKNOWN)) for r, o in zip(op.results, outs, strict=True))
        return [env[v] for v in fn.body.results]

    def fold(self, name: str, build: Any, a: Index, b: Index, loc: Any = None) -> Index:
        """``build(a, b)``, reusing the value an identical earlier computation gave."""
        key = (name, _key(a), _key(b))
        if key not in self.cache:
            with self.ctx.location(loc) if loc is not None else ir.Location.unknown():
                self.cache[key] = build(a, b)
        return self.cache[key]


_FOLDS = RuleTable.of("Triton index fold", {"add": emit.add, "sub": emit.sub, "mul": emit.mul})
_UNKNOWN = (-float("inf"), float("inf"))


def _product(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    corners = [
        x * y for x in a for y in b if not (0 in (x, y) and float("inf") in (abs(x), abs(y)))
    ]
    return (min(corners, default=0), max(corners, default=0))


_RANGES = RuleTable.of(
    "Triton index range",
    {
        "add": lambda a, b: (a[0] + b[0], a[1] + b[1]),
        "sub": lambda a, b: (a[0] - b[1], a[1] - b[0]),
        "mul": _product,
    },
)


def _key(x: Index) -> tuple:
    return ("const", x) if isinstance(x, int) else ("value", x)


def index_bounds(spec: TracedBlockSpec) -> list[tuple[int, int, int]]:
    """Per dimension, what the index map's result counts in: ``(unit, count, last)``, the
    elements one index step moves (the block size of a blocked dimension, 1 for a squeezed or
    ``Element`` one), how many indices the array padded to whole blocks has (a negative index
    is counted back from there), and the largest index whose window lies inside it."""
    bounds = []
    for d, (size, n) in enumerate(zip(spec.block_shape, spec.array.shape, strict=True)):
        padded = n if size is None else -(-n // size) * size
        unit = 1 if size is None or d in spec.element_dims else size
        bounds.append((unit, padded // unit, (padded - (size or 1)) // unit))
    return bounds


def _depth(spec: TracedBlockSpec, plan: Schedule) -> int:
    """How many grid loops must be open before the spec's index map can run."""
    reads = frozenset().union(*dependencies(spec.index_map))
    levels = [k + 1 for k, axis in enumerate(plan.looped) if axis in reads]
    return max(levels, default=0)
