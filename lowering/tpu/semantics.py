"""Which grid axes may run in parallel: ``dimension_semantics`` inferred from the kernel.

Mosaic may split a ``parallel`` axis across TensorCores, each running its share of that axis in
order with every other axis complete. That is safe when no two grid steps that differ along
the axis share state: an output block both write, or a persistent scratch buffer one leaves a
value in for the other to read. So an axis is ``parallel`` only when

1. **no output block is revisited across it**: for every output, the block index its index
   map gives determines the axis's grid index (an ``Element`` dimension's offsets count as
   blocks only when they are multiples of its size; otherwise windows may overlap, and the
   output counts as revisited). This is checked by evaluating the index map on
   every grid point (vectorized with numpy); when that is impossible (an op the evaluator
   does not know, or a grid over ``MAX_POINTS``), an output whose index map does not use the
   axis is revisited and any other is assumed revisited, to be safe; and
2. **no persistent scratch carries state across it**. The effects analysis says whether the
   body reads the scratch at all. If it does, the body is discharged (refs become values) and
   the scratch's incoming value is followed forward to what the step leaves behind (output
   blocks and scratch contents). Along the way, a ``cond`` or ``select`` on
   ``program_id(a) == 0`` whose zero side does not use the incoming value records the guard
   "only when ``program_id(a) != 0``" — the accumulator reset of a blocked matmul. State then
   flows from one step to the next only when ``program_id(m) != 0`` for the innermost guarded
   axis ``m``, and those two steps agree on every axis before ``m``: the state crosses axes
   ``m`` and after. With no guard it crosses every axis.

Axes of size 1 are ``parallel``. A dynamic grid, or scalar prefetch (block indices read from
data), makes every axis ``arbitrary``, upstream's default. Each axis gets a one-line reason,
which ``lower_to_mosaic`` records in the module as the ``minipallas.dimension_semantics_reasons``
attribute.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from minipallas.ir.core import Block, Function, Op, Value
from minipallas.ir.effects import Read, effects_with_swap_reads
from minipallas.ir.errors import PassError
from minipallas.ir.kernel_spec import Kernel, TracedBlockSpec
from minipallas.ir.opset.meanings import numpy_div_rem
from minipallas.ir.rules import RuleTable
from minipallas.passes.cleanup import cleanup
from minipallas.passes.discharge import discharge

MAX_POINTS = 1 << 20
SEMANTICS = ("parallel", "arbitrary", "core_parallel", "subcore_parallel")


@dataclass(frozen=True)
class DimensionSemantics:
    """One semantics and one reason per grid axis; ``inferred`` is False when the user gave
    them."""

    values: tuple[str, ...]
    reasons: tuple[str, ...]
    inferred: bool


def dimension_semantics(kernel: Kernel) -> DimensionSemantics:
    """The kernel's own ``dimension_semantics`` if given (checked), else the inferred ones."""
    given = kernel.dimension_semantics
    if given is not None:
        given = tuple(given)
        if len(given) != len(kernel.grid) or any(s not in SEMANTICS for s in given):
            raise PassError(
                f"dimension_semantics {given} must give one of {SEMANTICS} per grid axis "
                f"(the grid is {kernel.grid})",
                fix="pass one entry per grid axis, or none to have them inferred",
            )
        return DimensionSemantics(given, ("given by the user",) * len(given), False)
    unknown = _unknown_points(kernel)
    if unknown:
        reasons = tuple(f"axis {a} arbitrary: {unknown}" for a in range(len(kernel.grid)))
        return DimensionSemantics(("arbitrary",) * len(kernel.grid), reasons, True)
    shared = _SharedState(kernel)
    values, reasons = [], []
    for axis, size in enumerate(kernel.grid):
        blockers = shared.blockers(axis) if size > 1 else []
        if blockers:
            values.append("arbitrary")
            reasons.append(f"axis {axis} arbitrary: " + "; ".join(blockers))
        else:
            values.append("parallel")
            why = (
                "it has size 1"
                if size == 1
                else "no output block or scratch state is shared across it"
            )
            reasons.append(f"axis {axis} parallel: {why}")
    return DimensionSemantics(tuple(values), tuple(reasons), True)


def _unknown_points(kernel: Kernel) -> str | None:
    """Why the grid's points or blocks cannot be known before the kernel runs (then every
    axis is ``arbitrary``, upstream's default), or None."""
    if kernel.dynamic_axes:
        return "the grid's size is dynamic, so its points cannot be checked"
    if kernel.scalar_prefetch:
        return "with scalar prefetch, block indices may depend on the prefetched data"
    return None


