"""A remote copy under a condition that may differ between devices, compiled (issue 47).

Every device takes part in each collective, so a copy under ``pl.when(me == 0)`` or a
``lax.cond`` on the device's position cannot stay inside its branch: the devices that skip the
branch would never reach the ``exchange``. ``Masked`` (mixed into ``local._Device``) takes each
branch apart, in order, for the devices that take it (its index evaluated for every device at
compile time):

1. the branch's *head*, every op before its first remote copy that reads or writes memory (or
   uses what such an op made), stays under the condition: a ``cond`` on the same index whose
   other branches do nothing;
2. each remote copy becomes an ``exchange`` every device runs, sent only by the devices that
   take the branch; views and pure ops that the copies use run on every device;
3. after the first copy the branch may only wait and signal (counters no one reads once
   compiled, ``local`` module doc, 4) and copy again.

Why this keeps the simulator's bits: a device runs one branch, so its own effects keep their
order (head, then its copies). A receiver's memory that a copy lands in is left alone from the
copy's start to its wait in a race-free kernel, so the receiver's own head cannot touch it
unless a handshake ordered it, and a copy after a wait only some devices make is refused
(``check_handshakes``; a wait in a *sibling* branch is not on the sender's path and does not
count). A branch that reads or writes memory after its copy starts would see that access moved
after every device's copies: refused, as is a copy whose window or source view is computed
from what the head loads.

A condition on anything, data included, whose every branch is one remote copy to the same
target and window, from a source of its own (``pl.select_ref`` of the source, picked by an SMEM
value), does not decide the communication, only the payload (``picked``): a ``cond`` that
reads the branch's source, then one ``exchange`` every device takes. The branches' waits and
send sides are counters once compiled.
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir import indexing
from minipallas.ir.builder import infer_result_types
from minipallas.ir.core import Block, Op, Value
from minipallas.ir.opdef import OPS
from minipallas.ir.types import ArrayType, RefType
from minipallas.kernels.devices.rows import DATA, STATIC, Remote

# after a branch's first remote copy: what may follow (counters once compiled)
_COUNTERS = frozenset({"dma_wait", "semaphore_signal", "semaphore_wait"})


class Masked:
    """The rules for a ``cond`` on the device's position around remote copies. The rebuild
    (``local._Device``) provides the state below and ``op``, ``fed``, ``refuse``, ``devices``,
    ``values_at``, ``varies``, ``value``, ``remote_copy``, ``note_order``."""

    env: dict[Value, Value | Remote]
    kind: dict[Value, int]
    defs: dict[Value, Op]
    source: dict[Value, Value]
    rowed: set[Value]
    senders: set[int] | None
    branch: tuple[int, int] | None  # (the masked cond's id, the branch) being rebuilt
    heads: set[int]  # the ids of the conds made of branches' heads

    def maskable(self, op: Op) -> bool:
        """A ``cond`` on the device's position alone, with no results, that copies (module
        doc); a head made here is rebuilt as any other cond."""
        copies = any(o.name == "dma_start" for region in op.regions for o in region.walk())
        static = self.kind.get(op.operands[0], DATA) == STATIC and self.senders is None
        return copies and static and not op.results and id(op) not in self.heads

    def picked(self, op: Op) -> list[Op] | None:
        """A ``cond`` whose branches each copy to the same target and window, from sources of
        their own (module doc): the source read under the ``cond``, one ``exchange``; None
        when ``op`` is not such a cond (its views and pure ops rebuilt ahead, harmlessly)."""
        if op.results or self.senders is not None or id(op) in self.heads:
            return None
        if not self.varies(op.operands[0]):  # every device takes one branch: it stays
            return None
        ops: list[Op] = []
        copies, waits = [], []
        for k, branch in enumerate(op.regions):
            mine = [i for i, o in enumerate(branch.ops)
                    if o.name == "dma_start" and not _after_copy(o)]  # fmt: skip
            if len(mine) != 1:
                return None
            (at,) = mine
            before, copy, after = branch.ops[:at], branch.ops[at], branch.ops[at + 1 :]
            if not all(map(_no_memory, before)) or not all(
                _no_memory(o) or _after_copy(o) for o in after
            ):
                return None
            self.bind(op, k, branch)
            ops += [new for o in branch.ops if _no_memory(o) for new in self.op(o)]
            if not isinstance(self.env.get(copy.operands[1]), Remote):
                return None
            copies.append(copy)
            waits += [o for o in after if o.name in ("dma_wait", "semaphore_wait")]
        windows = {self.window(self.env[c.operands[1]]) for c in copies}
        if len(windows) != 1:
            raise self.refuse(copies[0], "copies to a device or window that a condition picks, "
                              "with the condition's other branches")  # fmt: skip
        sources = list(dict.fromkeys(self.value(c.operands[0], c) for c in copies))
        regions = []
        for c in copies:
            params = tuple(Value(v.type) for v in sources)
            read = Op("get", (params[sources.index(self.value(c.operands[0], c))],),
                      (Value(ArrayType(c.operands[0].type.shape, c.operands[0].type.dtype)),),
                      {"indexer": indexing.full(c.operands[0].type.shape)}, (), c.loc)  # fmt: skip
            regions.append(Block(params, (read,), read.results))
        index = self.value(op.operands[0], op)
        types = infer_result_types("cond", [index.type, *(v.type for v in sources)], op.attrs,
                                   tuple(regions), op.loc)  # fmt: skip
        payload = Op("cond", (index, *sources), tuple(Value(t) for t in types), op.attrs,
                     tuple(regions), op.loc)  # fmt: skip
        ops += self.remote_copy(copies[0], payload)
        for wait in waits:  # counters once compiled, but a wait only some devices make
            self.seq += 1
            self.note_order(wait, conditional=True)
        return ops

    def window(self, remote: Remote) -> tuple:
        """Where a ``Remote`` view is, as a key: its buffer, target and window (a target by
        the operand a branch parameter receives, or by its value when constant)."""
        targets = []
        for t in remote.targets:
            while t in self.source:
                t = self.source[t]
            made = self.defs.get(t)
            constant = made is not None and made.name == "constant"
            targets.append(str(made.attrs["value"]) if constant else t)
        return remote.base, tuple(targets), remote.indexer, remote.dyn

    def bind(self, op: Op, k: int, branch: Block) -> None:
        """Branch ``k``'s parameters as the operands they receive (rows, kinds, views)."""
        for i, (_, operand) in self.fed(op, k, branch).items():
            p = branch.params[i]
            self.env[p], self.source[p] = self.env[operand], operand
            self.kind[p] = self.kind.get(operand, DATA)
            if operand in self.rowed:
                self.rowed.add(p)

    def masked_cond(self, op: Op) -> list[Op]:
        """Each branch taken apart for the devices that take it (module doc)."""
        last = len(op.regions) - 1
        taken = [min(max(self.values_at(op.operands[:1], d)[0], 0), last) for d in self.devices()]
        ops: list[Op] = []
        for k, branch in enumerate(op.regions):
            self.bind(op, k, branch)
            self.senders = {d for d, t in enumerate(taken) if t == k}
            self.branch = (id(op), k)
            try:
                ops += self.taken_apart(op, k, branch.ops)
            finally:
                self.senders, self.branch = None, None
        return ops

    def taken_apart(self, op: Op, k: int, body: Sequence[Op]) -> list[Op]:
        """Branch ``k``'s ops: its head under the condition, its copies and what follows them
        run by every device."""
        ops: list[Op] = []
        head: list[Op] = []
        made: set[Value] = set()  # old values the head makes
        copied = False
        for inner in body:
            from_head = any(v in made for v in inner.operands)
            remote = inner.name == "dma_start" and isinstance(self.env.get(inner.operands[1]),
                                                               Remote)  # fmt: skip
            if remote and from_head:
                raise self.refuse(
                    inner,
                    "copies a window or source computed from what its branch, under a "
                    "condition that may differ by device, loads",
                )
            if remote or (not from_head and _no_memory(inner)):
                if remote and not copied:
                    ops += self.head_cond(op, k, head)
                    copied = True
                ops += self.op(inner)
            elif copied and (not _after_copy(inner) or from_head):
                raise self.refuse(
                    inner,
                    "reads or writes memory after a remote copy's start, under a condition that "
                    "may differ by device: compiled, the copy is every device's collective and "
                    "this access would move after it",
                )
            elif copied:
                ops += self.op(inner)
            else:
                head.append(inner)
                made.update(inner.results)
        return ops if copied else ops + self.head_cond(op, k, head)

    def head_cond(self, op: Op, k: int, head: list[Op]) -> list[Op]:
        """``head`` (old ops of branch ``k``) as a ``cond`` on ``op``'s index whose other
        branches do nothing, rebuilt as any cond: the values it uses from outside passed in."""
        if not head:
            return []
        inside = {v for h in head for v in h.results}
        free = list(dict.fromkeys(v for h in head for v in h.operands if v not in inside))
        regions = []
        for j in range(len(op.regions)):
            params = tuple(Value(v.type) for v in free)
            ops: list[Op] = []
            if j == k:
                rename = dict(zip(free, params, strict=True))
                for h in head:
                    new = h.renamed(tuple(rename.get(v, v) for v in h.operands))
                    rename.update(zip(h.results, new.results, strict=True))
                    self.defs.update((r, new) for r in new.results)
                    ops.append(new)
            regions.append(Block(params, tuple(ops), ()))
        cond = Op("cond", (op.operands[0], *free), (), op.attrs, tuple(regions), op.loc)
        self.heads.add(id(cond))
        senders, self.senders = self.senders, None
        try:
            return self.op(cond)
        finally:
            self.senders = senders


def _after_copy(op: Op) -> bool:
    """What may follow a branch's first remote copy: waits, signals, a copy's send side (a
    ``dma_start`` from a ref to itself, as the importer counts one): counters once compiled."""
    return op.name in _COUNTERS or op.name == "dma_start" and op.operands[0] is op.operands[1]


def _no_memory(op: Op) -> bool:
    """A view, the device's position, or a pure op with no regions and no ref operand: safe
    on every device."""
    if op.name in ("ref.at", "program_id", "axis_index"):
        return True
    refs = any(isinstance(v.type, RefType) for v in op.operands)
    return OPS[op.name].pure and not op.regions and not refs
