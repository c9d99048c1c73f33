"""A collective kernel as one pure program: its groups' epochs, one after another (issue 15).

Under ``collectives="simulate"`` a kernel's programs run together
(``kernels/collective/simulate.py``).
That run has a sequential equivalent when the kernel is race-free: between two barriers no
program reads what another writes (the simulator checks exactly that), so running the
programs of a group one after another, in grid order, epoch by epoch, gives the same bits as
running them together. This module builds that program, which discharges and lowers like any
other (``pallas_call(..., collectives="simulate").lower(x)``, ``.program(x)``):

1. The body, bound to the grid (``bind_grid``), has one collective ``run_scoped`` at its top
   level; its body is inlined, so the kernel's top level reads: ops, barrier, ops, barrier, ...
   (barriers anywhere else are refused: their epochs are not static).
2. It is cut at the barriers into *segments*, each a function of the grid indices, the block
   refs, the shared allocations and the values it uses from earlier segments (*live-ins*); it
   returns the values later segments use (*live-outs*).
3. The program: the operands' padded buffers as in the loop program; for each group (a loop
   nest over the other grid axes) the shared allocations are allocated once, plus one spill
   buffer per live value with a row per program of the group, and each ``scratch_shapes``
   array with a row per program (a program's own scratch, as under the simulator); then for
   each segment, a loop nest over the collective axes calls it at each program's grid point,
   reading its live-ins from the spill rows and writing its live-outs back.

The shared allocation is one array per group. By default each epoch then runs once for the
whole group, batched over the collective axes (``collective.batched``: the buffers and the
shared allocation one array each, every program's writes scattered into them); an epoch with
no batched form keeps the loop over the group's programs (``batched=False`` asks for the loop
everywhere: same bits, and on XLA:CPU faster for large groups,
bench/benchmarks/collectives_bench.py).
A race the index arithmetic proves (both windows computed from the grid indices alone) is
refused while building it (``collective.races``); any other, the simulator finds (tests run
both and compare bits).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np

from minipallas.frontend.control import call, run_scoped
from minipallas.frontend.refs import TracedRef
from minipallas.frontend.tracing import trace
from minipallas.frontend.values import TracedArray, constant
from minipallas.ir.builder import params
from minipallas.ir.core import Block, Function, Op, Value
from minipallas.ir.dtypes import fill_value
from minipallas.ir.errors import TraceError
from minipallas.ir.kernel_spec import Kernel, TracedBlockSpec
from minipallas.ir.location import user_location
from minipallas.ir.types import ArrayType, RefType, is_semaphore
from minipallas.kernels.collective.batched import batched_epochs, group_indices, run_epoch
from minipallas.kernels.collective.handoffs import handoff_orders
from minipallas.kernels.collective.races import check_static_races
from minipallas.kernels.programs.grid import (
    block_view,
    copy_in,
    fill_scratch,
    loop_nest,
    padded_shape,
    valid_region,
)
from minipallas.kernels.spec.aliases import output_sources
from minipallas.passes.kernel.bind_grid import bind_grid


@dataclass(frozen=True)
class _Segment:
    fn: Function
    live_in: tuple[Value, ...]  # in the bound body, the values it takes from earlier segments
    live_out: tuple[Value, ...]  # the values it gives to later ones


@dataclass(frozen=True, eq=False)
class _Plan:
    """What the program is built from (module doc, steps 1 and 2, and step 3's buffers)."""

    kernel: Kernel
    specs: tuple[TracedBlockSpec, ...]  # the inputs' then the outputs'
    buffers: tuple[RefType, ...]  # each operand's padded buffer
    segments: list[_Segment]
    shared: list[Value]  # the shared allocations, free in the segments
    along: list[int]  # the collective axes' positions in the grid
    others: list[int]  # the other axes': one group per point of theirs
    scratch: tuple[RefType, ...]  # each program's own scratch: a row per program of a group
    spill_types: tuple[RefType, ...]  # a row per program for each value live across a barrier
    row_of: dict[Value, int]  # a live value's spill buffer
    orders: list | None  # semaphore handoffs: each epoch's programs in the order they ask for
    epochs: list | None  # each segment batched over the group, or None to loop

    @property
    def sizes(self) -> list[int]:
        return [self.kernel.grid[a] for a in self.along]


@dataclass(frozen=True, eq=False)
class _Group:
    """One group's refs while its epochs run one program at a time."""

    bufs: Sequence[TracedRef]
    outer: list[TracedArray]  # the group's indices along the other axes
    own: Sequence[TracedRef]  # each program's scratch rows
    shared: Sequence[TracedRef]
    spills: Sequence[TracedRef]


def collective_program(
    kernel: Kernel, grid_names: tuple[str, ...], batched: bool = True
) -> Function:
    """``@<name>_collective(inputs...) -> outputs`` (module doc): each epoch of a group
    batched over the collective axes where it can (``collective.batched``), or with
    ``batched=False`` the group's programs one after another (same bits)."""
    plan = _plan(kernel, grid_names, batched)

    def program(*inputs: TracedArray) -> tuple[TracedArray, ...]:
        return run_scoped(lambda *bufs: _run_groups(plan, inputs, bufs), *plan.buffers)

    return trace(program, *(s.array for s in kernel.in_specs), name=f"{kernel.name}_collective")


def _plan(kernel: Kernel, grid_names: tuple[str, ...], batched: bool) -> _Plan:
    """Steps 1 and 2 of the module doc, the races the index arithmetic proves refused, and
    the types of step 3's buffers."""
    if kernel.scalar_prefetch or kernel.dynamic_axes:
        _refuse(
            "no scalar prefetch or dynamic grids",
            "pass the prefetched scalars as ordinary inputs, and a static grid",
        )
    body = bind_grid(kernel.body, kernel.grid)
    ops, shared, axes, private = _inline_collective_scope(body)
    inside = (o for op in ops for o in (op, *(x for r in op.regions for x in r.walk())))
    used = {v for o in inside for v in o.operands}
    shared = [v for v in shared if v in used or not is_semaphore(v.type)]  # a core_barrier's
    along = [grid_names.index(a) for a in axes]
    fixed = [*body.params, *private]  # grid indices, the block refs, each program's scratch
    segments = _segments(ops, fixed, shared)
    orders = None
    if any(is_semaphore(v.type) for v in shared):
        orders = handoff_orders(kernel, grid_names, along, len(segments))
        batched = False
    _check_races(kernel, segments, along, len(fixed), len(shared))
    specs = (*kernel.in_specs, *kernel.out_specs)
    sizes = tuple(kernel.grid[a] for a in along)
    group_size = int(np.prod(sizes))
    own = (*kernel.scratch_types, *(v.type for v in private))
    scratch = tuple(RefType((group_size, *t.shape), t.dtype, t.memory_space) for t in own)
    buffers = tuple(RefType(padded_shape(s), s.array.dtype, s.memory_space) for s in specs)
    spilled = [v for s in segments for v in s.live_out]
    epochs = None
    if batched:
        n_grid = len(kernel.grid)
        wholes = [
            _on_buffers(seg.fn, specs, buffers, scratch, n_grid, along, sizes) for seg in segments
        ]
        epochs = batched_epochs(wholes, n_grid, along, sizes)
    return _Plan(
        kernel=kernel,
        specs=specs,
        buffers=buffers,
        segments=segments,
        shared=shared,
        along=along,
        others=[a for a in range(len(kernel.grid)) if a not in along],
        scratch=scratch,
        spill_types=tuple(RefType((group_size, *v.type.shape), v.type.dtype) for v in spilled),
        row_of={v: k for k, v in enumerate(spilled)},
        orders=orders,
        epochs=epochs,
    )


def _check_races(
    kernel: Kernel, segments: list[_Segment], along: list[int], n_fixed: int, n_shared: int
) -> None:
    """A race the index arithmetic proves is refused here (``collective.races``)."""
    n_grid = len(kernel.grid)
    group = list(np.ndindex(*(kernel.grid[a] for a in along)))
    for seg in segments:
        ps = seg.fn.params
        check_static_races(seg.fn, ps[:n_grid], ps[n_fixed : n_fixed + n_shared], group, along)


def _run_groups(
    plan: _Plan, inputs: Sequence[TracedArray], bufs: Sequence[TracedRef]
) -> tuple[TracedArray, ...]:
    """Step 3: the buffers filled, each group run, the outputs cut from their buffers."""
    kernel = plan.kernel
    sources = output_sources(kernel)
    for k, (buf, spec) in enumerate(zip(bufs, plan.specs, strict=True)):
        out = k - kernel.num_inputs
        source = inputs[k] if out < 0 else inputs[sources[out]] if out in sources else None
        if source is None:
            buf[...] = fill_value(spec.array.dtype)
        else:  # as the loop program does: padding filled, the array in its place
            copy_in(buf, spec, source)
    others = tuple(kernel.grid[a] for a in plan.others)
    loop_nest(others, [], lambda outer: _run_group(plan, bufs, outer))
    return tuple(
        buf[valid_region(spec)]
        for buf, spec in zip(bufs[kernel.num_inputs :], kernel.out_specs, strict=True)
    )


def _run_group(plan: _Plan, bufs: Sequence[TracedRef], outer: list[TracedArray]) -> None:
    """One group: its shared allocations and scratch rows, then its epochs in turn."""
    shared_types = [v.type for v in plan.shared]
    if plan.epochs is None:

        def looped(*refs: TracedRef) -> None:
            own, rest = refs[: len(plan.scratch)], refs[len(plan.scratch) :]
            group = _Group(bufs, outer, own, rest[: len(plan.shared)], rest[len(plan.shared) :])
            _looped_epochs(plan, group)

        run_scoped(looped, *plan.scratch, *shared_types, *plan.spill_types)
        return
    indices = _merge(outer, plan.others, group_indices(plan.sizes), plan.along)

    def batched(*refs: TracedRef) -> None:
        fill_scratch(refs[: len(plan.scratch)])
        lives: dict[Value, TracedArray] = {}
        for seg, epoch in zip(plan.segments, plan.epochs, strict=True):
            ins = [lives[v] for v in seg.live_in]
            outs = run_epoch(epoch, indices, [*bufs, *refs], ins)
            lives.update(zip(seg.live_out, outs, strict=True))

    run_scoped(batched, *plan.scratch, *shared_types)


def _looped_epochs(plan: _Plan, group: _Group) -> None:
    """Each epoch as a loop over the group's programs, in grid order or in the order of their
    semaphore handoffs."""
    fill_scratch(group.own)
    for number, seg in enumerate(plan.segments):
        step = partial(_program_step, plan, group, seg)
        if plan.orders is None:
            loop_nest(tuple(plan.sizes), [], step)
            continue
        order = constant(np.array(plan.orders[number], np.int32), "int32")
        n_programs = int(np.prod(plan.sizes))
        loop_nest((n_programs,), [], partial(_in_order, step, order, plan.sizes))


def _in_order(step: Callable[[list], None], order: TracedArray, sizes: list[int], k: list) -> None:
    """``step`` for the ``k``-th program of the handoffs' order."""
    step(_unravel(order[k[0]], sizes))


def _program_step(plan: _Plan, group: _Group, seg: _Segment, inner: list[TracedArray]) -> None:
    """One program's epoch: a call of the segment on its blocks, scratch row and spills."""
    indices = _merge(group.outer, plan.others, inner, plan.along)
    row = _row(inner, plan.sizes)
    views = [block_view(b, s, indices) for b, s in zip(group.bufs, plan.specs, strict=True)]
    views += [r.at[row] for r in group.own]
    lives = [group.spills[plan.row_of[v]][row] for v in seg.live_in]
    outs = call(seg.fn, *indices, *views, *group.shared, *lives)
    outs = () if outs is None else outs if isinstance(outs, tuple) else (outs,)
    for v, o in zip(seg.live_out, outs, strict=True):
        group.spills[plan.row_of[v]][row] = o


def _inline_collective_scope(
    body: Function,
) -> tuple[list[Op], list[Value], tuple[str, ...], list[Value]]:
    """The body's top-level ops with its collective ``run_scoped``s inlined, and the
    non-collective ones around them (a kernel's scratch, an imported mesh kernel's
    ``scratch_types``): the shared allocations (now free in the ops), the collective axes, and
    the private allocations, which become each program's own scratch."""
    shared: list[Value] = []
    private: list[Value] = []
    axes: set[tuple[str, ...]] = set()

    def flatten(block_ops: Sequence[Op], sub: dict[Value, Value]) -> list[Op]:
        ops: list[Op] = []
        for op in block_ops:
            op = _substituted(op, sub)
            if not (op.name == "run_scoped" and (_collective(op) or _holds_collective(op))):
                ops.append(op)
                continue
            if _collective(op):
                axes.add(tuple(op.attrs["collective_axes"]))
            (shared if _collective(op) else private).extend(op.param_group("allocs"))
            inner = op.regions[0]
            sub.update(zip(op.param_group("args"), op.group("args"), strict=True))
            ops += flatten(inner.ops, sub)
            sub.update(zip(op.results, (sub.get(v, v) for v in inner.results), strict=True))
        return ops

    ops = flatten(body.body.ops, {})
    if len(axes) != 1:
        _refuse("collective run_scopeds over one set of axes, at the kernel body's top level "
                "(inside non-collective run_scopeds at most)",
                "move the collective run_scoped out of loops and conditionals")  # fmt: skip
    (collective_axes,) = axes
    for op in ops:
        nested = [o for r in op.regions for o in r.walk() if o.name == "barrier" or _collective(o)]
        if nested:
            _refuse("barriers and collective run_scopeds at the top level only",
                    "take the barrier out of loops and conditionals: every program must "
                    "reach it", loc=nested[0].loc)  # fmt: skip
        if op.name == "barrier" and set(op.attrs["axes"]) != set(collective_axes):
            _refuse("barriers over the collective run_scoped's axes only",
                    f"use barrier({collective_axes})", loc=op.loc)  # fmt: skip
    return ops, shared, collective_axes, private


def _holds_collective(op: Op) -> bool:
    return any(o.name == "barrier" or _collective(o) for r in op.regions for o in r.walk())


def _segments(ops: list[Op], fixed: list[Value], shared: list[Value]) -> list[_Segment]:
    pieces: list[list[Op]] = [[]]
    for op in ops:
        if op.name == "barrier":
            pieces.append([])
        else:
            pieces[-1].append(op)
    defined_in = {r: k for k, piece in enumerate(pieces) for op in piece for r in op.results}
    used_in: dict[Value, set[int]] = {}
    for k, piece in enumerate(pieces):
        for op in piece:
            for v in op.operands:
                used_in.setdefault(v, set()).add(k)
    segments = []
    for k, piece in enumerate(pieces):
        live_in = tuple(dict.fromkeys(
            v for op in piece for v in op.operands if defined_in.get(v, k) < k
        ))  # fmt: skip
        live_out = tuple(
            r for op in piece for r in op.results if any(j > k for j in used_in.get(r, ()))
        )
        for v in (*live_in, *live_out):
            if not isinstance(v.type, ArrayType):
                _refuse("arrays only across a barrier", "recompute the ref view after the barrier",
                        loc=piece[0].loc if piece else None)  # fmt: skip
        outer = [*fixed, *shared, *live_in]
        fresh = params([v.type for v in outer])
        sub = dict(zip(outer, fresh, strict=True))
        block = Block(tuple(fresh), tuple(_substituted(op, sub) for op in piece), live_out)
        segments.append(_Segment(Function(f"epoch{k}", block), live_in, live_out))
    return segments


def _on_buffers(
    seg: Function,
    specs: Sequence[TracedBlockSpec],
    buffers: Sequence[RefType],
    scratch: Sequence[RefType],
    n_grid: int,
    along: Sequence[int],
    sizes: Sequence[int],
) -> Function:
    """``seg`` taking the whole buffers instead of its block refs and cutting its block views
    itself (``block_view``; a program's scratch is its row of the group's), inline: so a write
    into a block is a write into the buffer where it happens, under its condition if it has one
    (a call would write the block back whole)."""
    n_refs = len(specs) + len(scratch)

    def whole(*args: object) -> object:
        grid, bufs = list(args[:n_grid]), args[n_grid : n_grid + n_refs]
        views = [block_view(b, s, grid) for b, s in zip(bufs[: len(specs)], specs, strict=True)]
        row = _row([grid[a] for a in along], list(sizes))
        views += [r.at[row] for r in bufs[len(specs) :]]
        return call(seg, *grid, *views, *args[n_grid + n_refs :])

    types = [p.type for p in seg.params]
    traced = trace(whole, *types[:n_grid], *buffers, *scratch, *types[n_grid + n_refs :],
                   name=seg.name)  # fmt: skip
    sub: dict[Value, Value] = {}
    ops: list[Op] = []
    for op in traced.body.ops:
        op = _substituted(op, sub)
        if op.name == "call" and op.attrs["callee"] is seg:  # its body, in its place
            inner = dict(zip(seg.body.params, op.operands, strict=True))
            ops += [_substituted(o, inner) for o in seg.body.ops]
            sub.update(zip(op.results, (inner.get(v, v) for v in seg.body.results),
                           strict=True))  # fmt: skip
        else:
            ops.append(op)
    results = tuple(sub.get(v, v) for v in traced.body.results)
    return Function(seg.name, Block(traced.body.params, tuple(ops), results))


def _substituted(op: Op, sub: dict[Value, Value]) -> Op:
    """``op`` reading ``sub``'s replacements (regions are closed: only its operands change)."""
    operands = tuple(sub.get(v, v) for v in op.operands)
    if operands == op.operands:
        return op
    return Op(op.name, operands, op.results, op.attrs, op.regions, op.loc)


def _collective(op: Op) -> bool:
    return op.name == "run_scoped" and bool(op.attrs.get("collective_axes"))


def _merge(outer: list, others: list[int], inner: list, along: list[int]) -> list:
    indices = [None] * (len(others) + len(along))
    for a, i in zip(others, outer, strict=True):
        indices[a] = i
    for a, i in zip(along, inner, strict=True):
        indices[a] = i
    return indices


def _unravel(row: TracedArray, sizes: list[int]) -> list[TracedArray]:
    """The grid indices along the collective axes of the program numbered ``row``."""
    inner = []
    for k in range(len(sizes)):
        stride = int(np.prod(sizes[k + 1 :]))
        inner.append((row // stride) % sizes[k])
    return inner


def _row(inner: list[TracedArray], sizes: list[int]) -> TracedArray | int:
    """The program's row-major number within its group."""
    row: TracedArray | int = 0
    for i, n in zip(inner, sizes, strict=True):
        row = row * n + i
    return row


def _refuse(what: str, fix: str, loc: object = None) -> None:
    raise TraceError(
        f"a collective kernel becomes one program with {what}",
        op="pallas_call",
        loc=loc or user_location(),
        fix=f"{fix}; or run it in the multi-program interpreter (call the pallas_call)",
    )