class _SharedState:
    """What steps of one kernel's grid share, computed once per kernel."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel

    def blockers(self, axis: int) -> list[str]:
        """Why ``axis`` cannot be parallel (empty when it can)."""
        out = [
            f"output {k}'s block is revisited across it"
            for k in range(self.kernel.num_outputs)
            if not self.determines(k, axis)
        ]
        for s, crossed in enumerate(self.scratch_crossings):
            if crossed is not None and axis >= crossed[0]:
                out.append(f"scratch {s} carries state across it ({crossed[1]})")
        return out

    # -- 1. output blocks ---------------------------------------------------------------------

    def determines(self, k: int, axis: int) -> bool:
        """Whether output ``k``'s block index fixes ``program_id(axis)``."""
        blocks = self.block_indices[k]
        if blocks is None:  # cannot evaluate: only an index map that ignores the axis is sure
            return False
        points = self.points[axis]
        _, group = np.unique(blocks, axis=0, return_inverse=True)
        group = group.reshape(-1)
        lo = np.full(group.max() + 1, np.iinfo(np.int64).max)
        hi = np.full(group.max() + 1, np.iinfo(np.int64).min)
        np.minimum.at(lo, group, points)
        np.maximum.at(hi, group, points)
        return bool((lo == hi).all())

    @cached_property
    def points(self) -> np.ndarray:
        grid = self.kernel.grid
        return np.indices(grid).reshape(len(grid), -1).astype(np.int64)

    @cached_property
    def block_indices(self) -> list[np.ndarray | None]:
        if int(np.prod(self.kernel.grid)) > MAX_POINTS:
            return [None] * self.kernel.num_outputs
        return [_blocks(s, evaluate(s.index_map, self.points)) for s in self.kernel.out_specs]

    # -- 2. persistent scratch ----------------------------------------------------------------

    @cached_property
    def scratch_crossings(self) -> list[tuple[int, str] | None]:
        """Per scratch buffer: ``(first axis its state crosses, why)``, or None."""
        kernel = self.kernel
        first = kernel.num_inputs + kernel.num_outputs
        body_effects = effects_with_swap_reads(kernel.body)
        out: list[tuple[int, str] | None] = []
        for s in range(len(kernel.scratch_types)):
            if Read(first + s) not in body_effects:
                out.append(None)
                continue
            guard = self._carried(first + s)
            if guard is None:
                out.append(None)
            elif guard:
                m = max(guard)
                out.append((m, f"read from the step before unless program_id({m}) == 0"))
            else:
                out.append((0, "read from the step before"))
        return out

    @cached_property
    def _pure(self) -> Function:

        return cleanup(discharge(self.kernel.body))

    def _carried(self, position: int) -> frozenset[int] | None:
        """The guard under which scratch ``position``'s incoming value reaches what the step
        leaves behind (None: never)."""
        pure = self._pure
        taint = _Taint()
        taint.seed(pure.params[position])
        taint.block(pure.body)
        first_kept = self.kernel.num_inputs
        return _meet(taint.get(r) for r in pure.body.results[first_kept:])


def _meet(guards: Iterable[frozenset[int] | None]) -> frozenset[int] | None:
    """Dependence when any of several guards holds: keep the facts all of them share."""
    out = None
    for g in guards:
        if g is not None:
            out = g if out is None else out & g
    return out


class _Taint:
    """Forward dependence on one value, with the ``program_id(a) != 0`` facts it needs."""

    def __init__(self) -> None:
        self.taint: dict[Value, frozenset[int]] = {}
        self.defs: dict[Value, Op] = {}

    def seed(self, v: Value) -> None:
        self.taint[v] = frozenset()

    def get(self, v: Value) -> frozenset[int] | None:
        return self.taint.get(v)

    def put(self, vs: Sequence[Value], guard: frozenset[int] | None) -> None:
        for v in vs:  # a callee's values are visited once per call: None clears the last
            if guard is None:
                self.taint.pop(v, None)
            else:
                self.taint[v] = guard

    def block(self, block: Block) -> None:
        for op in block.ops:
            self.defs.update((r, op) for r in op.results)
            if op.name == "cond" and len(op.regions) == 2:
                self.cond(op)
            elif op.name == "select":
                self.select(op)
            elif op.name == "call":  # as if inlined: a fused grid step calls the old body
                callee = op.attrs["callee"].body
                for p, v in zip(callee.params, op.operands, strict=True):
                    self.put([p], self.get(v))
                self.block(callee)
                for r, y in zip(op.results, callee.results, strict=True):
                    self.put([r], self.get(y))
            else:  # any other op, regions included, depends on all its operands
                self.put(op.results, _meet(self.get(v) for v in op.operands))

    def select(self, op: Op) -> None:
        pred, on_true, on_false = op.operands
        test = zero_test(pred, self.defs)
        t, f = self.get(on_true), self.get(on_false)
        if test is not None:
            axis, true_is_zero = test
            if true_is_zero and f is not None:
                f = f | {axis}
            elif not true_is_zero and t is not None:
                t = t | {axis}
        self.put(op.results, _meet([self.get(pred), t, f]))

    def cond(self, op: Op) -> None:
        index, *args = op.operands
        test = zero_test(index, self.defs)
        outs = []
        for k, branch in enumerate(op.regions):
            for p, v in zip(branch.params, args, strict=True):
                self.put([p], self.get(v))
            self.block(branch)
            guards = [self.get(r) for r in branch.results]
            runs_when_nonzero = test is not None and (k == 0) == test[1]
            if runs_when_nonzero:
                guards = [g | {test[0]} if g is not None else None for g in guards]
            outs.append(guards)
        for j, r in enumerate(op.results):
            self.put([r], _meet([self.get(index), *(g[j] for g in outs)]))


