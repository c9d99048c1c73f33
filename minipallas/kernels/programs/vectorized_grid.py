"""The CPU path, vectorized: grid points that cannot see each other run as one batched program.

``grid.grid_program`` runs the grid as loops, one block at a time, as upstream's interpret mode
does; XLA then runs each step's small ops on one thread. Yet on most grids many points are
independent: each writes its own output blocks and reads only inputs. ``vectorized_grid_program``
runs those points together, with the same results bit for bit:

1. Plan (``_plan``). A grid axis is *batched* when every output's index map returns that grid
   index itself as the block index of exactly one dimension (so distinct points along the axis
   write distinct blocks) and no index map uses the axis in any other way (so the blocks of all
   points are a static slice). The other axes stay *sequential*, looped in row-major order as
   before. The body must not write its inputs (a later point could read the write). Scratch
   persists across the whole grid, so with scratch the batched axes must come first and the
   body, at the first point of every sequential sweep (sequential indices 0), must not read
   what scratch held (``_live_params``): then each batch point can have its own copy.
2. Body. The kernel body goes through the registered passes
   ``bind-grid{grid=...},discharge,cleanup,drop-inputs{count=...},cleanup`` (``pure_body``):
   bound to the grid, fully discharged into a pure function of its blocks giving the output
   blocks and scratch, cleaned up; then it is batched over the batched axes
   (``passes.batching``, with the window layouts of 3: the stage ``batch-grid``).
3. Blocks in place (``kernels.programs.windows``). Each operand's padded buffer is viewed as
   ``(blocks, block)`` pairs per dimension, ``(n0, b0, n1, b1, ...)``: a reshape, free in
   memory. The blocks of all batched points are then one window of it: the batched ``n``
   dimensions whole (up to the grid size), the others at the block index the map gives
   (clamped, a negative one counted from the end once, exactly as ``lax.dynamic_slice`` takes
   the element start). The body takes its blocks in that layout (batch axes where they lie)
   and gives its output blocks back in it, so an elementwise kernel becomes elementwise ops on
   its arrays as they are.
4. Program. Outputs (but for those aliased to an input, which start as it) and scratch start
   as the fill value; at each point of the sequential loops
   the windows are read, the batched body runs once, and the output windows are written back.

5. Hoisting (``passes.kernel.hoisting``, the pass ``hoist-invariant``). With sequential
   axes, the part of the body that reads input blocks and no state (a block's sum,
   ``q @ k.T``) is batched over the whole grid and run once before the loops; each step takes
   its point's slice. This needs every input's index map to use each grid axis as a block
   index or not at all; then a grid with no batched axis (a 1-D accumulation) gets a program
   too.
6. Unrolling (``kernels.programs.unrolling``). The innermost sequential loop runs several
   steps per trip, traced one after another (all of them when there are few: a blocked
   matmul's k-steps), when its steps do much work or only elementwise work: XLA then runs the
   steps' independent dots side by side, or fuses their elementwise ops.

``after_each(stage, fn)`` sees each stage once the program is sure to be built: the passes of
2 by name, ``hoist-invariant`` when it hoisted, and ``batch-grid`` (the batched body).

Returns None when the plan finds no batched axis and nothing to hoist, or the body has no
batched form; the caller then uses the loop program.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from minipallas.frontend.control import call, fori_loop
from minipallas.frontend.tracing import trace
from minipallas.frontend.values import (
    TracedArray,
    broadcast_to,
    constant,
    emit_array,
)
from minipallas.ir.core import Block, Function, Value
from minipallas.ir.errors import MiniPallasError
from minipallas.ir.indexing import Dyn, Int, Slice
from minipallas.ir.interpret.engine import RULES, Interpreter
from minipallas.ir.kernel_spec import Kernel
from minipallas.ir.opdef import OPS
from minipallas.ir.types import ArrayType, initial_value
from minipallas.kernels.programs.unrolling import unroll
from minipallas.kernels.programs.windows import (
    Operand,
    Plan,
    filled,
    paired,
    read_window,
    unpaired,
    window_layout,
    write_window,
)
from minipallas.kernels.spec.aliases import output_sources
from minipallas.passes.batching import Layout, NotBatchable, batch, leading
from minipallas.passes.kernel.hoisting import parts
from minipallas.passes.pipeline import run
from minipallas.passes.xla_cpu import XLA_CPU

AfterEach = Callable[[str, Function], None]


@dataclass(frozen=True)
class _Hoisted:
    """The body's stateless part batched over the whole grid (``pre``: grid indices and input
    windows in, results in the layouts its ops give them, batch axis ``a`` being grid axis
    ``a``), and the inputs' whole-grid windows."""

    pre: Function
    operands: tuple[Operand, ...]
    layouts: tuple[Layout, ...]  # of pre's results: where each grid axis lies, as the ops left it


