"""The cores of one device in turn, in the program the device runs (issue 47).

A ``shard_map`` whose body holds mesh kernels of cores (``pl.kernel``, ``core_map``) runs as
programs over (device, core) in the simulator (``interop/importer/rules/devices_cores.py``).
Compiled, each device runs one program (``local``), the core's position an ``axis_index`` of a
core axis, its core barriers kept. ``in_sequence`` makes that program run every core of the
device, *phase by phase*: the ops between two meeting points run for core 0, then core 1, ...,
each core with its own values (its position a constant), the device's memory shared, each
core's own memory a row of it as in the simulator. The meeting points:

- a ``barrier`` over core axes: every core reaches it before any goes on;
- a wait on a semaphore that another core signals (``pl.semaphore_signal(sem, core_index=i)``):
  every core runs to it, then each waits, so every signal before it in the program is there.

Why the simulator's bits: in a race-free kernel, what a core reads between two meeting points
no other core writes there, and what it reads that another wrote was ordered by a meeting
point. So each phase may run its cores one after another. Remote copies stay ``exchange``s,
reached by every device for each core in the same order; ``local`` refuses one that lands in
another core's semaphore (it would land while the wrong core runs).

Refused, with the reason: a meeting point inside a loop or branch (its phases would not be
static), a signal to another core that is not at the top of the program (the counts would not
be static), and a wait whose count the signals before it in the program do not reach (it waits
for a core that signals after it: a handoff, not a meeting).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence

import numpy as np

from minipallas.ir.core import Block, Function, Op, Value
from minipallas.ir.errors import MiniPallasError
from minipallas.ir.indexing import Dyn, Int
from minipallas.ir.interpret import interpret
from minipallas.ir.literal import Literal
from minipallas.ir.opdef import OPS
from minipallas.kernels.devices.rows import SIMULATE, fed

Mesh = tuple[tuple[str, ...], tuple[int, ...]]
_SIGNALS = ("semaphore_signal", "semaphore_wait")
_SEMAPHORE = {"semaphore_signal": 0, "semaphore_wait": 0, "dma_start": 2}  # its operand


def in_sequence(fn: Function, cores: Mesh, devices: Mesh) -> Function:
    """``fn`` (a device's program over cores ``cores``: names, sizes) running each of the
    device's cores in turn, phase by phase (module doc)."""
    return _Sequence(fn, cores, devices).function()


class _Sequence:
    def __init__(self, fn: Function, cores: Mesh, devices: Mesh) -> None:
        self.fn, self.cores, self.devices = fn, cores, devices
        self.at = [dict(zip(cores[0], (int(i) for i in p), strict=True))
                   for p in np.ndindex(*cores[1])]  # fmt: skip
        self.defs: dict[Value, Op] = {}
        self.source: dict[Value, Value] = {}  # a region or callee parameter -> its operand
        self.parent: dict[int, tuple[Op, int]] = {}  # an op -> the op and region around it
        self.semaphores: list[Op] = []
        self.index(fn.body, None)
        for op in self.semaphores:
            if op.name == "dma_start" and not (self.own(op) or self.first_core_only(op)):
                raise self.refuse(op, "copies within the device with another core's semaphore")
        crossing = {self.root(o) for o in self.semaphores if o.name == "semaphore_signal"
                    and not (self.own(o) or self.first_core_only(o))}  # fmt: skip
        self.told = [o for o in self.semaphores
                     if o.name in _SIGNALS and self.root(o) in crossing]  # fmt: skip
        self.meetings = {id(o) for o in self.told if o.name == "semaphore_wait"}
        self.splitting: dict[int, bool] = {}

    def index(self, block: Block, parent: tuple[Op, int] | None) -> None:
        """Records where each op of ``block`` (and of its regions and callees) is, what each
        value is made by or receives, and the ops on semaphores."""
        for op in block.ops:
            if parent is not None:
                self.parent[id(op)] = parent
            self.defs.update((r, op) for r in op.results)
            if op.name in _SEMAPHORE:
                self.semaphores.append(op)
            for k, region in enumerate(op.regions):
                for i, (_, v) in fed(op, k, region).items():
                    self.source[region.params[i]] = v
                self.index(region, (op, k))
            if op.name == "call":
                callee = op.attrs["callee"].body
                self.source.update(zip(callee.params, op.operands, strict=True))
                self.index(callee, (op, -1))

    def first_core_only(self, op: Op) -> bool:
        """Whether only each device's first core runs ``op`` (a ``pallas_call`` beside mesh
        kernels: branch 0 of a ``cond`` on the sum of the core's positions): it runs first in
        each phase, so what it signals is there for every other core."""
        while id(op) in self.parent:
            op, k = self.parent[id(op)]
            if op.name == "cond" and k == 0 and self.core_sum(op.operands[0]):
                return True
        return False

    def core_sum(self, v: Value) -> bool:
        op = self.defs.get(self.resolve(v))
        if op is not None and op.name == "add":
            return all(map(self.core_sum, op.operands))
        return op is not None and op.name == "axis_index" and op.attrs["name"] in self.cores[0]

    def function(self) -> Function:
        top = {id(o) for o in self.chain(self.fn.body)}
        for o in self.told:
            if id(o) not in top:
                raise self.refuse(o, "signals or waits on a semaphore another core signals, "
                                  "inside a loop or branch: its counts are not static")  # fmt: skip
        self.check_counts()
        params = tuple(Value(p.type) for p in self.fn.body.params)
        envs = [dict(zip(self.fn.body.params, params, strict=True)) for _ in self.at]
        ops = self.run(self.fn.body, envs)
        results = tuple(envs[0][v] for v in self.fn.body.results)
        return Function(self.fn.name, Block(params, tuple(ops), results))

    # --- which semaphore a signal or wait reaches ----------------------------------------------

    def resolve(self, v: Value) -> Value:
        while v in self.source:
            v = self.source[v]
        return v

    def views(self, op: Op) -> list[tuple[Op, Value]]:
        """The views from the semaphore's root to ``op`` (``ref.at``s, then ``op`` itself),
        each with the value it views."""
        ref = op.operands[_SEMAPHORE[op.name]]
        out, v = [(op, ref)], self.resolve(ref)
        while v in self.defs and self.defs[v].name == "ref.at":
            view = self.defs[v]
            out.append((view, view.operands[0]))
            v = self.resolve(view.operands[0])
        return out[::-1]

    def root(self, op: Op) -> Value:
        return self.resolve(self.views(op)[0][1])

    def own(self, op: Op) -> bool:
        """Whether ``op``'s semaphore is its core's own: the first rows the first view takes
        are the core's positions."""
        first = self.views(op)[0][0]
        n = len(self.cores[0])
        entries = first.attrs.get("indexer", ())[:n]
        return len(entries) == n and all(
            isinstance(e, Int) and isinstance(e.index, Dyn)
            and self.is_position(first.operands[1 + e.index.pos], k)
            for k, e in enumerate(entries)
        )  # fmt: skip

    def is_position(self, v: Value, axis: int) -> bool:
        op = self.defs.get(self.resolve(v))
        name = self.cores[0][axis]
        return op is not None and op.name == "axis_index" and op.attrs["name"] == name

    # --- the counts ----------------------------------------------------------------------------

    def check_counts(self) -> None:
        """Each meeting wait's count is reached, on every device and core, by the signals
        before it in the program less the waits before it (each core's in turn)."""
        if not self.told:
            return
        order = [o for o in self.chain(self.fn.body) if id(o) in {id(t) for t in self.told}]
        for device in np.ndindex(*self.devices[1]):
            at_device = dict(zip(self.devices[0], (int(i) for i in device), strict=True))
            cells = [self.cells(order, {**at_device, **at}) for at in self.at]
            counts: Counter = Counter()
            for k, op in enumerate(order):
                for c, at in enumerate(self.at):
                    cell, amount = cells[c][k]
                    if op.name == "semaphore_signal":
                        counts[cell] += amount
                    elif counts[cell] < amount:
                        raise self.refuse(
                            op,
                            f"waits on core {tuple(at.values())} of device {tuple(device)} for "
                            "signals another core sends after it (a handoff, not a meeting)",
                        )
                    else:
                        counts[cell] -= amount

    def cells(self, order: Sequence[Op], at: dict[str, int]) -> list[tuple[tuple, int]]:
        """Each op's semaphore (its root and every view's indices) and count, at ``at``."""
        wanted: list[Value] = []
        for op in order:
            for view, _ in self.views(op):
                wanted += view.operands[1 : 1 + _dyn_count(view)]
            wanted.append(op.operands[-1])
        values = iter(self.evaluate(wanted, at, order[0]))
        out = []
        for op in order:
            cell: list = [id(self.root(op))]
            for view, _ in self.views(op):
                dyn = [next(values) for _ in range(_dyn_count(view))]
                cell.append((view.attrs["indexer"], tuple(dyn)))
            out.append((tuple(cell), next(values)))
        return out

    def evaluate(self, values: Sequence[Value], at: dict[str, int], where: Op) -> list[int]:
        """``values`` at the positions ``at``: their ops copied, each position a constant."""
        ops: list[Op] = []
        env: dict[Value, Value] = {}

        def visit(v: Value) -> Value:
            v = self.resolve(v)
            if v not in env:
                op = self.defs.get(v)
                if op is not None and op.name == "axis_index":
                    value = Literal.of(at[op.attrs["name"]], "int32")
                    new = Op("constant", (), (Value(v.type),), {"value": value})
                elif op is None or op.regions or not OPS[op.name].pure:
                    raise self.refuse(where, "signals another core with a semaphore or count "
                                      "computed from more than the positions")  # fmt: skip
                else:
                    new = op.renamed(tuple(visit(u) for u in op.operands))
                ops.append(new)
                env.update(zip(op.results, new.results, strict=True))
            return env[v]

        results = tuple(visit(v) for v in values)
        fn = Function("at", Block((), tuple(ops), results))
        return [int(np.asarray(r)) for r in interpret(fn)]

    # --- the program ---------------------------------------------------------------------------

    def splits(self, op: Op) -> bool:
        """Whether ``op`` is a meeting point or holds one."""
        if id(op) not in self.splitting:
            inner = any(self.splits(o) for region in op.regions for o in region.ops)
            self.splitting[id(op)] = op.name == "barrier" or id(op) in self.meetings or inner
        return self.splitting[id(op)]

    def chain(self, block: Block) -> Iterator[Op]:
        """``block``'s ops in program order, into the ``run_scoped``s that hold meeting points."""
        for op in block.ops:
            yield op
            if op.name == "run_scoped" and self.splits(op):
                yield from self.chain(op.regions[0])

    def run(self, block: Block, envs: list[dict[Value, Value]]) -> list[Op]:
        """``block``'s ops for every core, phase by phase; ``envs[c]`` core ``c``'s values."""
        out: list[Op] = []
        phase: list[Op] = []

        def flush() -> None:
            for env, at in zip(envs, self.at, strict=True):
                out.extend(_clone(o, env, at) for o in phase)
            phase.clear()

        for op in block.ops:
            if op.name == "barrier" or id(op) in self.meetings:
                flush()
                phase.extend([op] if op.name != "barrier" else [])
            elif op.name == "run_scoped" and self.splits(op):
                flush()
                out.append(self.scoped(op, envs))
            elif self.splits(op):
                raise self.refuse(op, "holds a barrier of cores, or a wait on a semaphore "
                                  "another core signals, inside a loop or branch")  # fmt: skip
            else:
                phase.append(op)
        flush()
        return out

    def scoped(self, op: Op, envs: list[dict[Value, Value]]) -> Op:
        """A ``run_scoped`` holding meeting points, once for every core: its allocations
        shared, each core's operands and results its own (an operand the cores share, such as
        the device's buffers, passed once: one parameter per ref, never two aliases)."""
        (region,) = op.regions
        n_alloc = len(region.params) - len(op.operands)
        allocs = [Value(p.type) for p in region.params[:n_alloc]]
        operands = list(dict.fromkeys(env[v] for env in envs for v in op.operands))
        params = {v: Value(v.type) for v in operands}
        inner = []
        for env in envs:
            passed = [params[env[v]] for v in op.operands]
            inner.append(dict(zip(region.params, [*allocs, *passed], strict=True)))
        ops = self.run(region, inner)
        results = tuple(env[v] for env in inner for v in region.results)
        block = Block((*allocs, *params.values()), tuple(ops), results)
        new = Op("run_scoped", tuple(operands), tuple(Value(v.type) for v in results),
                 op.attrs, (block,), op.loc)  # fmt: skip
        n = len(op.results)
        for c, env in enumerate(envs):
            env.update(zip(op.results, new.results[c * n : (c + 1) * n], strict=True))
        return new

    def refuse(self, op: Op, why: str) -> MiniPallasError:
        return MiniPallasError(
            f"this {op.name} of a kernel that spans devices, whose cores run in turn when "
            f"compiled to XLA collectives, does not compile: it {why}",
            op=op.name,
            loc=op.loc,
            fix=SIMULATE,
        )


def _dyn_count(view: Op) -> int:
    """How many dynamic indices ``view`` (a ``ref.at`` or a semaphore op) takes."""
    return sum(1 for e in view.attrs["indexer"] for _ in _dyns(e))


def _dyns(entry: object) -> Iterator[Dyn]:
    for at in (getattr(entry, "index", None), getattr(entry, "start", None)):
        if isinstance(at, Dyn):
            yield at


def _clone(op: Op, env: dict[Value, Value], at: dict[str, int]) -> Op:
    """``op`` for the core at ``at``: operands from ``env``, regions and callees copied, each
    ``axis_index`` of a core axis its position; its results recorded in ``env``."""
    if op.name == "axis_index" and op.attrs["name"] in at:
        value = Literal.of(at[op.attrs["name"]], op.results[0].type.dtype)
        new = Op("constant", (), (Value(op.results[0].type),), {"value": value}, (), op.loc)
    else:
        attrs = op.attrs
        if op.name == "call":
            callee = attrs["callee"]
            attrs = {**attrs, "callee": Function(callee.name, _clone_block(callee.body, at))}
        regions = tuple(_clone_block(r, at) for r in op.regions)
        operands = tuple(env[v] for v in op.operands)
        new = Op(op.name, operands, tuple(Value(r.type) for r in op.results), attrs, regions,
                 op.loc)  # fmt: skip
    env.update(zip(op.results, new.results, strict=True))
    return new


def _clone_block(block: Block, at: dict[str, int]) -> Block:
    params = tuple(Value(p.type) for p in block.params)
    env = dict(zip(block.params, params, strict=True))
    ops = tuple(_clone(o, env, at) for o in block.ops)
    return Block(params, ops, tuple(env[v] for v in block.results))
