"""The program one device runs, made from a kernel that spans devices (issue 47).

The importer (``interop/importer/devices.py``) gives a ``shard_map`` over several devices as a
``mesh_call`` whose body is one device's program over a *row per device* of every operand,
result, scratch buffer and semaphore: ``ref.at %r[%pid, ...]``, with ``program_id`` of each
mesh axis as the row's indices, is the device's own row; any other row is a target's, written
by a remote copy (``dma_start`` into it) or signalled (``semaphore_signal`` on it).
``device_program`` rebuilds that body as the program every device runs under ``jax.shard_map``
(the rules for other devices' rows, 2 and 3, are in ``rows``):

1. the rows go: a ref with a row per device becomes the device's own shard, its own-row views
   plain views, ``program_id`` of mesh axis ``a`` becomes ``axis_index ("a")``, and the
   collective scratch an ordinary ``run_scoped``;
2. a remote copy becomes an ``exchange`` (``ir/opset/exchange.py``): the source's value as of
   the copy's start, sent with the destination window's indices to the target, which writes it
   there when it reaches the same copy in its own program. The target is evaluated for each
   device at compile time when it is a function of the device's position only (a permutation
   then: ``lax.ppermute``); computed from loop indices, it travels with the payload
   (``lax.all_gather`` and a select on the receiver). Every device must take part in each
   collective, so a copy under a condition on the device's position alone (``pl.when(me ==
   0)``) runs on every device, sent only by those the condition picks (evaluated at compile
   time), where the condition's branches do nothing else with memory (``masked_cond``). A
   condition every device takes alike (on a grid step or a static loop's index: ``varies``)
   keeps its branches, collectives inside: every device takes the same branch at that point;
3. a read of other devices' rows (the importer's ``psum``, ``ppermute`` and ``all_gather`` of
   the body read so, between barriers) is a ``gather_rows`` of every device's own row, then
   the rows read from it;
4. remote signals and ``barrier``s go; local semaphores and the send side of a copy stay for
   discharge (counters no one reads). Semaphores carry no data: in a race-free kernel they only
   order accesses that the collective already orders (every device reaches each ``exchange``
   together; a read of the destination before its wait, or a write of it racing the copy, is a
   race). The simulator (``collectives="simulate"``) checks race freedom; this compiled path
   is for kernels that have it, and that leave a destination window alone from their own start
   of the copy to its receive wait (start, then wait: the kernels' usual shape). A kernel that
   hands a window over later, by semaphores alone, should be checked against the simulator.

Refused, each with a reason and ``collectives='simulate'`` as the fix: communication that
depends on data (a target, window, condition or enclosing loop's trip count computed from
loaded values, a ``while`` loop around a remote copy), a remote copy under a condition that
may differ by device whose branches also read or write memory, and any other use of another
device's row (a plain write, a remote source).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from minipallas.ir.builder import infer_result_types
from minipallas.ir.core import Block, Function, Op, Value
from minipallas.ir.errors import MiniPallasError
from minipallas.ir.interpret import interpret
from minipallas.ir.literal import Literal
from minipallas.ir.opdef import OPS
from minipallas.ir.types import RefType
from minipallas.kernels.devices.rows import DATA, LOOP, SIMULATE, STATIC, Remote, Rows


def device_program(body: Function, axes: Sequence[str], sizes: Sequence[int]) -> Function:
    """The program one device runs (module doc) of a device kernel's ``mesh_call`` body."""
    return _Device(body, tuple(axes), tuple(sizes)).function()


