"""Batching: a pure function applied over new batch axes (``jax.vmap`` for minipallas IR).

``batch(fn, layouts, sizes)`` returns a function computing ``fn`` at every point of a batch
grid of shape ``sizes``, all at once. This is how the CPU path runs the independent points of
a kernel's grid as one program (``minipallas.kernels.programs.vectorized_grid``), so that XLA sees
whole arrays instead of a loop over blocks.

Every value of the new program has a *layout*: one entry per dimension, the batch axis it runs
along (an int), or None for a dimension of the original value, in order. A value without batch
axes is the same at every point and keeps its type. The layouts of the parameters are the
caller's choice: the kernel path passes blocks in the order they lie in memory (for an array
cut into ``(8, 128)`` blocks along batch axes 0 and 1, layout ``(0, None, 1, None)``), so that
no data moves to make them; results come back in whatever layout their ops produced.

The pass is an interpreter (``engine``) that follows the program once, op by op:

1. an op whose operands have no batch axes is copied as it is;
2. elementwise ops keep the layout of their richest operand (the others are transposed and
   broadcast to it, which XLA fuses into the op): an elementwise kernel runs on its arrays as
   they lie; ``transpose`` permutes only the original dimensions, ``broadcast_in_dim`` and
   reductions add or remove only original dimensions (``arrays``), and windows without
   integer-array indices slice the batch axes whole (``indexed``), all keeping the batch axes
   in place; so do ``reverse``, ``pad``, the cumulative ops and ``argmax`` / ``argmin``
   (``structural``), which work along original dimensions where they lie;
3. every other op takes its batched operands in the *leading* layout (all batch axes first,
   in order; ``leading``) and shifts its dimensions past them; regions are batched with
   leading layouts, loops until their carries' batching settles; callees once per batching of
   their arguments (``control``).

A ``cond`` whose index differs between points runs every branch and selects each point's
results. Some programs have no batched form here: in exact mode, a float reduction or dot
that the backend would round differently at the batched shape (the ``policy`` says which:
``Policy`` knows no backend and keeps them all per point; XLA:CPU's, measured by
bench/numerics/batched_bits.py, is ``minipallas.passes.xla_cpu.XLA_CPU``, which also writes some ops
in its own forms); a dynamic index, loop
bound or loop condition that differs between batch points (that needs a gather, or masking);
refs (batch only discharged programs). A dynamic index that differs becomes a gather when
asked (``gathers=True``). A parameter can be *shared* instead of batched: one array that
every point writes at its own positions (``shared``: a collective group's scratch).
``NotBatchable`` says which op; callers fall back to running the points one at a time. Like
every pass, ``batch`` builds new IR and never edits ``fn``.
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir.core import Function
from minipallas.ir.errors import PassError
from minipallas.passes.batching import (  # noqa: F401  (each registers its rules)
    arrays,
    control,
    indexed,
    lanes,
    structural,
)
from minipallas.passes.batching import shared as _shared  # noqa: F401  (its write rules)
from minipallas.passes.batching.engine import Batcher, Layout, NotBatchable, axes, leading
from minipallas.passes.batching.policy import GENERIC, Policy

__all__ = ["GENERIC", "Layout", "NotBatchable", "Policy", "axes", "batch", "leading"]


def batch(
    fn: Function,
    layouts: Sequence[Layout],
    sizes: Sequence[int],
    results: Sequence[Layout | None] | None = None,
    exact: bool = True,
    gathers: bool = False,
    shared: Sequence[tuple[int, int]] = (),
    policy: Policy = GENERIC,
) -> tuple[Function, tuple[Layout, ...]]:
    """``fn`` at every point of a batch grid of shape ``sizes``, its parameters given in
    ``layouts``; results are given in the layouts ``results`` asks for (None: as they come),
    which must hold all their batch axes. Returns the function and its results' layouts.

    ``policy`` answers for the backend that runs the result (``policy``): in exact mode, which
    float reductions and dots keep each point's bits batched (``GENERIC``: none), and its own
    forms of ops. ``exact=False`` batches float reductions and dots too: each point's result is
    then what the backend computes at the batched shape, equal to the unbatched program's only
    to rounding.
    ``gathers=True`` gives a window whose dynamic index differs between points a batched
    form, a gather or scatter over integer-array positions (``indexed``), as ``jax.vmap``
    does; the kernel grid keeps its loops for those instead.
    ``shared`` pairs ``(parameter, result)``: the parameter is one unbatched array that every
    point writes at its own positions (a collective group's scratch, ``shared``), and the
    result is that array once all points have run.
    """
    if len(layouts) != len(fn.params):
        raise PassError(f"batch: {len(layouts)} layouts for {len(fn.params)} parameters")
    ops = [op for f in (fn, *fn.callees()) for op in f.walk()]
    batcher = Batcher(tuple(sizes), exact, policy, policy.start(ops), gathers)
    roots = [None] * len(fn.params)
    result_roots = [None] * len(fn.body.results)
    for param, result in shared:
        roots[param], result_roots[result] = param, param
    body, out = batcher.block(fn.body, layouts, results, roots, result_roots if shared else ())
    return Function(f"{fn.name}_batched", body), out