def vectorized_grid_program(
    kernel: Kernel,
    name: str | None = None,
    exact: bool = True,
    after_each: AfterEach | None = None,
) -> Function | None:
    """``@<name>_grid(inputs...) -> outputs`` with independent grid points batched, or None
    (module doc). ``exact=False`` batches float reductions and dots too (``batching.batch``):
    results then equal the loop program's only to rounding."""
    built = _batched_body(kernel, exact, after_each)
    if built is None:
        return None
    plan, batched_body, hoisted, scratch_layouts = built
    grid, n_in = kernel.grid, kernel.num_inputs
    sizes = plan.sizes(grid)
    sequential = [a for a in range(len(grid)) if a not in plan.batched]
    ins, outs = plan.operands[:n_in], plan.operands[n_in:]
    sources = output_sources(kernel)

    def program(*inputs: TracedArray) -> tuple[TracedArray, ...]:
        buffers = [paired(x, op) for x, op in zip(inputs, ins, strict=True)]
        state = [  # an aliased output starts as its input (kernels/spec/aliases.py)
            paired(inputs[sources[k]], op)
            if k in sources
            else filled(op.pairs, op.spec.array.dtype)
            for k, op in enumerate(outs)
        ]
        state += [
            broadcast_to(constant(initial_value(t), t.dtype), layout_shape(layout, sizes, t.shape))
            for t, layout in zip(kernel.scratch_types, scratch_layouts, strict=True)
        ]
        first = grid_point(grid, [], [])
        still = {  # the windows that do not move along the sequential axes, read once
            k: read_window(buf, op, grid, first)
            for k, (buf, op) in enumerate(zip(buffers, ins, strict=True))
            if not op.moves
        }
        before = _run_pre(hoisted, grid, buffers, first) if hoisted else []
        # An unrolled step's index is a constant, and with it XLA would fold float arithmetic
        # in the body that upstream's loop, where the index is a loop variable, keeps
        # (``(x + 1.0) - 1.0`` to ``x``): the body gets it through an optimization barrier. The
        # windows' index maps, integer arithmetic, fold as they may.
        trip = unroll(batched_body)

        def step(indices: list[TracedArray], state: list[TracedArray]) -> list[TracedArray]:
            point = grid_point(grid, sequential, indices)
            blocks = [
                still[k] if k in still else read_window(buf, op, grid, point)
                for k, (buf, op) in enumerate(zip(buffers, ins, strict=True))
            ]
            extra = [
                _at(v, layout, sequential, indices)
                for v, layout in zip(before, hoisted.layouts if hoisted else (), strict=True)
            ]
            out_buffers, held = state[: len(outs)], state[len(outs) :]
            out_blocks = [
                read_window(buf, op, grid, point) for buf, op in zip(out_buffers, outs, strict=True)
            ]
            seen = indices
            if trip > 1:
                seen = [emit_array("optimization_barrier", [i]) for i in indices]
            ids = _grid_indices(grid, plan, sequential, seen)
            results = call(batched_body, *ids, *blocks, *out_blocks, *held, *extra)
            results = list(results) if isinstance(results, tuple) else [results]
            written = [
                write_window(buf, r, op, grid, point)
                for buf, r, op in zip(out_buffers, results[: len(outs)], outs, strict=True)
            ]
            return [*written, *results[len(outs) :]]

        steps = [grid[a] for a in sequential]
        state = _loop_nest(steps, [], state, step, trip)
        return tuple(unpaired(buf, op) for buf, op in zip(state[: len(outs)], outs, strict=True))

    name = f"{kernel.name}_grid" if name is None else name
    return trace(program, *(s.array for s in kernel.in_specs), name=name)


def vectorized_grid_plan(kernel: Kernel, exact: bool = True) -> tuple[int, ...] | None:
    """The grid axes ``vectorized_grid_program`` batches (None: it makes no program; ``()``:
    it batches none, only the hoisted part of the body)."""
    built = _batched_body(kernel, exact)
    return None if built is None else built[0].batched


def vectorized_grid_hoists(kernel: Kernel, exact: bool = True) -> bool:
    """Whether ``vectorized_grid_program`` runs part of the body before the loops (hoisting)."""
    built = _batched_body(kernel, exact)
    return built is not None and built[2] is not None