class _Device(Rows):
    """The rebuild: old values to new ones (or ``Remote`` views), what each old value depends
    on (``kind``), which old refs have a row per device, and the region ops around."""

    def __init__(self, body: Function, axes: tuple[str, ...], sizes: tuple[int, ...]) -> None:
        self.body, self.axes, self.sizes = body, axes, sizes
        self.env: dict[Value, Value | Remote] = {}
        self.kind: dict[Value, int] = {}
        self.rowed: set[Value] = set()
        self.source: dict[Value, Value] = {}  # a region parameter -> the operand it receives
        functions = (body, *body.callees())
        self.defs = {v: op for fn in functions for op in fn.walk() for v in op.results}
        self.enclosing: list[Op] = []
        self.senders: set[int] | None = None  # in a masked cond: the devices that take it
        # program order: waits that only some devices make, and remote copies, with the loops
        # around each (``check_handshakes``)
        self.seq = 0
        self.indices: set[Value] = set()  # the index of each for loop with static bounds
        self.varying: dict[Value, bool] = {}  # ``varies``'s answers
        self.waits: list[tuple[int, tuple[Op, ...], Op]] = []
        self.copies: list[tuple[int, tuple[Op, ...], Op]] = []

    def function(self) -> Function:
        params = tuple(Value(self.local(p.type)) for p in self.body.params)
        self.rowed.update(self.body.params)
        block = self.block(self.body.body, params)
        self.check_handshakes()
        return Function(self.body.name + "_on_device", block)

    def check_handshakes(self) -> None:
        """A compiled copy lands where the receiver reaches it in its program; the copy it
        stands for lands between the sender's start and the receiver's wait. They agree in a
        race-free kernel whose devices all wait alike: for one device to start a copy only
        after another has gone past that point (a handshake), it must wait where the other
        does not, under a condition on the device or for a count that differs by device. So a
        remote copy after such a wait, or in a loop with one, is refused."""
        for seq, loops, copy in self.copies:
            for wait_seq, wait_loops, wait in self.waits:
                if wait_seq < seq or set(loops) & set(wait_loops):
                    where = f" at {wait.loc}" if wait.loc is not None else ""
                    raise self.refuse(
                        copy,
                        f"may start after a {wait.name}{where} that only some devices make: "
                        "its data could land after the receiver reached the copy",
                    )

    def note_order(self, op: Op) -> None:
        """Records ``op`` for ``check_handshakes`` when it is a wait only some devices make."""
        conditional = self.senders is not None or any(
            o.name == "cond" and any(map(self.varies, o.group("index"))) for o in self.enclosing
        )
        if op.name == "semaphore_wait":
            count = self.defs.get(op.operands[op.slices()["value"]][0])
            conditional = conditional or count is None or count.name != "constant"
        if op.name in ("semaphore_wait", "dma_wait") and conditional:
            self.waits.append((self.seq, self._loops(), op))

    def varies(self, v: Value) -> bool:
        """Whether old value ``v`` may differ between devices at one point of their programs:
        it reads the device's position or data, or is a loop's carry (a static loop's index
        runs alike on every device: ``pl.when(step == 0)`` is taken by all of them)."""
        if v not in self.varying:
            op = self.defs.get(v)
            if self.kind.get(v, DATA) == DATA or op is not None and op.name == "program_id":
                self.varying[v] = True
            elif v in self.indices:
                self.varying[v] = False
            elif v in self.source:
                self.varying[v] = self.varies(self.source[v])
            else:
                self.varying[v] = op is None or any(map(self.varies, op.operands))
        return self.varying[v]

    def _loops(self) -> tuple[Op, ...]:
        return tuple(o for o in self.enclosing if o.name in ("for", "while"))

    def local(self, t: RefType) -> RefType:
        n = len(self.axes)
        if tuple(t.shape[:n]) != self.sizes:
            raise AssertionError(f"{t} has no row per device of a {self.sizes} mesh")
        return RefType(t.shape[n:], t.dtype, t.memory_space)

    def block(self, block: Block, params: Sequence[Value]) -> Block:
        self.env.update(zip(block.params, params, strict=True))
        ops: list[Op] = []
        for op in block.ops:
            ops += self.op(op)
        return Block(tuple(params), tuple(ops), tuple(self.value(v, None) for v in block.results))

    def value(self, v: Value, op: Op | None) -> Value:
        new = self.env[v]
        if isinstance(new, Remote):
            raise self.refuse(
                op,
                "reads or writes another device's memory directly (only a remote copy, "
                "make_async_remote_copy, and a remote semaphore_signal reach another device)",
            )
        return new

    def refuse(self, op: Op | None, why: str) -> MiniPallasError:
        name = None if op is None else op.name
        return MiniPallasError(
            f"this {name} of a kernel that spans devices does not compile to XLA collectives: "
            f"it {why}",
            op=name,
            loc=None if op is None else op.loc,
            fix=SIMULATE,
        )

    # --- ops ---------------------------------------------------------------------------------

    def op(self, op: Op) -> list[Op]:
        self.seq += 1
        self.note_order(op)
        if op.name == "program_id":
            (result,) = op.results
            self.kind[result] = STATIC
            name = {"name": self.axes[op.attrs["axis"]]}
            return self.made(op, Op("axis_index", (), (Value(result.type),), name, (), op.loc))
        if op.name == "barrier":
            return []  # every device reaches each collective together (module doc, 4)
        if op.name == "ref.at" and op.operands[0] in self.rowed:
            return self.row_view(op)
        if op.name == "ref.at" and isinstance(self.env[op.operands[0]], Remote):
            return self.sub_view(op, self.env[op.operands[0]])
        if op.name == "get" and isinstance(self.env[op.operands[0]], Remote):
            return self.remote_read(op, self.env[op.operands[0]])
        if op.name == "dma_start" and isinstance(self.env[op.operands[1]], Remote):
            return self.remote_copy(op)
        local_copy = op.name == "dma_start" and op.operands[0] is not op.operands[1]
        if self.senders is not None and local_copy:
            raise self.refuse(op, "copies within the device under a condition on the device, "
                              "whose branches every device runs")  # fmt: skip
        if op.name == "semaphore_signal" and isinstance(self.env[op.operands[0]], Remote):
            return []  # a remote signal carries no data (module doc, 4)
        if op.name == "call":
            return self.call(op)
        if op.name == "cond" and self.maskable(op):
            return self.masked_cond(op)
        operands = tuple(self.value(v, op) for v in op.operands)
        regions = self.regions(op)
        attrs = dict(op.attrs)
        if op.name == "run_scoped" and attrs.get("collective_axes"):
            attrs["collective_axes"] = ()
        types = infer_result_types(op.name, [v.type for v in operands], attrs, regions, op.loc)
        new = Op(op.name, operands, tuple(Value(t) for t in types), attrs, regions, op.loc)
        pure = OPS[op.name].pure and not op.regions
        pure = pure and not any(isinstance(v.type, RefType) for v in op.operands)
        kind = max((self.kind.get(v, DATA) for v in op.operands), default=STATIC)
        for r in op.results:
            self.kind[r] = STATIC if op.name == "axis_index" else kind if pure else DATA
        return self.made(op, new)

    def call(self, op: Op) -> list[Op]:
        """A ``call`` with its callee rebuilt for this call's operands (a grid kernel's body
        takes the device's position and rows; ``jnp.where`` is a call too): its parameters get
        the operands' rows and what they depend on, its results what the callee's do."""
        callee = op.attrs["callee"]
        operands = tuple(self.value(v, op) for v in op.operands)
        params = []
        for p, old, new in zip(callee.body.params, op.operands, operands, strict=True):
            self.source[p], self.kind[p] = old, self.kind.get(old, DATA)
            if old in self.rowed:
                self.rowed.add(p)
            params.append(Value(new.type))
        attrs = {**op.attrs, "callee": Function(callee.name, self.block(callee.body, params))}
        types = infer_result_types("call", [v.type for v in operands], attrs, (), op.loc)
        new = Op("call", operands, tuple(Value(t) for t in types), attrs, (), op.loc)
        for r, v in zip(op.results, callee.body.results, strict=True):
            self.kind[r] = self.kind.get(v, DATA)
        return self.made(op, new)

    def maskable(self, op: Op) -> bool:
        """A ``cond`` on the device's position alone, with no results, whose branches copy to
        other devices and do nothing else with memory (module doc, 2)."""
        ops = [o for region in op.regions for o in region.walk()]
        simple = all(o.name in _SIMPLE or (OPS[o.name].pure and not o.regions) for o in ops)
        copies = any(o.name == "dma_start" for o in ops)
        static = self.kind.get(op.operands[0], DATA) == STATIC and self.senders is None
        return simple and copies and static and not op.results

    def masked_cond(self, op: Op) -> list[Op]:
        """Every branch run by every device, each remote copy in it sent only by the devices
        that take the branch (the index evaluated for each device at compile time)."""
        last = len(op.regions) - 1
        taken = [min(max(self.values_at(op.operands[:1], d)[0], 0), last) for d in self.devices()]
        ops: list[Op] = []
        for k, branch in enumerate(op.regions):
            for i, (_, operand) in self.fed(op, k, branch).items():
                p = branch.params[i]
                self.env[p], self.source[p] = self.env[operand], operand
                self.kind[p] = self.kind.get(operand, DATA)
                if operand in self.rowed:
                    self.rowed.add(p)
            self.senders = {d for d, t in enumerate(taken) if t == k}
            try:
                for inner in branch.ops:
                    ops += self.op(inner)
            finally:
                self.senders = None
        return ops

    def made(self, old: Op, new: Op) -> list[Op]:
        self.env.update(zip(old.results, new.results, strict=True))
        return [new]

    def regions(self, op: Op) -> tuple[Block, ...]:
        """``op``'s regions rebuilt: a parameter that receives an operand gets its new type,
        its row and what it depends on; a collective ``run_scoped``'s allocations lose their
        rows; a ``for`` index depends on loops (or on data when its bounds do)."""
        out = []
        self.enclosing.append(op)
        for k, region in enumerate(op.regions):
            fed = self.fed(op, k, region)
            params = []
            for i, p in enumerate(region.params):
                group, operand = fed.get(i, (None, None))
                if operand is not None:
                    if operand in self.rowed:
                        self.rowed.add(p)
                    params.append(Value(self.value(operand, op).type))
                    if group == "inits":  # a loop's carry: its value changes
                        self.kind[p] = self.carry_kind(op, region, i, operand)
                    else:
                        self.source[p] = operand
                        self.kind[p] = self.kind.get(operand, DATA)
                elif op.name == "run_scoped" and op.attrs.get("collective_axes"):
                    self.rowed.add(p)
                    params.append(Value(self.local(p.type)))
                else:
                    self.kind[p] = DATA
                    if op.name == "for" and i == 0 and self.bounds_kind(op) == STATIC:
                        self.kind[p] = LOOP
                        self.indices.add(p)
                    params.append(Value(p.type))
            out.append(self.block(region, params))
        self.enclosing.pop()
        return tuple(out)

    def carry_kind(self, op: Op, region: Block, i: int, init: Value) -> int:
        """A carry of a ``for`` with static bounds that starts static and steps by a constant
        each iteration (``fori_loop(1, n)`` counts so) depends on loops; any other on data."""
        if op.name != "for" or self.bounds_kind(op) != STATIC or self.kind.get(init) != STATIC:
            return DATA
        p = region.params[i]
        step = {v: o for o in region.ops for v in o.results}.get(
            region.results[i - (len(region.params) - len(region.results))]
        )
        if step is None or step.name != "add" or p not in step.operands:
            return DATA
        (other,) = [v for v in step.operands if v is not p] or [p]
        made = {v: o for o in region.ops for v in o.results}.get(other)
        return LOOP if made is not None and made.name == "constant" else DATA

    @staticmethod
    def fed(op: Op, region: int, block: Block) -> dict[int, tuple[str, Value]]:
        """Which of region ``region``'s parameters receives which operand (by position), and
        the operand group it comes from."""
        opdef = OPS[op.name]
        params = opdef.param_groups(region, len(op.operands), op.attrs, len(block.params))
        groups = opdef.groups(len(op.operands), op.attrs)
        found: dict[int, tuple[str, Value]] = {}
        if params is None or groups is None:
            return found
        for name, where in params.items():
            if name in groups:
                operands = op.operands[groups[name]]
                for i, v in zip(range(where.start, where.stop), operands, strict=True):
                    found[i] = (name, v)
        return found

    def bounds_kind(self, op: Op) -> int:
        where = op.slices()
        bounds = (*op.operands[where["lower"]], *op.operands[where["upper"]])
        return max(self.kind.get(v, DATA) for v in bounds)

    def check_around(self, op: Op) -> None:
        """Every device must reach each collective the same number of times."""
        for around in self.enclosing:
            if around.name == "while":
                raise self.refuse(op, "is inside a while loop, whose trip count is computed")
            if around.name == "cond" and any(map(self.varies, around.group("index"))):
                raise self.refuse(
                    op,
                    "is under a condition that is computed from loaded values or a loop's "
                    "carry, or on the device's position with branches that also read or write "
                    "memory: every device takes part in each collective, so under a condition "
                    "that may differ by device a copy can only be masked by device",
                )
            if around.name == "for":
                if self.bounds_kind(around) != STATIC:
                    raise self.refuse(op, "is inside a loop whose trip count is computed "
                                      "from loaded values or loop indices")  # fmt: skip
                where = around.slices()
                bounds = [*around.operands[where["lower"]], *around.operands[where["upper"]]]
                trips = {tuple(self.values_at(bounds, d)) for d in self.devices()}
                if len(trips) != 1:
                    raise self.refuse(op, "is inside a loop whose trip count differs by device")

    def devices(self) -> list[tuple[int, ...]]:
        return [tuple(int(i) for i in p) for p in np.ndindex(*self.sizes)]

    def values_at(self, values: Sequence[Value], position: tuple[int, ...]) -> list[int]:
        """``values`` (old, depending on the device's position only) on the device at
        ``position``: their ops copied with each ``program_id`` its position, interpreted."""
        ops: list[Op] = []
        env: dict[Value, Value] = {}

        def visit(v: Value) -> Value:
            while v in self.source:
                v = self.source[v]
            if v not in env:
                op = self.defs[v]
                if op.name in ("program_id", "axis_index"):
                    axis = op.attrs.get("axis", None)
                    axis = self.axes.index(op.attrs["name"]) if axis is None else axis
                    value = Literal.of(position[axis], "int32")
                    new = Op("constant", (), (Value(v.type),), {"value": value})
                else:
                    operands = tuple(visit(u) for u in op.operands)
                    new = op.renamed(operands)
                ops.append(new)
                env.update(zip(op.results, new.results, strict=True))
            return env[v]

        results = tuple(visit(v) for v in values)
        fn = Function("static", Block((), tuple(ops), results))
        return [int(np.asarray(r)) for r in interpret(fn)]


# ops a masked cond's branches may hold besides pure ones: views, copies (remote ones and their
# send side only, ``op``), waits and signals on semaphores, the device's position
_SIMPLE = frozenset({"ref.at", "dma_start", "dma_wait", "semaphore_signal", "semaphore_wait",
                     "program_id", "axis_index", "yield"})  # fmt: skip
