"""Reading and writing a discharged ref through its chain of views.

A view op on a discharged ref emits nothing: its rule just extends the parent's ``Handle`` with
one ``View`` step. The work happens when a state op uses the view:

- *read*: start from the root's current value and apply each step's array transform in order
  (``ref.at`` -> ``slice``/``dynamic_slice`` with the view's indexer, ``ref.reshape`` ->
  ``reshape``, ``ref.bitcast`` -> ``bitcast``, or ``packed_bitcast`` across widths,
  ``ref.transpose`` -> ``transpose``), then the
  state op's own indexer;
- *write*: compute the view's new full value (the old one with the op's window replaced), then
  push it back through the chain in reverse: ``ref.at`` becomes a ``dynamic_update_slice`` into
  the parent's value, reshape/bitcast are undone by their inverse, transpose by the inverse
  permutation. The result is the root's new value.

Static indices need no run-time clamping, and a window that covers the whole array (all full
slices) emits no slice at all.
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir.core import Op, Value
from minipallas.ir.indexing import Indexer
from minipallas.ir.location import UNKNOWN, Location
from minipallas.ir.types import ArrayType
from minipallas.passes.discharge.engine import DischargeScope, Handle, View, rule
from minipallas.passes.indexer_facts import IndexerFacts, facts


def is_full(indexer: Indexer, shape: Sequence[int]) -> bool:
    """Whether ``indexer`` selects the whole array, unchanged in shape.

    A dynamic start counts: a slice as long as its dimension is clamped to start at 0.
    """
    return facts(indexer).unit_sizes == tuple(shape)


def _apply(scope: DischargeScope, view: View, x: Value) -> Value:
    """The value a view shows, given its parent's value ``x``."""
    out = view.type.value_type
    if view.op == "ref.at":
        indexer = view.attrs["indexer"]
        if is_full(indexer, view.parent.shape):
            return x
        return scope.emit_typed(
            facts(indexer).read_op, [x, *view.dyn], out, view.loc, indexer=indexer
        )
    if view.op == "ref.reshape":
        return scope.emit_typed("reshape", [x], out, view.loc, shape=out.shape)
    if view.op == "ref.bitcast":
        return _bitcast(scope, view, x, out)
    return scope.emit_typed("transpose", [x], out, view.loc, permutation=view.attrs["permutation"])


def _bitcast(scope: DischargeScope, view: View, x: Value, out: ArrayType) -> Value:
    """``bitcast`` of one width; ``packed_bitcast`` (which its inverse undoes) of another."""
    name = "bitcast" if out.shape == x.type.shape else "packed_bitcast"
    return scope.emit_typed(name, [x], out, view.loc, dtype=out.dtype)


def _unapply(scope: DischargeScope, view: View, parent: Access, level: int, new: Value) -> Value:
    """The parent's new value, given the view's new value ``new``."""
    out = view.parent.value_type
    if view.op == "ref.at":
        indexer = view.attrs["indexer"]
        if is_full(indexer, view.parent.shape):
            return new
        return scope.emit_typed(
            facts(indexer).write_op,
            [parent.level(level), *view.dyn, new],
            out,
            view.loc,
            indexer=indexer,
        )
    if view.op == "ref.reshape":
        return scope.emit_typed("reshape", [new], out, view.loc, shape=out.shape)
    if view.op == "ref.bitcast":
        return _bitcast(scope, view, new, out)
    perm = view.attrs["permutation"]
    inverse = tuple(sorted(range(len(perm)), key=perm.__getitem__))
    return scope.emit_typed("transpose", [new], out, view.loc, permutation=inverse)


class Access:
    """One state op's access to a discharged ref: reads and writes through its views.

    Values along the chain (the root seen through the first k views) are computed on demand and
    kept, so a read-modify-write walks the chain once. Windows are given by their indexer's
    ``IndexerFacts`` (``known``), which the state op's rule has looked up already.
    """

    __slots__ = ("scope", "handle", "loc", "_levels")

    def __init__(self, scope: DischargeScope, handle: Handle, loc: Location = UNKNOWN) -> None:
        self.scope = scope
        self.handle = handle
        self.loc = loc
        self._levels: list[Value] | None = None  # made by the first ``level`` call

    def level(self, k: int) -> Value:
        """The root's value seen through the first ``k`` views of the chain."""
        levels = self._levels
        if levels is None:
            levels = self._levels = [self.handle.root.value]
        while len(levels) <= k:
            chain = self.handle.chain[: len(levels)]
            derived = self.handle.root.derived
            value = derived.get(chain)
            if value is None:
                value = derived[chain] = _apply(self.scope, chain[-1], levels[-1])
            levels.append(value)
        return levels[k]

    def value(self) -> Value:
        """The full current value of the ref the handle names."""
        chain = self.handle.chain
        return self.level(len(chain)) if chain else self.handle.root.value

    def read(self, known: IndexerFacts, dyn: Sequence[Value], window: ArrayType) -> Value:
        """The window ``known.indexer`` selects, of type ``window``."""
        handle = self.handle
        full = self.level(len(handle.chain)) if handle.chain else handle.root.value
        if known.unit_sizes == handle.type.shape:
            return full
        scope = self.scope
        canonical = known.canonical
        found = scope.ctx.windows.get(id(canonical))
        if found is None or found[0] is not canonical:
            found = scope.ctx.window(canonical)
        _, number, attrs = found
        key = (handle.chain, number, *dyn)
        derived = handle.root.derived
        value = derived.get(key)
        if value is None:
            value = derived[key] = Value(window)
            scope.ops.append(
                Op.of_parts(known.read_op, (full, *dyn), (value,), attrs, (), self.loc)
            )
        return value

    def write_window(
        self,
        known: IndexerFacts,
        dyn: Sequence[Value],
        window: Value,
        accumulate: bool = False,
    ) -> None:
        """Replaces (or, with ``accumulate`` and an array indexer, adds into) a window."""
        handle = self.handle
        if not accumulate and known.unit_sizes == handle.type.shape:
            self.write(window)
            return
        full = self.level(len(handle.chain)) if handle.chain else handle.root.value
        op = known.accumulate_op if accumulate else known.write_op
        scope = self.scope
        _, _, attrs = scope.ctx.window(known.canonical)
        new = Value(full.type)
        scope.ops.append(Op.of_parts(op, (full, *dyn, window), (new,), attrs, (), self.loc))
        self.write(new)

    def write(self, new: Value) -> None:
        """Replaces the ref's whole value, pushing it back through the views to the root."""
        chain = self.handle.chain
        for k in range(len(chain) - 1, -1, -1):
            new = _unapply(self.scope, chain[k], self, k, new)
        root = self.handle.root
        root.value = new
        root.derived = {}  # what it remembered was derived from the old value
        self._levels = None


@rule("ref.at", "ref.reshape", "ref.bitcast", "ref.transpose")
def _view(scope: DischargeScope, op: Op) -> Sequence[Handle]:
    """A view of a discharged ref emits nothing; it extends the parent's chain."""
    parent = scope.handles[op.operands[0]]
    dyn = tuple(scope.value(v) for v in op.operands[1:])
    step = View(op.name, op.attrs, dyn, parent.type, op.result.type, op.loc)
    return [Handle(parent.root, (*parent.chain, step))]