def _batched_body(
    kernel: Kernel, exact: bool, after_each: AfterEach | None = None
) -> tuple[Plan, Function, _Hoisted | None, tuple[Layout, ...]] | None:
    """The plan, the body (or, hoisting, its stateful part) batched over its axes taking and
    giving blocks in place, the hoisted part, and the layouts of the batched scratch arrays;
    ``after_each`` sees the stages that made them, once all are made."""
    plan = grid_plan(kernel)
    if plan is None:
        return None
    stages: list[tuple[str, Function]] = []
    body = pure_body(kernel, plan, lambda name, fn: stages.append((name, fn)))
    if body is None or any(
        OPS[op.name].observable for f in (body, *body.callees()) for op in f.walk()
    ):
        return None  # a debug_print runs once per grid point, as in upstream's interpret mode
    hoisted, extra = None, []
    built = _hoist(kernel, plan, body, exact)
    if built is not None:
        stages.append(("hoist-invariant", built[0]))
        body, hoisted = built[1], built[2]
        extra = [_at_layout(layout, plan) for layout in hoisted.layouts]
    elif not plan.batched:
        return None
    n_in, sizes = kernel.num_inputs, plan.sizes(kernel.grid)
    windows = [window_layout(op, plan) for op in plan.operands]
    grid_layouts = [
        (plan.batched.index(a),) if a in plan.batched else () for a in range(len(kernel.grid))
    ]

    def batched_with(scratch: Sequence[Layout]) -> Function:
        layouts = [*grid_layouts, *windows, *scratch, *extra]
        return batch(body, layouts, sizes, [*windows[n_in:], *scratch], exact, policy=XLA_CPU)[0]

    try:
        scratch = [leading(sizes, t.ndim) for t in kernel.scratch_types]
        batched = batched_with(scratch)
        for k, t in enumerate(kernel.scratch_types):
            for layout in _scratch_candidates(t, windows[n_in:], plan.operands[n_in:]):
                tried = [*scratch[:k], layout, *scratch[k + 1 :]]
                other = batched_with(tried)
                if _transposed_elements(other) < _transposed_elements(batched):
                    scratch, batched = tried, other
    except NotBatchable:
        return None
    for name, fn in [*stages, ("batch-grid", batched)] if after_each else ():
        after_each(name, fn)
    return plan, batched, hoisted, tuple(scratch)


def _scratch_candidates(
    t: ArrayType, windows: Sequence[Layout], outs: Sequence[Operand]
) -> list[Layout]:
    """Other layouts a batched scratch array could have than batch axes leading: those of
    the output windows whose blocks have its shape. An accumulator kept as its output's blocks
    lie needs no transpose at each step, nor when it is written out (a blocked matmul's)."""
    found = []
    for layout, op in zip(windows, outs, strict=True):
        block = tuple(b for b in op.spec.block_shape if b is not None)
        if block == t.shape and layout not in found:
            found.append(layout)
    return found


def _transposed_elements(fn: Function) -> int:
    """How many elements the program's transposes move: the cost a layout choice changes."""
    return sum(
        math.prod(op.result.type.shape)
        for f in (fn, *fn.callees())
        for op in f.walk()
        if op.name == "transpose"
    )


def layout_shape(layout: Layout, sizes: Sequence[int], shape: Sequence[int]) -> tuple[int, ...]:
    """The shape of a batched value in ``layout``: batch axes' sizes and its own dimensions."""
    own = iter(shape)
    return tuple(next(own) if d is None else sizes[d] for d in layout)


def _hoist(
    kernel: Kernel, plan: Plan, body: Function, exact: bool
) -> tuple[Function, Function, _Hoisted] | None:
    """The body as ``hoist-invariant`` splits it, its stateful rest and its hoisted part
    (module doc, 5), or None."""
    grid, n_in = kernel.grid, kernel.num_inputs
    if len(plan.batched) == len(grid):
        return None  # no loop to hoist out of
    split = run(body, f"hoist-invariant{{grid={_sizes_text(grid)},inputs={n_in}}}")
    cut = parts(split)
    if cut is None:
        return None
    operands = []
    for spec in kernel.in_specs:
        comps = map_components(spec.index_map)
        counts = Operand(spec, (None,) * len(comps)).pairs[0::2]
        axes = [c for c in comps if isinstance(c, int)]
        if len(set(axes)) < len(axes) or any(isinstance(c, frozenset) and c for c in comps):
            return None  # a diagonal, or a block index computed from the grid indices
        if any(isinstance(c, int) and grid[c] > n for c, n in zip(comps, counts, strict=True)):
            return None  # more points than blocks: clamped blocks, revisited
        operands.append(Operand(spec, tuple(c if isinstance(c, int) else None for c in comps)))
    whole = Plan(tuple(range(len(grid))), ())
    layouts = [(a,) for a in range(len(grid))] + [window_layout(op, whole) for op in operands]
    try:
        pre, results = batch(cut.pre, layouts, grid, None, exact, policy=XLA_CPU)
    except NotBatchable:
        return None
    return split, cut.post, _Hoisted(pre, tuple(operands), results)


