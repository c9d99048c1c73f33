"""A collective group's epoch as one batched step: its programs at once, merged at the barrier.

``collective_program`` runs the programs of a group one after another within each epoch. They
can as well run together: between two barriers a race-free program sees the memory as the
epoch found it plus its own writes, and no element is written by two programs (or read by one
and written by another). So each epoch (a *segment*) of every program of the group is one call
of the segment, discharged and batched over the collective axes (``passes.batching``, with
``gathers``: each program indexes the shared buffer at its own ``axis_index``):

- its block refs become each program's blocks, stacked ``(*group, *block)``; the shared
  allocations are single unbatched arrays; values kept across a barrier come stacked too;
- it returns each program's copy of every block and shared array it writes, and the values
  later epochs use;
- at the barrier the copies are merged, in grid order: an element takes a program's value
  where that program's copy differs in bits from what the epoch started with. Race-free, at
  most one program changes any element, so this is what the programs did.

Two programs may accumulate into one element without a race; their copies would each hold one
sum, so an epoch that accumulates into a block or shared ref has no batched form. Neither has
one whose ops cannot be batched exactly (``NotBatchable``): ``batched_epochs`` then returns
None and the kernel keeps the one-program-at-a-time form.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from minipallas.frontend.control import call
from minipallas.frontend.refs import TracedRef
from minipallas.frontend.values import TracedArray, compare, constant, emit_array, where
from minipallas.ir import dtypes
from minipallas.ir.core import Function
from minipallas.ir.effects import effects
from minipallas.ir.errors import MiniPallasError
from minipallas.ir.opdef import ACCUM, WRITE
from minipallas.passes.batching import batch, leading
from minipallas.passes.cleanup import cleanup
from minipallas.passes.discharge import discharge


@dataclass(frozen=True)
class BatchedEpoch:
    """One segment batched over the group: ``fn(grid indices, stacked blocks, shared arrays,
    stacked live-ins)`` returns the stacked live-outs, then one stacked copy per block and
    shared ref, in parameter order; ``writes`` says which refs' copies are merged."""

    fn: Function
    writes: tuple[bool, ...]  # per block ref, then per shared ref


def batched_epochs(
    segments: Sequence[Function], n_grid: int, n_blocks: int, n_shared: int,
    along: Sequence[int], sizes: tuple[int, ...],
) -> list[BatchedEpoch] | None:  # fmt: skip
    """Each segment (params: grid indices, block refs, shared refs, live-ins) batched over the
    group of shape ``sizes`` along the grid axes ``along``, or None when one has no batched
    form (module doc)."""
    refs = range(n_grid, n_grid + n_blocks + n_shared)
    grid_layouts = [(along.index(a),) if a in along else () for a in range(n_grid)]
    out = []
    for seg in segments:
        kinds = {(e.input, e.kind) for e in effects(seg)}
        if any((r, ACCUM) in kinds for r in refs):
            return None
        layouts = list(grid_layouts)
        for k, p in enumerate(seg.params[n_grid:]):
            shared = n_blocks <= k < n_blocks + n_shared
            layouts.append((None,) * p.type.ndim if shared else leading(sizes, p.type.ndim))
        try:
            pure = cleanup(discharge(seg))
            results = [leading(sizes, r.type.ndim) for r in pure.body.results]
            fn, _ = batch(pure, layouts, sizes, results, exact=True, gathers=True)
        except MiniPallasError:
            return None
        out.append(BatchedEpoch(fn, tuple((r, WRITE) in kinds for r in refs)))
    return out


def run_epoch(
    epoch: BatchedEpoch,
    indices: Sequence[TracedArray],
    views: Sequence[Sequence[TracedRef]],
    staging: Sequence[TracedRef],
    shared: Sequence[TracedRef],
    live_in: Sequence[TracedArray],
    members: Sequence[tuple[int, ...]],
) -> list[TracedArray]:
    """The epoch for every program of the group (``views[k][p]``: block ref ``k`` of program
    ``members[p]``), merged into the block and shared refs; returns the stacked live-outs."""
    blocks = []
    for per_member, stage in zip(views, staging, strict=True):
        for member, view in zip(members, per_member, strict=True):
            stage[member] = view[...]
        blocks.append(stage[...])
    starts = [ref[...] for ref in shared]
    outs = call(epoch.fn, *indices, *blocks, *starts, *live_in)
    outs = [] if outs is None else list(outs) if isinstance(outs, tuple) else [outs]
    n_live = len(outs) - len(blocks) - len(starts)
    copies = outs[n_live:]
    for k, (per_member, old) in enumerate(zip(views, blocks, strict=True)):
        if epoch.writes[k]:
            for member, view in zip(members, per_member, strict=True):
                mine = copies[k][member]
                view[...] = where(_changed(mine, old[member]), mine, view[...])
    for k, (ref, old) in enumerate(zip(shared, starts, strict=True)):
        if epoch.writes[len(blocks) + k]:
            merged = old
            for member in members:
                mine = copies[len(blocks) + k][member]
                merged = where(_changed(mine, old), mine, merged)
            ref[...] = merged
    return outs[:n_live]


def group_indices(sizes: Sequence[int]) -> list[TracedArray]:
    """The grid index along each collective axis, one entry per program of the group."""
    return [constant(np.arange(n, dtype=np.int32), "int32") for n in sizes]


def _changed(new: TracedArray, old: TracedArray) -> TracedArray:
    """Where ``new`` differs from ``old`` in bits (so -0.0 and each NaN count as changes)."""
    dtype = new.type.dtype
    if dtypes.is_float(dtype):
        twin = dtypes.signed_twin(dtype)
        new, old = (emit_array("bitcast", [x], dtype=twin) for x in (new, old))
    return compare("ne", new, old)
