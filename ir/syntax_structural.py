"""Text syntax of the structural ops (``ir.opset.layout``, ``scans``, ``sorting``): operands,
then ``, keyword value`` per attribute, a flag printed as its bare keyword when set:

    %y = pad %x, %v, low (1, 0), high (-1, 2), interior (1, 0) : f32[7,8]
    %s = cumsum %x, axis 1, reverse : f32[4,6]
    %k, %i = sort %x, %iota, dimension 1, num_keys 1 : f32[4,6], i32[4,6]

Registered in ``ir.syntax.SYNTAX`` when ``ir.syntax`` is imported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minipallas.ir.opset.scans import CUMULATIVE
from minipallas.ir.syntax import IntsAttr, Parsed, Pieces, _dtype, _use

if TYPE_CHECKING:
    from minipallas.ir.core import Op
    from minipallas.ir.parser import Parser
    from minipallas.ir.printer import Printer

INT, INTS, FLAG = "int", "ints", "flag"


class Keywords:
    """Operands, then each attribute of ``spec`` (``(name, kind)`` pairs) as ``, name value``."""

    def __init__(self, *spec: tuple[str, str], read: Any = None) -> None:
        self.spec = spec
        self.read = read

    def print(self, p: Printer, op: Op) -> Pieces:
        text = [" " + p.values(op.operands)]
        for name, kind in self.spec:
            value = op.attrs.get(name)
            if kind == FLAG:
                text.append(f", {name}" if value else "")
            else:
                text.append(f", {name} {p.ints(value) if kind == INTS else value}")
        return ["".join(text)]

    def parse(self, r: Parser) -> Parsed:
        operands = r.values()
        attrs: dict[str, Any] = {}
        for name, kind in self.spec:
            if kind == FLAG:
                present = r.at(",") and r.tokens[r.pos + 1].text == name
                r.pos += 2 if present else 0
                attrs[name] = present
                continue
            r.expect(",", f"before '{name}'")
            r.expect(name, "after the operands")
            context = f"after '{name}'"
            attrs[name] = r.int_tuple(context) if kind == INTS else r.integer(context)
        read = self.read
        return Parsed(operands, attrs, from_types=None if read is None else lambda ts: read(ts[0]))


_use(IntsAttr("dims"), "reverse")
_use(IntsAttr("axes"), "reduce_prod")
_use(Keywords(("low", INTS), ("high", INTS), ("interior", INTS)), "pad")
_use(Keywords(("axis", INT), ("reverse", FLAG)), *CUMULATIVE)
_use(Keywords(("dimension", INT), ("num_keys", INT)), "sort")
_use(Keywords(("k", INT)), "top_k")
_use(Keywords(("axis", INT), read=_dtype), "argmax", "argmin")