# ----- 1. the plan -----


def grid_plan(kernel: Kernel) -> Plan | None:
    grid, n_in = kernel.grid, kernel.num_inputs
    if not grid or 0 in grid:
        return None
    specs = (*kernel.in_specs, *kernel.out_specs)
    components = [map_components(s.index_map) for s in specs]
    counts = [Operand(s, (None,) * len(s.block_shape)).pairs[0::2] for s in specs]

    def batchable(a: int) -> bool:
        for k, comps in enumerate(components):
            identities = [j for j, c in enumerate(comps) if c == a]
            if len(identities) != 1 if k >= n_in else len(identities) > 1:
                return False  # an output revisited along a, or a diagonal of an input
            if any(isinstance(c, frozenset) and a in c for c in comps):
                return False  # a block index computed from a: each point would need a gather
            if any(grid[a] > counts[k][j] for j in identities):
                return False  # more points than blocks: the last block is clamped and revisited
        return True

    batched = [a for a in range(len(grid)) if batchable(a)]
    if kernel.scratch_types:  # scratch persists: only a leading run of axes can be batched
        batched = [a for a in range(len(grid)) if all(b in batched for b in range(a + 1))]
    sequential = {a for a in range(len(grid)) if a not in batched}

    def moves(comps: list[int | frozenset[int]]) -> bool:
        return any(
            c in sequential if isinstance(c, int) else bool(c & sequential)
            for c in comps
            if c not in batched
        )

    operands = tuple(
        Operand(s, tuple(c if c in batched else None for c in comps), moves(comps))
        for s, comps in zip(specs, components, strict=True)
    )
    return Plan(tuple(batched), operands)


def map_components(index_map: Function) -> list[int | frozenset[int]]:
    """For each block index the map returns: the grid axis it is (when it is a grid index
    itself), else the grid axes it is computed from."""
    position = {p: k for k, p in enumerate(index_map.params)}
    depends: dict[Value, frozenset[int]] = {p: frozenset({k}) for p, k in position.items()}
    for op in index_map.body.ops:
        used = frozenset().union(*(depends.get(v, frozenset()) for v in op.operands))
        depends.update((r, used) for r in op.results)
    return [position.get(v, depends.get(v, frozenset())) for v in index_map.body.results]


# ----- 2. the body -----


def pure_body_pipeline(kernel: Kernel) -> str:
    """The registered passes that make a kernel's body a pure function of its blocks."""
    grid, n_in = _sizes_text(kernel.grid), kernel.num_inputs
    return f"bind-grid{{grid={grid}}},discharge,cleanup,drop-inputs{{count={n_in}}},cleanup"


def pure_body(kernel: Kernel, plan: Plan, after_each: AfterEach | None = None) -> Function | None:
    """The bound body as a pure function of (grid indices, blocks, scratch) returning the
    output blocks and scratch (``pure_body_pipeline``), or None if it writes an input or may
    read stale scratch."""
    grid = kernel.grid
    try:
        body = run(kernel.body, pure_body_pipeline(kernel), after_each=after_each)
    except MiniPallasError:  # collective axes, a written input: the loop program takes it
        return None
    if kernel.scratch_types:
        known = [None if a in plan.batched else np.int32(0) for a in range(len(grid))]
        known += [None] * (len(body.params) - len(grid))
        live = _live_params(body.body, known, [True] * len(body.body.results))
        if any(live[len(body.params) - len(kernel.scratch_types) :]):
            return None
    return body


def _live_params(
    block: Block, known_args: Sequence[Any], live_results: Sequence[bool]
) -> list[bool]:
    """Which parameters the live results depend on, when the parameters given in
    ``known_args`` have those values: scalar ops on known values are evaluated (by the
    reference interpreter's rules), and a ``cond`` whose index is known depends only on the
    branch it takes. Everything else depends on all its operands."""
    known = known_scalars(block, known_args)
    live = {v for v, keep in zip(block.results, live_results, strict=True) if keep}
    for op in reversed(block.ops):
        wanted = [r in live for r in op.results]
        if not any(wanted):
            continue
        index = op.operands[0] if op.name == "cond" else None
        if index is not None and index in known:
            k = min(max(int(known[index]), 0), len(op.regions) - 1)
            args = op.operands[1:]
            used = _live_params(op.regions[k], [known.get(v) for v in args], wanted)
            live.update(v for v, u in zip(args, used, strict=True) if u)
        else:
            live.update(op.operands)
    return [p in live for p in block.params]


