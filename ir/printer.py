"""The printer: IR to text that reads like a jaxpr with MLIR's punctuation.

::

    func @kernel(%0: Ref{f32[8,128], tpu.vmem}, %1: i32[]) -> (f32[8]) effects {read 0} {
      %2 = get %0[%1, 0:8] : f32[8]
      return %2
    }

Values are numbered ``%0, %1, ...`` in the order they appear in the text, so the output is
deterministic. Each op's own syntax (what follows its name) comes from the rule its
declaration gives (``OPS[name].syntax``); this module lays out lines, names values and prints
types, indexers and locations. Lines are collected in a list and joined once, so printing is linear.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from minipallas.ir.effects import Effects, effects
from minipallas.ir.errors import MiniPallasError
from minipallas.ir.indexing import Array, Dyn, Int, Slice
from minipallas.ir.location import Location
from minipallas.ir.nodes import Block, Op, Value
from minipallas.ir.opdef import OPS
from minipallas.ir.syntax import symbol

if TYPE_CHECKING:  # for annotations only: ir.core imports this module for Function.__str__
    from minipallas.ir.core import Function, Module

INDENT = "  "


def print_function(fn: Function, *, locations: bool = False) -> str:
    """``fn`` as text, preceded by every function it calls (callees before callers)."""
    return _print_all([*fn.callees(), fn], locations)


def print_module(module: Module, *, locations: bool = False) -> str:
    """Every function of ``module`` in order, each preceded by callees not yet printed."""
    order: list[Function] = []
    seen: set[int] = set()
    for fn in module.functions:
        for f in (*fn.callees(), fn):
            if id(f) not in seen:
                seen.add(id(f))
                order.append(f)
    return _print_all(order, locations)


def _print_all(functions: list[Function], locations: bool) -> str:
    return "\n\n".join(Printer(locations).function(fn) for fn in functions)


def location_text(loc: Location) -> str:
    """``loc("file.py":12)`` for traced code, ``loc(3:7)`` for text positions, else
    ``loc(unknown)``."""
    if not loc:
        return "loc(unknown)"
    if not loc.file:
        return f"loc({loc.line}:{loc.col})"
    col = f":{loc.col}" if loc.col else ""
    return f"loc({json.dumps(loc.file)}:{loc.line}{col})"


def effects_text(effects: frozenset) -> str:
    """``{read 0, write 0, accum 1}``: by position, then read/write/accum (``Effect``'s order)."""
    return str(Effects(effects))


class Printer:
    """Prints one function; value names are local to it."""

    def __init__(self, locations: bool = False) -> None:
        self.locations = locations
        self.lines: list[str] = []
        self.names: dict[Value, str] = {}
        self.defined = 0
        self.undefined = 0

    # -- values -----------------------------------------------------------------------------

    def define(self, value: Value) -> str:
        name = self.names[value] = f"%{self.defined}"
        self.defined += 1
        return name

    def value(self, value: Value) -> str:
        """The name of a used value. A value used before any definition (invalid IR, printed
        while debugging) gets a ``%undef.N`` name so the text still shows the mistake."""
        name = self.names.get(value)
        if name is None:
            name = self.names[value] = f"%undef.{self.undefined}"
            self.undefined += 1
        return name

    def values(self, values: tuple[Value, ...] | list[Value]) -> str:
        return ", ".join(map(self.value, values))

    # -- structure ----------------------------------------------------------------------------

    def function(self, fn: Function) -> str:

        params = ", ".join(f"{self.define(p)}: {p.type}" for p in fn.params)
        results = ", ".join(str(t) for t in fn.result_types)
        try:
            found = effects(fn)
        except MiniPallasError:
            found = frozenset()  # IR too broken to analyse (printed while reporting an error)
        header = f" effects {effects_text(found)}" if found else ""
        self.lines.append(f"func {symbol(fn.name)}({params}) -> ({results}){header} {{")
        self.body(fn.body, INDENT)
        self.lines.append(f"{INDENT}return {self.values(fn.body.results)}".rstrip())
        self.lines.append("}")
        return "\n".join(self.lines)

    def body(self, block: Block, indent: str) -> None:
        for op in block.ops:
            self.op(op, indent)

    def region(self, block: Block, indent: str) -> None:
        """A region's lines between ``{`` and ``}``: header with parameters, ops, ``yield``."""
        if block.params:
            params = ", ".join(f"{self.define(p)}: {p.type}" for p in block.params)
            self.lines.append(f"{indent}^({params}):")
        inner = indent + INDENT
        self.body(block, inner)
        self.lines.append(f"{inner}yield {self.values(block.results)}".rstrip())

    def op(self, op: Op, indent: str) -> None:
        opdef = OPS.get(op.name)
        if opdef is None:
            raise MiniPallasError(
                f"no text syntax for op '{op.name}'",
                op=op.name,
                loc=op.loc,
                fix="declare the op, with its syntax, in ir/opset (see minipallas.ir.OPS)",
            )
        results = ", ".join(self.define(r) for r in op.results)
        line = [indent, f"{results} = " if results else "", op.name]
        fits = opdef.groups(len(op.operands), op.attrs) is not None
        for part in opdef.syntax.print(self, op) if fits else self.unfit(op):
            if isinstance(part, Block):
                line.append("{")
                self.lines.append("".join(line))
                self.region(part, indent)
                line = [indent, "}"]
            else:
                line.append(part)
        if op.results:
            line.append(" : ")
            line.append(", ".join(str(r.type) for r in op.results))
        if self.locations:
            line.append(" ")
            line.append(location_text(op.loc))
        self.lines.append("".join(line))

    def unfit(self, op: Op) -> list[str | Block]:
        """An op whose operands do not fit its declaration, shown while that is reported: its
        operands and attributes as they are, since syntax rules read operands by group."""
        attrs = ", ".join(f"{name} = {value!r}" for name, value in op.attrs.items())
        regions = [piece for region in op.regions for piece in (" ", region)]
        return [f" ({self.values(op.operands)}) {{{attrs}}}", *regions]

    # -- attributes ---------------------------------------------------------------------------

    def indexed(self, op: Op) -> str:
        """``%r[3, 0:8, 0:16:2, ds(%k, 8), %idx, :]``: operand 0 and the op's indexer."""
        base = op.operands[0] if op.operands else None
        shape = getattr(getattr(base, "type", None), "shape", ())
        dyn = op.group("indices")
        entries = [
            self.index_entry(e, shape[d] if d < len(shape) else None, dyn)
            for d, e in enumerate(op.attrs.get("indexer", ()))
        ]
        return f"{self.value(base) if base else '%undef'}[{', '.join(entries)}]"

    def index_entry(self, entry: object, extent: int | None, dyn: tuple[Value, ...]) -> str:
        def ref(d: int | Dyn) -> str:
            if not isinstance(d, Dyn):
                return str(d)
            return self.value(dyn[d.pos]) if 0 <= d.pos < len(dyn) else f"%undef.dyn{d.pos}"

        if isinstance(entry, Int):
            return ref(entry.index)
        if isinstance(entry, Array):
            text = ref(entry.index)
            pos = entry.index.pos
            scalar = 0 <= pos < len(dyn) and getattr(dyn[pos].type, "shape", None) == ()
            return f"array({text})" if scalar else text
        if isinstance(entry, Slice):
            stride = f", {entry.stride}" if entry.stride != 1 else ""
            if isinstance(entry.start, Dyn):
                return f"ds({ref(entry.start)}, {entry.size}{stride})"
            if entry.start == 0 and entry.size == extent and entry.stride == 1:
                return ":"
            stop = entry.start + entry.size * entry.stride  # 0:16:2, as Python writes it
            if entry.size and extent is not None and stop > extent:  # unless it reads as out
                stop = entry.start + (entry.size - 1) * entry.stride + 1  # of bounds: 0:3:2
            return f"{entry.start}:{stop}" + (f":{entry.stride}" if stride else "")
        return f"<bad index {entry!r}>"

    @staticmethod
    def ints(values: tuple[int, ...]) -> str:
        return "(" + ", ".join(map(str, values)) + ")"
