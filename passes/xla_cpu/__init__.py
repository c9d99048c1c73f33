"""XLA:CPU's side of batching: which batched float reductions and dots keep each point's bits
there, and in which form a batched program runs fast there. The measurements (XLA:CPU, jaxlib
0.10.2, with YNNPACK) and the thresholds they give are ``exactness``; keeping cheap values out
of memory past a break in YNNPACK's graph is ``recompute``; ``XLA_CPU`` (``policy``) is the
batching ``Policy`` that answers the batching rules with them. The generic pass
(``minipallas.passes.batching``) knows none of this: the kernels' CPU path hands it ``XLA_CPU``,
and so does the pipeline's ``batch`` pass, registered here.
"""

from __future__ import annotations

from minipallas.ir.core import Function
from minipallas.ir.types import ArrayType
from minipallas.passes.batching import batch, leading
from minipallas.passes.registry import BOOL, INTS, Option, register
from minipallas.passes.xla_cpu.policy import XLA_CPU, XlaCpu

__all__ = ["XLA_CPU", "XlaCpu", "batch_pass"]


@register(
    "batch",
    Option("sizes", INTS, "the batch grid's shape; its axes go in front of every parameter"),
    Option("exact", BOOL, "false also batches float reductions and dots (equal up to rounding)"),
    doc="the program at every point of a batch grid, every parameter batched (jax.vmap)",
)
def batch_pass(fn: Function, *, sizes: tuple[int, ...], exact: bool = True) -> Function:
    """The pipeline's ``batch{sizes=4x2}``: every parameter batched, batch axes in front
    (``exact=false`` as ``batch``'s ``exact=False``), for XLA:CPU (``XLA_CPU``)."""
    layouts = [
        leading(sizes, p.type.ndim if isinstance(p.type, ArrayType) else 0) for p in fn.params
    ]
    return batch(fn, layouts, sizes, exact=exact, policy=XLA_CPU)[0]
