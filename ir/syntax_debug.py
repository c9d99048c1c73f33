"""Text syntax of ``debug_print`` (``ir.opset.debug``): operands, then the format string, the
operands' names and the print options that differ from numpy's defaults (left out when none):

    debug_print %x, %i, fmt "x={x} i={}", names ("", "x"), options (precision 3, sign " ")

Registered in ``ir.syntax.SYNTAX`` when ``ir.syntax`` is imported.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from minipallas.ir.lexer import IDENT, NUMBER, STRING
from minipallas.ir.syntax import Parsed, Pieces, _use

if TYPE_CHECKING:
    from minipallas.ir.core import Op
    from minipallas.ir.parser import Parser


def _value_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)


class DebugPrint:
    def print(self, p: Any, op: Op) -> Pieces:
        names = ", ".join(json.dumps(n) for n in op.attrs["names"])
        text = [
            f" {p.values(op.operands)}, " if op.operands else " ",
            f"fmt {json.dumps(op.attrs['fmt'])}, names ({names})",
        ]
        if op.attrs["options"]:
            pairs = ", ".join(f"{k} {_value_text(v)}" for k, v in op.attrs["options"])
            text.append(f", options ({pairs})")
        return ["".join(text)]

    def parse(self, r: Parser) -> Parsed:
        operands = [] if r.at("fmt") else r.values()
        if operands:
            r.expect(",", "before 'fmt'")
        r.expect("fmt", "after the operands")
        fmt = json.loads(r.expect_kind(STRING, "a string", "after 'fmt'").text)
        r.expect(",", "before 'names'")
        r.expect("names", "after the format string")
        names = r.string_tuple("after 'names'")
        options: list[tuple[str, Any]] = []
        if r.accept(","):
            r.expect("options", "after the names")
            r.expect("(", "after 'options'")
            while not r.accept(")"):
                if options:
                    r.expect(",", "between options")
                name = r.expect_kind(IDENT, "an option name", "in 'options'").text
                options.append((name, self.option_value(r)))
        return Parsed(operands, {"fmt": fmt, "names": names, "options": tuple(options)})

    def option_value(self, r: Parser) -> Any:
        tok = r.peek()
        if tok.kind == STRING:
            return json.loads(r.next().text)
        if tok.kind == IDENT and tok.text in ("true", "false"):
            return r.next().text == "true"
        if tok.kind == NUMBER:
            return r.integer("as an option value")
        raise r.error("expected a string, an integer, true or false as an option value")


_use(DebugPrint(), "debug_print")