_ZERO_TESTS = RuleTable.of(
    "TPU test against program_id zero",
    {"eq": True, "ne": False, "gt": False, "lt": False, "le": True, "ge": True},
)


def zero_test(v: Value, defs: dict[Value, Op]) -> tuple[int, bool] | None:
    """``(a, true_is_zero)`` when ``v`` tests ``program_id(a)`` against 0 (through ``convert``,
    broadcasts and ``not``): ``v`` is true exactly when ``program_id(a) == 0`` if
    ``true_is_zero``."""
    op = defs.get(v)
    if op is None:
        return None
    if op.name in ("convert", "broadcast_in_dim", "reshape", "not"):
        inner = zero_test(op.operands[0], defs)
        if inner is None or op.name != "not":
            return inner
        return inner[0], not inner[1]
    if op.name not in _ZERO_TESTS:
        return None
    a, b = (defs.get(x) for x in op.operands)
    for pid, zero, flip in ((a, b, False), (b, a, True)):
        axis = _scaled_program_id(pid, defs)
        if (
            axis is not None
            and zero is not None
            and zero.name == "constant"
            and int(zero.attrs["value"].array()) == 0
        ):
            name = op.name
            if flip:  # 0 < pid is pid > 0
                name = {"gt": "lt", "lt": "gt", "le": "ge", "ge": "le"}.get(name, name)
            if name in ("lt", "ge"):  # pid < 0 never holds, pid >= 0 always does
                return None
            return axis, _ZERO_TESTS[name]
    return None


def _scaled_program_id(op: Op | None, defs: dict[Value, Op]) -> int | None:
    """``a`` when ``op`` is ``program_id(a)`` times a positive constant, plus 0 (sub-step 0 of
    a fused grid step asks ``program_id(a) * c + 0 == 0``: the same test), else None."""
    if op is None:
        return None
    if op.name == "program_id":
        return op.attrs["axis"]
    if op.name not in ("mul", "add"):
        return None
    for x, k in (op.operands, op.operands[::-1]):
        const = defs.get(k)
        if const is None or const.name != "constant" or const.attrs["value"].array().ndim:
            continue
        value = int(const.attrs["value"].array())
        if (op.name == "mul" and value > 0) or (op.name == "add" and value == 0):
            return _scaled_program_id(defs.get(x), defs)
    return None


# -- vectorized evaluation of index maps ------------------------------------------------------

_EVAL = RuleTable.of(
    "TPU index-map evaluation",
    {
        "add": np.add,
        "sub": np.subtract,
        "mul": np.multiply,
        "div": lambda a, b: numpy_div_rem("div", a, b),  # XLA's meaning, in int64
        "rem": lambda a, b: numpy_div_rem("rem", a, b),
        "max": np.maximum,
        "min": np.minimum,
        "and": np.bitwise_and,
        "or": np.bitwise_or,
        "xor": np.bitwise_xor,
        "eq": np.equal,
        "ne": np.not_equal,
        "lt": np.less,
        "le": np.less_equal,
        "gt": np.greater,
        "ge": np.greater_equal,
        "neg": np.negative,
        "abs": np.abs,
        "select": np.where,
    },
)


def _blocks(spec: TracedBlockSpec, starts: np.ndarray | None) -> np.ndarray | None:
    """The index map's results as block indices: an ``Element`` dimension's element offsets
    divided by its block size when all are multiples of it (the windows tile the array); None
    (unknown: maybe revisited) when some are not, as two such windows may overlap."""
    if starts is None or not spec.element_dims:
        return starts
    blocks = starts.copy()
    for d in spec.element_dims:
        size = spec.block_shape[d]
        if (starts[:, d] % size != 0).any():
            return None
        blocks[:, d] = starts[:, d] // size
    return blocks


def evaluate(fn: Function, points: np.ndarray) -> np.ndarray | None:
    """``fn``'s integer results at every column of ``points`` (one row per parameter), as an
    ``(n_points, n_results)`` array; None when ``fn`` uses an op this evaluator lacks."""
    env: dict[Value, np.ndarray] = dict(zip(fn.params, points, strict=True))
    with np.errstate(all="ignore"):
        for op in fn.body.ops:
            args = [env[v] for v in op.operands]
            if op.name == "constant":
                out = op.attrs["value"].array().astype(np.int64)
            elif op.name == "convert":
                bool_out = op.result.type.dtype == "bool"
                out = args[0] != 0 if bool_out else args[0].astype(np.int64)
            elif op.name == "not":
                out = ~args[0]
            elif op.name in _EVAL:
                out = _EVAL[op.name](*args)
            else:
                return None
            env[op.result] = out
    n = points.shape[1]
    columns = [np.broadcast_to(env[r], (n,)) for r in fn.body.results]
    return np.stack(columns, axis=1) if columns else np.zeros((n, 1), np.int64)
