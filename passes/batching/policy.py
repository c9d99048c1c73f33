"""What batching asks of the backend that will run the batched program: a ``Policy``.

The batching rules give every op a batched form; they cannot know what the backend does with
it. A float sum batched may be added up in another order than at one point, a dot handed to
another library; a form that runs slowly on one backend runs fast on another. A ``Policy``
answers for one backend, where the rules ask:

- ``keeps_bits``: in exact mode, whether a float reduction or ``dot`` batched keeps each
  point's bits (else the rule refuses it: ``NotBatchable``);
- ``elementwise``, ``reduce``, ``dot_left``: the backend's own form of an op, where it has one
  (the plain batched op otherwise);
- ``past``: how ops after a *break* (an op the policy split, ``bt.breaks``) read the values
  made before it.

``Policy`` itself is the generic backend, of which nothing is known: in exact mode every float
reduction and dot stays per point, and every op takes its plain form. XLA:CPU's policy,
measured there, is ``minipallas.passes.xla_cpu.XLA_CPU``; the kernels' CPU path batches with
it, and so does the pipeline's ``batch`` pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from minipallas.ir import dtypes
from minipallas.ir.builder import Builder
from minipallas.ir.core import Op, Value
from minipallas.ir.types import ArrayType

if TYPE_CHECKING:
    from minipallas.passes.batching.engine import Batched, Batcher, Layout


class Reader(Protocol):
    """How the ops after a break read a value made before it (``Policy.past``)."""

    def read(self, bt: Batcher, builder: Builder, value: Value) -> Batched: ...


class Policy:
    """The generic backend's answers; a backend's policy overrides those it knows better."""

    name = "generic"

    def start(self, ops: Sequence[Op]) -> Any:
        """Facts about the program (``ops``: its ops and its callees') that the other answers
        read as ``bt.facts``; None here."""
        return None

    def keeps_bits(
        self, bt: Batcher, op: Op, per_point: list[ArrayType], columns: int
    ) -> str | None:
        """Exact mode: None when a float reduction or ``dot`` batched keeps each point's bits,
        else why not (``per_point``: its operands' types at one point; ``columns``: for a dot,
        how many points' right sides batching puts side by side). Generic: an integer one
        always does, a float one may be added up in another order at another shape."""
        if not dtypes.is_float(op.result.type.dtype):
            return None
        what = "dot" if op.name == "dot" else "reduction"
        return (
            f"a float {what} may be added up in another order at the batched shape (the "
            f"'{self.name}' batching policy knows no backend that keeps its bits)"
        )

    def elementwise(
        self,
        bt: Batcher,
        builder: Builder,
        op: Op,
        operands: list[Value],
        layout: Layout,
        batched: ArrayType,
    ) -> Value | None:
        """The backend's own form of an elementwise ``op`` on ``operands`` (all in ``layout``;
        its result of type ``batched``), or None for the plain op. Exact mode only."""
        return None

    def reduce(self, bt: Batcher, builder: Builder, op: Op, ins: list[Batched]) -> Batched | None:
        """The backend's own form of a reduction, or None for the plain one. Exact mode only."""
        return None

    def dot_left(self, builder: Builder, a: Value, b: Value) -> Value:
        """The left side of a batched ``dot`` (``a``: ``[..., m, k]``, ``b``: ``[..., k, n]``)
        as the backend should be given it: ``a`` itself here."""
        return a

    def past(
        self, made: Mapping[Value, Op], env: dict[Value, Batched], before: frozenset[Value]
    ) -> Reader | None:
        """After a break, how the ops read the values ``before`` it (``made``: the op that made
        each old value; ``env``: their batched forms); None: as they are. Only a policy that
        makes breaks is asked."""
        return None


GENERIC = Policy()