def known_scalars(block: Block, known_args: Sequence[Any]) -> dict[Value, Any]:
    """The values of ``block`` that the parameters given in ``known_args`` (None: unknown)
    decide: theirs, and those of the scalar ops on them, by the reference interpreter's rules."""
    known = {p: x for p, x in zip(block.params, known_args, strict=True) if x is not None}
    interp = Interpreter()
    for op in block.ops:
        if (
            OPS[op.name].pure
            and not op.regions
            and all(v in known for v in op.operands)
            and all(r.type.shape == () for r in op.results)
        ):
            known.update(
                zip(
                    op.results,
                    RULES[op.name](interp, op, [known[v] for v in op.operands]),
                    strict=True,
                )
            )
    return known


def _sizes_text(grid: Sequence[int]) -> str:
    """A static grid as a pass option writes it: ``8x2``."""
    return "x".join(map(str, grid))


# ----- 4. the program -----


def grid_point(
    grid: Sequence[int], sequential: Sequence[int], indices: Sequence[TracedArray]
) -> list[TracedArray]:
    """Grid indices for the index maps: the sequential ones, and 0 for the batched axes (the
    maps use those only as block indices, which ``window_indexer`` takes as slices)."""
    at = dict(zip(sequential, indices, strict=True))
    return [at[a] if a in at else constant(0, "int32") for a in range(len(grid))]


def _run_pre(
    hoisted: _Hoisted, grid: Sequence[int], buffers: Sequence[TracedArray], origin: list
) -> list[TracedArray]:
    """The hoisted part of the body at every grid point, its results with grid axes leading."""
    windows = [
        read_window(b, op, grid, origin) for b, op in zip(buffers, hoisted.operands, strict=True)
    ]
    ids = [emit_array("iota", [], type=ArrayType((n,), "int32"), dimension=0) for n in grid]
    out = call(hoisted.pre, *ids, *windows)
    return list(out) if isinstance(out, tuple) else [out]


def _at(
    value: TracedArray,
    layout: Layout,
    sequential: Sequence[int],
    indices: Sequence[TracedArray],
) -> TracedArray:
    """A hoisted result (in ``layout`` over the grid axes) at the current sequential point:
    its sequential axes indexed, the rest whole, where they lie (``_at_layout``)."""
    entries: list = []
    dyn: list[TracedArray] = []
    for a, n in zip(layout, value.shape, strict=True):
        if a in sequential:
            entries.append(Int(Dyn(len(dyn))))
            dyn.append(indices[sequential.index(a)])
        else:
            entries.append(Slice(0, n, 1))
    if not dyn:
        return value
    return emit_array("dynamic_slice", [value, *dyn], indexer=tuple(entries))


def _at_layout(layout: Layout, plan: Plan) -> Layout:
    """The layout over the batched axes of what ``_at`` takes of a hoisted result."""
    return tuple(
        None if a is None else plan.batched.index(a)
        for a in layout
        if a is None or a in plan.batched
    )


def _grid_indices(
    grid: Sequence[int], plan: Plan, sequential: Sequence[int], indices: Sequence[TracedArray]
) -> list[TracedArray]:
    """The batched body's grid indices: along a batched axis, all of them (an iota); the
    sequential ones as they are."""
    at = dict(zip(sequential, indices, strict=True))
    return [
        emit_array("iota", [], type=ArrayType((grid[a],), "int32"), dimension=0)
        if a in plan.batched
        else at[a]
        for a in range(len(grid))
    ]


def _loop_nest(
    sizes: Sequence[int],
    indices: list[TracedArray],
    state: list[TracedArray],
    step: Callable[[list[TracedArray], list[TracedArray]], list[TracedArray]],
    unroll: int,
) -> list[TracedArray]:
    """``state = step(indices, state)`` at every point of ``sizes``, the last axis innermost,
    ``unroll`` of its steps traced per trip (``unrolling``: all of them when there are no more)."""
    if len(indices) == len(sizes):
        return step(indices, state)

    def body(i: TracedArray, carry: list[TracedArray]) -> list[TracedArray]:
        return _loop_nest(sizes, [*indices, i], carry, step, unroll)

    inner = len(indices) == len(sizes) - 1
    return list(fori_loop(0, sizes[len(indices)], body, state, unroll=unroll if inner else None))
