"""A collective group's epoch as one batched step: all its programs at once.

``collective_program`` runs the programs of a group one after another within each epoch. They
can as well run together: between two barriers a race-free program reads nothing another
writes, and no element is written by two programs. So each epoch (a *segment*) runs once for
the whole group, discharged and batched over the collective axes (``passes.batching``):

- the segment takes the operands' whole padded buffers and cuts its block views from them
  itself, at each program's own grid point (``collective_program``'s ``_on_buffers``);
- the buffers and the collective scratch are *shared* arrays of the batched program
  (``batch(..., shared=...)``): one array each, not one per program, into which every
  program's writes land, one ``scatter_add`` of the bits each program changes (nothing from
  the programs that skip a branch the others take); reads are gathers at each program's
  positions (``gathers``); the values kept across a barrier come stacked, one per program.

Race-free, a program then sees the buffers as the epoch found them plus its own writes, as
when it runs alone, and the shared arrays after the epoch are what all programs wrote: what
the barrier gives. Two programs may accumulate into one element without a race, and one
scatter cannot do that in their order; so an epoch that accumulates into a buffer or shared
scratch has no batched form. Neither has one whose ops cannot be batched exactly
(``NotBatchable``): ``batched_epochs`` then returns None, and the kernel keeps the
one-program-at-a-time form.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from minipallas.frontend.control import call
from minipallas.frontend.refs import TracedRef
from minipallas.frontend.values import TracedArray, constant
from minipallas.ir.core import Function
from minipallas.ir.effects import effects
from minipallas.ir.errors import MiniPallasError
from minipallas.ir.opdef import ACCUM, WRITE
from minipallas.ir.types import RefType
from minipallas.passes.batching import batch, leading
from minipallas.passes.cleanup import cleanup
from minipallas.passes.discharge import discharge
from minipallas.passes.xla_cpu import XLA_CPU


@dataclass(frozen=True)
class BatchedEpoch:
    """One segment batched over the group: ``fn(grid indices, buffers, shared scratch, stacked
    live-ins)`` returns the stacked live-outs, then each buffer and shared array after the
    epoch; ``writes`` says which of those changed."""

    fn: Function
    writes: tuple[bool, ...]  # per buffer, then per shared allocation


def batched_epochs(
    segments: Sequence[Function], n_grid: int, along: Sequence[int], sizes: tuple[int, ...]
) -> list[BatchedEpoch] | None:
    """Each segment on whole buffers (params: grid indices, buffers, shared scratch, live-ins)
    batched over the group of shape ``sizes`` along the grid axes ``along``; None when one
    has no batched form (module doc)."""
    grid_layouts = [(along.index(a),) if a in along else () for a in range(n_grid)]
    out = []
    for whole in segments:
        n_refs = sum(isinstance(p.type, RefType) for p in whole.params)
        refs = range(n_grid, n_grid + n_refs)
        kinds = {(e.input, e.kind) for e in effects(whole)}
        if any((r, ACCUM) in kinds for r in refs):
            return None
        layouts = [
            *grid_layouts,
            *((None,) * p.type.ndim if k < n_refs else leading(sizes, p.type.ndim)
              for k, p in enumerate(whole.params[n_grid:])),
        ]  # fmt: skip
        try:
            pure = cleanup(discharge(whole))
            n_live = len(pure.body.results) - n_refs
            results = [
                layouts[n_grid + k - n_live] if k >= n_live else leading(sizes, r.type.ndim)
                for k, r in enumerate(pure.body.results)
            ]
            shared = [(n_grid + k, n_live + k) for k in range(n_refs)]
            fn, _ = batch(pure, layouts, sizes, results, True, True, shared, policy=XLA_CPU)
        except MiniPallasError:
            return None
        out.append(BatchedEpoch(fn, tuple((r, WRITE) in kinds for r in refs)))
    return out


def run_epoch(
    epoch: BatchedEpoch,
    indices: Sequence[TracedArray],
    refs: Sequence[TracedRef],
    live_in: Sequence[TracedArray],
) -> list[TracedArray]:
    """The epoch for every program of the group, on the buffers and shared scratch ``refs``;
    returns the stacked live-outs."""
    outs = call(epoch.fn, *indices, *(ref[...] for ref in refs), *live_in)
    outs = [] if outs is None else list(outs) if isinstance(outs, tuple) else [outs]
    n_live = len(outs) - len(refs)
    for ref, new, written in zip(refs, outs[n_live:], epoch.writes, strict=True):
        if written:
            ref[...] = new
    return outs[:n_live]


def group_indices(sizes: Sequence[int]) -> list[TracedArray]:
    """The grid index along each collective axis, one entry per program of the group."""
    return [constant(np.arange(n, dtype=np.int32), "int32") for n in sizes]
