"""Past a break in YNNPACK's graph, cheap values are computed again rather than kept in memory.

Exact mode runs an approximate op that batching would move into YNNPACK's graph in chunks
(``policy.XlaCpu.elementwise``, ``exactness.chunk_points``): XLA computes each chunk itself, as it
does at one point. That cuts the program in two, and XLA writes to memory every value that the
second half reads from the first. A layer norm's centered rows ``x - mean`` are read by its
variance, before the ``rsqrt`` chunks, and by its output, after them: XLA wrote them out (16 MiB for
4096x1024) and read them back twice, where ``jax.jit``, one YNNPACK graph, never writes them.

So after a break the batcher computes again, in the second half, each value of the first half
that an exactly rounded elementwise op made: the same ops on the same operands, so the same
bits. Its other inputs from the first half (the rows loaded, the means) reach it through an
``optimization_barrier``, or XLA's common subexpression elimination would merge the two
computations back into the one written to memory. Then the variance's YNNPACK graph reads the
rows and keeps the centered ones to itself, and the output's kernel reads the rows again: on
the 13-core AMD EPYC the layer norm's program took 1.29 ms instead of 1.98 (``jax.jit`` 0.71).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from minipallas.ir.builder import Builder
from minipallas.ir.core import Op, Value
from minipallas.ir.opset.arrays import COMPARISONS
from minipallas.ir.types import ArrayType

if TYPE_CHECKING:
    from minipallas.passes.batching.engine import Batched, Batcher

# Ops computed again past a break: IEEE's exactly rounded ones, so they have the same bits in
# either half whoever runs them. Not ``pow`` and the transcendental ops, which YNNPACK computes
# its own way inside its graph, nor ``max`` and ``min``, whose NaN and -0 rules are each
# library's own.
RECOMPUTED = frozenset(
    {"add", "sub", "mul", "div", "neg", "abs", "select", "convert", "broadcast_in_dim"}
) | frozenset(COMPARISONS)


class Past:
    """A block's values batched ``before`` its latest break: ``made`` maps each old value to
    the op that made it (block parameters have none), ``env`` to its batched form."""

    def __init__(
        self, made: dict[Value, Op], env: dict[Value, Batched], before: frozenset[Value]
    ) -> None:
        self.made = dict(made)
        self.env = env
        self.before = before
        self.again: dict[Value, Batched] = {}  # each value of the first half, as read past it

    def read(self, bt: Batcher, builder: Builder, value: Value) -> Batched:
        """``value`` as an op past the break reads it: computed again if the first half made
        it with a ``RECOMPUTED`` op and it differs between points, else behind a barrier (a
        shared array as it is: its writes go to its newest value)."""
        batched = self.env[value]
        if value not in self.before or not any(d is not None for d in batched[1]):
            return batched
        if batched[0] in bt.roots:
            return batched
        if value not in self.again:
            op = self.made.get(value)
            if op is not None and op.name in RECOMPUTED:
                ins = [self.read(bt, builder, v) for v in op.operands]
                self.again.update(zip(op.results, bt.op(builder, op, ins), strict=True))
            elif isinstance(batched[0].type, ArrayType):
                kept = builder.create("optimization_barrier", [batched[0]], {}).result
                self.again[value] = (kept, batched[1])
            else:
                self.again[value] = batched
        return self.again[value]
