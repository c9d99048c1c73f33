"""The program one device runs, made from a kernel that spans devices (issue 47).

The importer (``interop/importer/rules/devices.py``) gives a ``shard_map`` over several devices as a
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
   0)``, a ``lax.cond`` on the parity) runs on every device, sent only by those the condition
   picks (evaluated at compile time), what its branch does with memory before it kept under
   the condition (``masked``; a condition on data that picks only the source: ``picked``). A
   condition every device takes alike (on a grid step, a static loop's index or counter:
   ``varies``) keeps its branches, collectives inside: every device takes the same branch;
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

With mesh kernels of cores in the body, the mesh's last axes are the cores': their rows stay
(each core's own memory), the core's position is an ``axis_index`` taken alike by every device
(as a static loop's index), core barriers stay, and ``cores.in_sequence`` runs the cores in
turn; a remote copy or signal must reach the same core of the target (``same_core``).

Refused, each with a reason and ``collectives='simulate'`` as the fix: communication that
depends on data (a target, window, condition or enclosing loop's trip count computed from
loaded values, a ``while`` loop around a remote copy), a remote copy under a condition that
may differ by device that is not at the top of its branch or whose branch touches memory after
it (``masked``), and any other use of another device's row (a plain write, a remote source).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from minipallas.ir.builder import infer_result_types
from minipallas.ir.core import Block, Function, Op, Value
from minipallas.ir.errors import MiniPallasError
from minipallas.ir.indexing import Dyn, Int
from minipallas.ir.interpret import interpret
from minipallas.ir.literal import Literal
from minipallas.ir.opdef import OPS
from minipallas.ir.types import RefType
from minipallas.kernels.devices.cores import in_sequence
from minipallas.kernels.devices.masked import Masked
from minipallas.kernels.devices.rows import (
    DATA,
    LOOP,
    SIMULATE,
    STATIC,
    Mark,
    Remote,
    Rows,
    fed,
)


def device_program(
    body: Function, axes: Sequence[str], sizes: Sequence[int], devices: int | None = None
) -> Function:
    """The program one device runs (module doc) of a device kernel's ``mesh_call`` body over
    ``axes``, the first ``devices`` of them (all by default) the devices', the rest cores
    (``cores``: each device's cores run in turn in its program)."""
    n = len(axes) if devices is None else devices
    cores = (tuple(axes[n:]), tuple(sizes[n:]))
    device = _Device(body, tuple(axes[:n]), tuple(sizes[:n]), cores)
    program = device.function()
    return in_sequence(program, cores, (device.axes, device.sizes)) if cores[0] else program


class _Device(Rows, Masked):
    """The rebuild: old values to new ones (or ``Remote`` views), what each old value depends
    on (``kind``), which old refs have a row per device, and the region ops around."""

    def __init__(self, body: Function, axes: tuple[str, ...], sizes: tuple[int, ...],
                 cores: tuple[tuple[str, ...], tuple[int, ...]]) -> None:  # fmt: skip
        self.body, self.axes, self.sizes, self.cores = body, axes, sizes, cores
        self.core_positions: dict[Value, int] = {}  # new axis_index of a core axis -> the axis
        self.first_core = 0  # how many branches around run on each device's first core only
        self.env: dict[Value, Value | Remote] = {}
        self.kind: dict[Value, int] = {}
        self.rowed: set[Value] = set()
        self.source: dict[Value, Value] = {}  # a region parameter -> the operand it receives
        functions = (body, *body.callees())
        self.defs = {v: op for fn in functions for op in fn.walk() for v in op.results}
        self.enclosing: list[Op] = []
        self.senders: set[int] | None = None  # in a masked cond: the devices that take it
        self.branch: tuple[int, int] | None = None  # (the masked cond's id, the branch)
        self.heads: set[int] = set()
        # program order: waits that only some devices make, and remote copies, with the loops
        # around each (``check_handshakes``)
        self.seq = 0
        self.indices: set[Value] = set()  # the index of each for loop with static bounds
        self.varying: dict[Value, bool] = {}  # ``varies``'s answers
        self.waits: list[Mark] = []
        self.copies: list[Mark] = []
        self.reached: set[Value] = set()  # the semaphores other devices signal (old roots)
        self.counted: set[Value] = set()  # the semaphores copies count on (old roots)
        self.reads: list[Op] = []  # semaphore_reads (``check_reads``)

    def function(self) -> Function:
        params = tuple(Value(self.local(p.type)) for p in self.body.params)
        self.rowed.update(self.body.params)
        block = self.block(self.body.body, params)
        self.check_handshakes()
        self.check_reads()
        return Function(self.body.name + "_on_device", block)

    def check_handshakes(self) -> None:
        """A compiled copy lands where the receiver reaches it in its program; the copy it
        stands for lands between the sender's start and the receiver's wait. They agree in a
        race-free kernel whose devices all wait alike: for one device to start a copy only
        after another has gone past that point (a handshake), it must wait where the other
        does not, under a condition on the device or for a count that differs by device. So a
        remote copy after such a wait, or in a loop with one, is refused. Not such a wait: one
        on a semaphore no other device signals (a local copy's), or one in another branch of
        the copy's own masked cond (not on the sender's path, ``masked``)."""
        for copy in self.copies:
            for wait in self.waits:
                if wait.root not in self.reached:
                    continue  # no other device signals it: no handshake
                if (
                    copy.branch
                    and wait.branch
                    and copy.branch[0] == wait.branch[0]
                    and (copy.branch != wait.branch)
                ):
                    continue  # a sibling branch
                if wait.seq < copy.seq or set(copy.loops) & set(wait.loops):
                    where = f" at {wait.op.loc}" if wait.op.loc is not None else ""
                    raise self.refuse(
                        copy.op,
                        f"may start after a {wait.op.name}{where} that only some devices "
                        "make: its data could land after the receiver reached the copy",
                    )

    def check_reads(self) -> None:
        """A ``semaphore_read`` of a semaphore another device signals or a copy counts on is
        refused: the compiled program drops remote signals and lands copies as collectives, so
        such a count would not be the kernel's (the simulator reads it, or names a read of a
        copy's count in flight)."""
        for op in self.reads:
            if self.root(op.operands[0]) in self.reached | self.counted:
                raise self.refuse(op, "reads a semaphore that copies or other devices count on")

    def note_order(self, op: Op, conditional: bool = False) -> None:
        """Records ``op`` for ``check_handshakes`` when it is a wait only some devices make
        (``conditional``: so taken, as in a branch that ``masked.picked`` takes apart)."""
        conditional = (
            conditional
            or self.senders is not None
            or any(
                o.name == "cond" and any(map(self.varies, o.group("index"))) for o in self.enclosing
            )
        )
        if op.name == "semaphore_wait":
            count = self.defs.get(op.operands[op.slices()["value"]][0])
            conditional = conditional or count is None or count.name != "constant"
        if op.name in ("semaphore_wait", "dma_wait") and conditional:
            sem = op.operands[0 if op.name == "semaphore_wait" else 2]
            self.waits.append(Mark(self.seq, self._loops(), op, self.branch, self.root(sem)))

    def root(self, v: Value) -> Value:
        """The buffer old ref ``v`` views (through views and region parameters)."""
        while True:
            while v in self.source:
                v = self.source[v]
            op = self.defs.get(v)
            if op is None or op.name != "ref.at":
                return v
            v = op.operands[0]

    def varies(self, v: Value) -> bool:
        """Whether old value ``v`` may differ between devices at one point of their programs:
        it reads the device's position or data, or is a loop's carry (a static loop's index
        runs alike on every device: ``pl.when(step == 0)`` is taken by all of them)."""
        if v not in self.varying:
            op = self.defs.get(v)
            if v in self.indices:  # a static loop's index, or a core's position
                self.varying[v] = False
            elif self.kind.get(v, DATA) == DATA or op is not None and op.name == "program_id":
                self.varying[v] = True
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
        if op.name == "program_id" or op.name == "axis_index" and op.attrs["name"] in self.cores[0]:
            return self.position(op)
        if op.name == "barrier":  # every device reaches each collective together (doc, 4)
            axes = tuple(a for a in op.attrs["axes"] if a in self.cores[0])
            return [Op("barrier", (), (), {"axes": axes}, (), op.loc)] if axes else []
        if op.name == "ref.at" and op.operands[0] in self.rowed:
            return self.row_view(op)
        if op.name == "ref.at" and isinstance(self.env[op.operands[0]], Remote):
            return self.sub_view(op, self.env[op.operands[0]])
        if op.name == "get" and isinstance(self.env[op.operands[0]], Remote):
            return self.remote_read(op, self.env[op.operands[0]])
        if op.name == "dma_start" and isinstance(self.env[op.operands[1]], Remote):
            return self.remote_copy(op)
        if op.name == "semaphore_read":
            self.reads.append(op)
        if op.name in ("dma_start", "dma_wait"):
            self.counted.add(self.root(op.operands[2]))
        if op.name == "semaphore_signal" and isinstance(self.env[op.operands[0]], Remote):
            self.same_core(op, self.compose(op, self.env[op.operands[0]])[1])
            self.reached.add(self.root(op.operands[0]))
            return []  # a remote signal carries no data (module doc, 4)
        if op.name == "call":
            return self.call(op)
        if op.name == "cond" and self.maskable(op):
            return self.masked_cond(op)
        picked = self.picked(op) if op.name == "cond" else None
        if picked is not None:
            return picked
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

    def position(self, op: Op) -> list[Op]:
        """The device's position along a mesh axis (static), or its core's: the same on
        every device at each point of the program (``cores`` runs the cores in turn), as a
        static loop's index."""
        (result,) = op.results
        names = (*self.axes, *self.cores[0])
        axis = names.index(op.attrs["name"]) if op.name == "axis_index" else op.attrs["axis"]
        new = Op("axis_index", (), (Value(result.type),), {"name": names[axis]}, (), op.loc)
        self.kind[result] = STATIC if axis < len(self.axes) else LOOP
        if axis >= len(self.axes):
            self.indices.add(result)
            self.core_positions[new.result] = axis - len(self.axes)
        return self.made(op, new)

    def same_core(self, op: Op, remote: Value | Remote) -> None:
        """With cores, a remote copy or signal reaches the target device's core of the same
        number (the semaphore's first rows the core's own position), or is sent by each
        device's first core only (a ``pallas_call`` beside mesh kernels): the cores of every
        device run in turn, so a copy lands while its core runs, before the cores after it."""
        n = len(self.cores[0])
        if not n or self.first_core:
            return
        rows = remote.indexer[:n] if isinstance(remote, Remote) else ()
        own = len(rows) == n and all(
            isinstance(e, Int) and isinstance(e.index, Dyn)
            and self.core_positions.get(remote.dyn[e.index.pos]) == k
            for k, e in enumerate(rows)
        )  # fmt: skip
        if not own:
            raise self.refuse(op, "signals a semaphore of another core of the target device (or "
                              "of none): compiled, each device's cores run in turn")  # fmt: skip

    def core_sum(self, v: Value) -> bool:
        """Whether old value ``v`` is a sum of core positions: 0 on a device's first core."""
        while v in self.source:
            v = self.source[v]
        op = self.defs.get(v)
        if op is not None and op.name == "add":
            return all(map(self.core_sum, op.operands))
        return v in self.indices and op is not None and op.name in ("program_id", "axis_index")

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
                        if self.kind[p] == LOOP and not self.varies(operand):
                            self.indices.add(p)  # counts alike on every device (pl.loop's)
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
            first = k == 0 and op.name == "cond" and self.core_sum(op.operands[0])
            self.first_core += first
            out.append(self.block(region, params))
            self.first_core -= first
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

    fed = staticmethod(fed)

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
                    "carry, or on the device's position inside a loop or region of its branch: "
                    "every device takes part in each collective, so a copy leaves a condition "
                    "that may differ by device only from the top of its branch",
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
