"""The order of a collective kernel's programs that its semaphore handoffs ask for.

Between two barriers, programs may still hand data to each other through semaphores: core 0
writes a tile into shared memory and signals core 1's semaphore; core 1 waits on it, then
reads (upstream's ``pl.semaphore_signal(sem, 1, core_index=1)``). The pure program
(``collective.program``) runs a group's programs one after another in each epoch, so such a
kernel has a sequential equivalent when the programs can be ordered so that every program runs
after those whose signals it waits for: run in that order, a race-free program reads what the
simulator lets it read, and a wait (counter arithmetic once discharged) finds its signals
there. This module finds that order, per epoch:

1. The semaphore traffic must not depend on data: every semaphore op's operands (which
   semaphore, how much), and the conditions and bounds of the conditionals and loops around it,
   are computed from the grid indices and constants alone (``_data_free``); else the order
   could change with the inputs, and the kernel is refused.
2. So one run of the multi-program interpreter, on inputs of the right shapes (zeros), shows
   every program's signals and waits (``Programs.events``): which program signals which
   semaphore in which epoch (the barriers it has passed), and which program waits on it.
3. A wait of program ``p`` on a semaphore that program ``q`` signals in the same epoch orders
   ``q`` before ``p``. The order is a topological sort of those edges (ties in grid order);
   a cycle (a ring in which every program signals, then waits for its neighbour) has none,
   and the kernel is refused: it needs its programs to run together (the simulator).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from minipallas.ir.core import Block, Function, Op, Value
from minipallas.ir.dtypes import to_numpy
from minipallas.ir.effects import region_operand_map
from minipallas.ir.errors import TraceError
from minipallas.ir.interpret.engine import Ref
from minipallas.ir.interpret.programs import Programs
from minipallas.ir.kernel_spec import Kernel
from minipallas.ir.location import user_location
from minipallas.ir.opdef import OPS, READ
from minipallas.kernels.collective.simulate import buffers, programs_function

SEMAPHORE_OPS = ("semaphore_signal", "semaphore_wait")


def handoff_orders(
    kernel: Kernel, grid_names: tuple[str, ...], along: Sequence[int], epochs: int
) -> list[list[int]]:
    """Per epoch, the group's programs (row-major numbers along ``along``) in an order that
    puts every signal before the waits it serves (module doc); a ``TraceError`` when the
    semaphore traffic depends on data or its edges form a cycle."""
    _data_free(kernel.body)
    events = _events(kernel, grid_names)
    sizes = [kernel.grid[a] for a in along]
    group = int(np.prod(sizes))
    orders = []
    for epoch in range(epochs):
        after: dict[int, set[int]] = {r: set() for r in range(group)}  # row -> rows before it
        signals: dict[tuple, set[int]] = {}
        for ids, e, kind, key in events:
            if e != epoch:
                continue
            row = int(np.ravel_multi_index([ids[a] for a in along], sizes))
            if kind == "signal":
                signals.setdefault(key, set()).add(row)
            else:
                after[row] |= signals.get(key, set()) - {row}
        orders.append(_topological(after))
    return orders


def _topological(after: dict[int, set[int]]) -> list[int]:
    order: list[int] = []
    done: set[int] = set()
    while len(order) < len(after):
        ready = [r for r in sorted(after) if r not in done and after[r] <= done]
        if not ready:
            cycle = sorted(r for r in after if r not in done)
            raise TraceError(
                f"a collective kernel whose programs {cycle} wait for each other's semaphore "
                "signals in a cycle has no one-program form",
                loc=user_location(),
                fix="run it in the multi-program interpreter (collectives='simulate'), or "
                "meet at a barrier (pltpu.core_barrier) instead of a ring of signals",
            )
        order.append(ready[0])
        done.add(ready[0])
    return order


def _events(kernel: Kernel, grid_names: tuple[str, ...]) -> list[tuple]:
    """Every signal and wait of one simulated run on zeros: ``(program ids, epoch, kind,
    semaphore)``, the epoch being the number of barriers the program has passed."""
    zeros = [np.zeros(s.array.shape, to_numpy(s.array.dtype)) for s in kernel.in_specs]
    arrays = buffers(kernel, zeros)

    run = Programs(tuple(kernel.grid), grid_names, "lockstep", detect_races=False)
    run.events = []
    run.run(programs_function(kernel), [Ref(a, None) for a in arrays])
    return run.events


def _data_free(body: Function) -> None:
    """Refuses a semaphore op whose operands, or whose enclosing conditionals' and loops'
    conditions and bounds, depend on what memory holds (module doc, step 1). A value is *data*
    when an op that reads memory makes it, or it is computed from data; a loop's carry is data
    when its start or what the body makes of it is (found by iterating to a fixed point)."""
    _visit(body.body, set(), False, check=True)


def _visit(block: Block, data: set[Value], controlled: bool, check: bool) -> set[Value]:
    """``data`` grown by the values of ``block`` that depend on memory; with ``check``, a
    semaphore op chosen or controlled by data raises."""
    for op in block.ops:
        chosen = any(v in data for v in op.operands)  # an array, or a view data picked
        if check and op.name in SEMAPHORE_OPS and (controlled or chosen):
            raise TraceError(
                f"'{op.name}' at {op.loc} signals or waits on a semaphore chosen by data "
                "(or under a condition or loop that data decides), so the order of the "
                "kernel's programs could change with its inputs",
                loc=user_location(),
                fix="compute semaphore indices and the conditions around them from "
                "axis_index / program_id and constants; or run it in the multi-program "
                "interpreter (collectives='simulate')",
            )
        if not op.regions:
            if _reads(op) or chosen:
                data.update(op.results)
            continue
        control = controlled or op.name == "while" or (op.name in ("cond", "for") and chosen)
        yields_data = [False] * len(op.results)
        for r, region in enumerate(op.regions):
            inner, carries = _region_data(op, r, data)
            while True:  # a loop's carries: data until what the body yields says otherwise
                found = _visit(region, data | inner | carries, control, check=False)
                carried = zip(_carries(op, region), region.results, strict=False)  # none: []
                grown = {p for p, y in carried if y in found}
                if grown <= carries:
                    break
                carries |= grown
            found = _visit(region, data | inner | carries, control, check)
            for k, y in enumerate(region.results):
                yields_data[k] = yields_data[k] or y in found
        if _reads(op) or (op.name == "cond" and chosen):
            data.update(op.results)
        else:
            data.update(r for r, d in zip(op.results, yields_data, strict=True) if d)
    return data


def _region_data(op: Op, r: int, data: set[Value]) -> tuple[set[Value], set[Value]]:
    """A region's parameters that hold data on entry: those holding an operand that is data,
    and (second) the loop carries whose start is data."""
    region = op.regions[r]
    held = region_operand_map(op, r) if op.name not in ("call", "mesh_call") else {}
    carries = set(_carries(op, region))
    starts = dict(zip(_carries(op, region), op.group("inits"), strict=True)) if carries else {}
    inner: set[Value] = set()
    for k, p in enumerate(region.params):
        source = held.get(k)
        if source is not None and op.operands[source] in data:
            inner.add(p)
    return inner, {p for p in carries if starts[p] in data}


def _carries(op: Op, region: Block) -> list[Value]:
    """A ``for``'s carry parameters (the last, one per result); none for other ops (a
    ``while`` is controlled as a whole)."""
    if op.name != "for" or not op.results:
        return []
    return list(region.params[-len(op.results) :])


def _reads(op: Op) -> bool:
    """Whether ``op`` reads memory (its results are data, not the program's position)."""
    effect = OPS[op.name].effect
    kinds = effect if isinstance(effect, tuple) else (effect,)
    return READ in kinds or op.name in ("semaphore_read", "call", "mesh_call")
