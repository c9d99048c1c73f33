"""A sequential grid axis that only accumulates, summed at once (``match_upstream=False``).

A blocked matmul's k axis, a reduction's grid axis: the body carries state (an accumulator in
scratch, a resident output block) from point to point along the axis, and each point only
adds to it, resets it or copies it:

    @when(k == 0): acc = 0
    acc += dot(x_ref, y_ref)
    @when(k == last): o = acc

Run as a loop, XLA does a small dot a step and moves the accumulator each time. Summed at
once, the adds of all steps are one reduction over the axis, and a sum of dots over it is one
dot contracting over it: the whole matmul is one 1024×1024×1024 dot, as ``jax.jit`` runs it.
That reorders float sums, so only the fast mode does it; ``accumulated_program`` returns
None for any other body, and the caller builds its loops.

1. Steps by kind. The conds at the body's top level whose index the step alone decides are
   evaluated at every step (``known_scalars``); steps taking the same branches share a *kind*,
   whose body has those conds folded away (``cleanup`` inlines the branch taken).
2. Each kind's body, per state result, must be: a state parameter (kept or copied), an
   ``add`` of a state parameter and a *term* (a value no state feeds), or a fresh value no
   state feeds (a reset, ``0 + term`` splitting into a base and a term).
3. The steps are followed symbolically: a state is a base (its start, or a fresh value at some
   step) plus *runs*, each a term over consecutive steps. Terms of different kinds that are
   the same function of the grid indices and input blocks (same printed IR) share runs.
4. The program: a run is its term computed at all its steps at once, batched with the grid's
   batched axes (``passes.batching``, fast mode), then summed over the steps; a run whose term
   is a dot becomes one dot contracting over the steps too. Each output is its base plus its
   runs, written once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from minipallas.frontend.control import call
from minipallas.frontend.tracing import trace
from minipallas.frontend.values import TracedArray, emit_array
from minipallas.ir.core import Block, Function, Op, Value
from minipallas.ir.kernel_spec import Kernel
from minipallas.ir.literal import Literal
from minipallas.ir.opdef import OPS
from minipallas.ir.types import ArrayType
from minipallas.kernels.programs.vectorized_grid import (
    grid_plan,
    grid_point,
    known_scalars,
    map_components,
    pure_body,
)
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
from minipallas.passes.batching import NotBatchable, batch
from minipallas.passes.cleanup import cleanup
from minipallas.passes.xla_cpu import XLA_CPU


@dataclass(frozen=True)
class _Term:
    """A value no state feeds, as a function of (grid indices, input blocks)."""

    fn: Function
    key: str  # its printed IR: equal terms of different kinds share runs


@dataclass(frozen=True)
class _Run:
    term: _Term
    start: int
    stop: int


@dataclass(frozen=True)
class _Sum:
    """A state's value: ``base`` (an int: that state's start; else a term at a step) plus
    runs of terms."""

    base: int | tuple[_Term, int]
    runs: tuple[_Run, ...] = ()

    def plus(self, term: _Term, step: int) -> _Sum:
        last = self.runs[-1] if self.runs else None
        if last is not None and last.term.key == term.key and last.stop == step:
            return _Sum(self.base, (*self.runs[:-1], _Run(term, last.start, step + 1)))
        return _Sum(self.base, (*self.runs, _Run(term, step, step + 1)))


@dataclass(frozen=True)
class _Form:
    """What a kind makes of one state: ``source`` (a state) plus ``term``; or, with no
    source, the fresh value ``base`` (None: zero terms' base is the term itself) + ``term``."""

    source: int | None
    term: _Term | None
    base: _Term | None = None


def accumulated_program(
    kernel: Kernel,
    name: str | None = None,
    after_each: Callable[[str, Function], None] | None = None,
) -> Function | None:
    """``@<name>_grid(inputs...) -> outputs`` with the one sequential axis summed at once, or
    None (module doc). ``after_each`` sees the passes that made the pure body
    (``vectorized_grid.pure_body_pipeline``), once the program is sure to be built."""
    plan = grid_plan(kernel)
    if plan is None:
        return None
    grid, n_in, n_grid = kernel.grid, kernel.num_inputs, len(kernel.grid)
    sequential = [a for a in range(n_grid) if a not in plan.batched]
    if len(sequential) != 1 or any(op.moves for op in plan.operands[n_in:]):
        return None
    (axis,) = sequential
    ins = _summed_inputs(kernel, plan, axis)
    stages: list[tuple[str, Function]] = []
    body = pure_body(kernel, plan, lambda stage, fn: stages.append((stage, fn)))
    if (
        ins is None
        or body is None
        or any(OPS[op.name].observable for f in (body, *body.callees()) for op in f.walk())
    ):
        return None
    kinds, steps = _kinds(body, axis, grid[axis])
    forms = {key: _forms(kind, n_grid + n_in) for key, kind in kinds.items()}
    if any(f is None for f in forms.values()):
        return None
    outs = plan.operands[n_in:]
    finals = _follow(forms, steps, len(outs) + len(kernel.scratch_types))[: len(outs)]
    if any(isinstance(s.base, int) and s.base != k for k, s in enumerate(finals)):
        return None  # an output copied from another state's start (uninitialized scratch)
    summed = Plan((*plan.batched, axis), ())
    try:
        built = {
            (k, run.term.key, run.stop - run.start): _batched_term(
                run, kernel, plan, summed, ins, k
            )
            for k, s in enumerate(finals)
            for run in _runs(s)
        }
    except NotBatchable:
        return None
    sources = output_sources(kernel)
    for stage, fn in stages if after_each else ():
        after_each(stage, fn)

    def program(*inputs: TracedArray) -> tuple[TracedArray, ...]:
        buffers = [paired(x, op) for x, op in zip(inputs, ins, strict=True)]
        origin = grid_point(grid, [], [])
        results = []
        for k, (s, op) in enumerate(zip(finals, outs, strict=True)):
            start = (
                paired(inputs[sources[k]], op)
                if k in sources
                else filled(op.pairs, op.spec.array.dtype)
            )
            value = None if not isinstance(s.base, int) else read_window(start, op, grid, origin)
            for run in _runs(s):
                built_run = built[k, run.term.key, run.stop - run.start]
                term = _evaluate(built_run, run, buffers, ins, grid, axis)
                value = term if value is None else emit_array("add", [value, term])
            results.append(unpaired(write_window(start, value, op, grid, origin), op))
        return tuple(results)

    name = f"{kernel.name}_grid" if name is None else name
    return trace(program, *(s.array for s in kernel.in_specs), name=name)


def _runs(s: _Sum) -> tuple[_Run, ...]:
    """The base (when it is a term) as a run of one step, then the runs."""
    if isinstance(s.base, int):
        return s.runs
    term, step = s.base
    return (_Run(term, step, step + 1), *s.runs)


# ----- 1. steps by kind -----


def _kinds(body: Function, axis: int, n: int) -> tuple[dict[tuple, Function], list[tuple]]:
    """Each kind's body (the decided conds' indices made constants, then cleaned: inlined),
    and each step's kind: the branches its top-level conds take (-1: not decided by it)."""
    conds = [op for op in body.body.ops if op.name == "cond"]
    kinds: dict[tuple, Function] = {}
    steps = []
    for step in range(n):
        known_args: list = [None] * len(body.params)
        known_args[axis] = np.int32(step)
        known = known_scalars(body.body, known_args)
        key = tuple(
            min(max(int(known[op.operands[0]]), 0), len(op.regions) - 1)
            if op.operands[0] in known
            else -1
            for op in conds
        )
        steps.append(key)
        if key not in kinds:
            kinds[key] = _specialized(body, dict(zip(conds, key, strict=True)))
    return kinds, steps


def _specialized(body: Function, taken: dict[Op, int]) -> Function:
    ops: list[Op] = []
    for op in body.body.ops:
        if taken.get(op, -1) >= 0:
            index = op.operands[0]
            literal = Literal.of(taken[op], index.type.dtype)
            fixed = Op("constant", (), (Value(index.type),), {"value": literal}, (), op.loc)
            ops.append(fixed)
            op = Op(op.name, (fixed.results[0], *op.operands[1:]), op.results, op.attrs,
                    op.regions, op.loc)  # fmt: skip
        ops.append(op)
    return cleanup(Function(body.name, Block(body.params, ops, body.body.results)))


# ----- 2. what a kind does to each state -----


def _forms(kind: Function, n_fixed: int) -> list[_Form] | None:
    """Per state result: kept, ``state + term`` or fresh (module doc, 2); None otherwise."""
    params, ops = kind.params, kind.body.ops
    state = {p: k for k, p in enumerate(params[n_fixed:])}
    fed = set(state)
    producer: dict[Value, Op] = {}
    for op in ops:
        producer.update((r, op) for r in op.results)
        if any(v in fed for v in op.operands):
            fed.update(op.results)

    def term(v: Value) -> _Term:
        fn = cleanup(Function("term", Block(params[:n_fixed], _slice(ops, v), (v,))))
        return _Term(fn, str(fn))

    forms: list[_Form] = []
    for r in kind.body.results:
        op = producer.get(r)
        parts = op.operands if op is not None and op.name == "add" else ()
        if r in state:
            forms.append(_Form(state[r], None))
        elif r not in fed:
            constants = [v for v in parts if v in producer and producer[v].name == "constant"]
            if constants:  # a reset and a first term: 0 + dot(...)
                other = parts[1] if parts[0] is constants[0] else parts[0]
                forms.append(_Form(None, term(other), term(constants[0])))
            else:
                forms.append(_Form(None, term(r)))
        elif len(parts) == 2 and (parts[0] in state) != (parts[1] in state):
            source, other = parts if parts[0] in state else parts[::-1]
            if other in fed:
                return None
            forms.append(_Form(state[source], term(other)))
        else:
            return None
    return forms


def _slice(ops: Sequence[Op], value: Value) -> list[Op]:
    """The ops ``value`` depends on, in order."""
    needed = {value}
    kept = []
    for op in reversed(ops):
        if any(r in needed for r in op.results):
            kept.append(op)
            needed.update(op.operands)
    return kept[::-1]


# ----- 3. the steps, followed -----


def _follow(forms: dict[tuple, list[_Form]], steps: Sequence[tuple], n_state: int) -> list[_Sum]:
    now = [_Sum(k) for k in range(n_state)]
    for step, key in enumerate(steps):
        new = []
        for form in forms[key]:
            if form.source is not None:
                s = now[form.source]
                new.append(s if form.term is None else s.plus(form.term, step))
            elif form.base is None:
                new.append(_Sum((form.term, step)))
            else:
                new.append(_Sum((form.base, step)).plus(form.term, step))
        now = new
    return now


# ----- 4. the program -----


def _summed_inputs(kernel: Kernel, plan: Plan, axis: int) -> list[Operand] | None:
    """The inputs' operands with the summed axis batched where it is a block index; None
    when a block index is computed from it (each step would need a gather)."""
    operands = []
    for spec, op in zip(kernel.in_specs, plan.operands[: kernel.num_inputs], strict=True):
        comps = map_components(spec.index_map)
        if any(isinstance(c, frozenset) and axis in c for c in comps) or comps.count(axis) > 1:
            return None
        counts = op.pairs[0::2]
        if any(c == axis and kernel.grid[axis] > n for c, n in zip(comps, counts, strict=True)):
            return None  # more steps than blocks: the last block is clamped and revisited
        dims = tuple(axis if c == axis else a for c, a in zip(comps, op.axis_of_dim, strict=True))
        operands.append(Operand(spec, dims, op.moves))
    return operands


@dataclass(frozen=True)
class _Batched:
    """A term batched over the grid's batched axes and its steps (the steps leading, then
    the output's window layout); ``dot``: the function giving the operands of its last dot
    and the dot's attributes, when the steps can be contracted into that dot."""

    fn: Function
    dot: tuple[Function, dict] | None


def _batched_term(
    run: _Run, kernel: Kernel, plan: Plan, summed: Plan, ins: list[Operand], out: int
) -> _Batched:
    grid, steps = kernel.grid, run.stop - run.start
    grid_layouts = [(summed.batched.index(a),) for a in range(len(grid))]
    layouts = [*grid_layouts, *(window_layout(op, summed) for op in ins)]
    wanted = (len(plan.batched), *window_layout(plan.operands[kernel.num_inputs + out], plan))
    sizes = (*plan.sizes(grid), steps)
    fn, _ = batch(run.term.fn, layouts, sizes, [wanted], exact=False, policy=XLA_CPU)
    return _Batched(fn, _last_dot(fn, steps))


def _last_dot(fn: Function, steps: int) -> tuple[Function, dict] | None:
    """When ``fn`` ends in ``reshape(dot(a, b))`` with the steps as the dot's one batch
    dimension: the function giving ``(a, b)``, and the dot's attributes."""
    producer = {r: op for op in fn.body.ops for r in op.results}
    (result,) = fn.body.results
    reshape = producer.get(result)
    dot = producer.get(reshape.operands[0]) if reshape and reshape.name == "reshape" else None
    if dot is None or dot.name != "dot" or dot.operands[0].type.ndim != 3:
        return None
    if dot.operands[0].type.shape[0] != steps or result.type.shape[0] != steps:
        return None
    operands = Function("operands", Block(fn.params, fn.body.ops, dot.operands))
    return cleanup(operands), dict(dot.attrs)


def _evaluate(
    built: _Batched,
    run: _Run,
    buffers: list[TracedArray],
    ins: list[Operand],
    grid: Sequence[int],
    axis: int,
) -> TracedArray:
    """The run's term at its steps, summed over them, in the output's window layout."""
    steps = run.stop - run.start
    origin = grid_point(grid, [], [])
    spans = {axis: (run.start, steps)}
    windows = [read_window(b, op, grid, origin, spans) for b, op in zip(buffers, ins, strict=True)]
    ids = [_iota(steps, run.start) if a == axis else _iota(n, 0) for a, n in enumerate(grid)]
    if built.dot is not None and steps > 1:
        operands, attrs = built.dot
        a, b = call(operands, *ids, *windows)
        (_, m, k), n = a.shape, b.shape[-1]
        a = emit_array("transpose", [a], permutation=(1, 0, 2)).reshape(m, steps * k)
        product = emit_array("dot", [a, b.reshape(steps * k, n)], **attrs)
        return product.reshape(*built.fn.result_types[0].shape[1:])
    value = call(built.fn, *ids, *windows)
    if steps == 1:
        return value.reshape(*value.shape[1:])
    return emit_array("reduce_sum", [value], axes=(0,))


def _iota(n: int, start: int) -> TracedArray:
    iota = emit_array("iota", [], type=ArrayType((n,), "int32"), dimension=0)
    return iota if not start else iota + start
