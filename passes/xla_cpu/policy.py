"""XLA:CPU's batching policy (``XLA_CPU``): the batching rules' questions answered as measured
on XLA:CPU with YNNPACK (``exactness``, ``recompute``).

- ``keeps_bits``: the classes of float reductions and dots ``exactness.keeps_bits`` admits;
- ``reduce``: a small f32 row sum XLA keeps per point is written out in the order XLA adds it
  up there (``exactness.spelled_tree``), so every point keeps its bits;
- ``elementwise``: an approximate op (``exp``, ``rsqrt``...) that batching would move into a
  YNNPACK graph runs in chunks that each stay under its threshold (``exactness.chunk_points``):
  a *break* in the graph, past which ``past`` computes cheap values again (``recompute``);
- ``dot_left``: a batched f32 dot XLA's own kernel runs faster and with YNNPACK's bits
  (``exactness.own_dot``) gets its left side transposed behind a barrier, which XLA folds into a
  column-major left side YNNPACK does not take.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from minipallas.ir.builder import Builder
from minipallas.ir.core import Op, Value
from minipallas.ir.indexing import Int, Slice, along
from minipallas.ir.types import ArrayType
from minipallas.passes.batching.engine import (
    Batched,
    Batcher,
    Layout,
    NotBatchable,
    emit,
    original,
    splat,
)
from minipallas.passes.batching.policy import Policy
from minipallas.passes.xla_cpu.exactness import (
    MAX_CHUNKS,
    OFFLOADED,
    WINDOW,
    approximate_crosses,
    chunk_points,
    keeps_bits,
    own_dot,
    spelled_tree,
)
from minipallas.passes.xla_cpu.recompute import Past


@dataclass(frozen=True)
class Facts:
    """What XLA:CPU's answers need to know of the whole program: whether XLA may hand part of
    it to YNNPACK (``offloads``: it has a reduction or dot), and which values are results of a
    ``transpose`` (XLA lays them out column-major)."""

    offloads: bool
    transposed: frozenset[Value]


class XlaCpu(Policy):
    """XLA:CPU's answers (module doc)."""

    name = "xla-cpu"

    def start(self, ops: Sequence[Op]) -> Facts:
        return Facts(
            any(op.name in OFFLOADED for op in ops),
            frozenset(op.result for op in ops if op.name == "transpose"),
        )

    def keeps_bits(
        self, bt: Batcher, op: Op, per_point: list[ArrayType], columns: int
    ) -> str | None:
        transposed = [v in bt.facts.transposed for v in op.operands]
        return keeps_bits(op, per_point, transposed, columns)

    def elementwise(
        self,
        bt: Batcher,
        builder: Builder,
        op: Op,
        operands: list[Value],
        layout: Layout,
        batched: ArrayType,
    ) -> Value | None:
        if not (bt.facts.offloads and approximate_crosses(op, batched)):
            return None
        points = chunk_points(op, [bt.sizes[d] for d in layout if d is not None])
        if points is None:
            raise NotBatchable(
                "batched, this op could move into a YNNPACK graph, which rounds it differently, "
                f"even in {MAX_CHUNKS} chunks",
                op=op.name,
                loc=op.loc,
                fix="exact=False (pallas_call's match_upstream=False) batches it, exact to "
                "rounding",
            )
        bt.breaks += 1
        return _in_chunks(builder, op, operands, layout, points, batched)

    def reduce(self, bt: Batcher, builder: Builder, op: Op, ins: list[Batched]) -> Batched | None:
        if not spelled_tree(op, [original(v.type, lay) for v, lay in ins]):
            return None
        return _spelled_sum(bt, builder, ins[0]), bt.leading(op.result.type.ndim)

    def dot_left(self, builder: Builder, a: Value, b: Value) -> Value:
        if not own_dot(a.type, b.type):
            return a
        outer = a.type.ndim - 2
        swap = (*range(outer), outer + 1, outer)
        a = emit(builder, "transpose", [a], permutation=swap)
        a = emit(builder, "optimization_barrier", [a])
        return emit(builder, "transpose", [a], permutation=swap)

    def past(
        self, made: Mapping[Value, Op], env: dict[Value, Batched], before: frozenset[Value]
    ) -> Past:
        return Past(made, env, before)


XLA_CPU = XlaCpu()


def _in_chunks(
    builder: Builder, op: Op, operands: list, layout: Layout, points: int, batched: ArrayType
) -> Value:
    """``op`` on ``operands`` (all in ``layout``) ``points`` points at a time along the first
    batch axis, each chunk written into a result of type ``batched``: every chunk stays under
    YNNPACK's threshold, as one point's op does, so XLA rounds it as it rounds a point's."""
    axis = next(k for k, d in enumerate(layout) if d is not None)
    result = splat(builder, 0, batched)
    for start in range(0, batched.shape[axis], points):
        size = min(points, batched.shape[axis] - start)
        window = along(batched.shape, axis, Slice(start, size))
        chunk = [emit(builder, "slice", [v], indexer=window) for v in operands]
        part = builder.create(op.name, chunk, op.attrs, (), op.loc).result
        result = emit(builder, "dynamic_update_slice", [result, part], indexer=window)
    return result


def _spelled_sum(bt: Batcher, builder: Builder, value: Batched) -> Value:
    """The sum over the minor axis as XLA adds it up at one point: in windows of ``WINDOW``,
    each added left to right from 0, then the windows' sums the same way. Slices and adds
    leave XLA nothing to reorder, so every point keeps its bits whatever the batch size."""
    x = bt.to_leading(builder, value)
    *outer, n = x.type.shape
    windows = emit(builder, "reshape", [x], shape=(*outer, n // WINDOW, WINDOW))
    return _left_to_right(builder, _left_to_right(builder, windows))


def _left_to_right(builder: Builder, x: Value) -> Value:
    """The sum over ``x``'s minor axis, added left to right from 0."""
    minor, n = x.type.ndim - 1, x.type.shape[-1]

    def term(k: int) -> Value:
        return emit(builder, "slice", [x], indexer=along(x.type.shape, minor, Int(k)))

    first = term(0)
    zero = splat(builder, 0, first.type)
    # 0 + first, which XLA would fold to ``first``: they differ at -0, which 0 + -0 makes +0
    total = emit(builder, "select", [emit(builder, "eq", [first, zero]), zero, first])
    for k in range(1, n):
        total = emit(builder, "add", [total, term(k)])
    return total
