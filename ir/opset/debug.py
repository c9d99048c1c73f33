"""``debug_print``: upstream's ``jax.debug.print`` as an op. It has no results and touches no
ref, but it acts outside the program (it prints), so it is declared ``observable``: no pass may
remove it, however unused its operands are.

Attributes: ``fmt``, the format string; ``names``, one per operand, ``""`` for a positional
argument (those come first) or the keyword it is passed as; ``options``, the numpy print
options upstream captured that differ from numpy's defaults (``DEFAULT_OPTIONS``), as
``(name, value)`` pairs. Printed form::

    debug_print %a, %b, fmt "a={} b={b}", names ("", "b"), options (precision 3)
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from minipallas.ir.lexer import IDENT, NUMBER, STRING
from minipallas.ir.opdef import Attrs, Regions, Types, Variadic, declare, require
from minipallas.ir.opset.common import no_refs
from minipallas.ir.syntax import Parsed, Pieces

if TYPE_CHECKING:
    from minipallas.ir.core import Op
    from minipallas.ir.parser import Parser
    from minipallas.ir.printer import Printer

# numpy's print options at start-up; ``options`` holds only those that differ.
DEFAULT_OPTIONS = {
    "edgeitems": 3,
    "threshold": 1000,
    "floatmode": "maxprec",
    "precision": 8,
    "suppress": False,
    "linewidth": 75,
    "nanstr": "nan",
    "infstr": "inf",
    "sign": "-",
    "legacy": False,
}


def _value_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)


class DebugPrint:
    """Operands, then the format string, the operands' names and the print options that differ
    from numpy's defaults (left out when none)."""

    def print(self, p: Printer, op: Op) -> Pieces:
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


@declare(
    "debug_print", operands=(Variadic("args"),), syntax=DebugPrint(), pure=False, observable=True
)
def debug_print(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """Prints ``fmt`` formatted with the operands, as ``jax.debug.print`` does:
    ``debug_print %x, %i, fmt "x={x} i={}", names ("", "x")`` (positional operands first)."""
    no_refs(types, "operand")
    require(isinstance(attrs.get("fmt"), str), "attribute 'fmt' must be a string")
    names = attrs.get("names")
    require(
        isinstance(names, tuple) and len(names) == len(types),
        f"attribute 'names' must be a tuple of one string per operand ({len(types)})",
    )
    keyword = [bool(n) for n in names]
    require(keyword == sorted(keyword), f"positional operands must come first, got {names}")
    options = attrs.get("options")
    require(
        isinstance(options, tuple)
        and all(len(o) == 2 and o[0] in DEFAULT_OPTIONS for o in options),
        f"attribute 'options' must be (name, value) pairs of {', '.join(DEFAULT_OPTIONS)}",
    )
    return ()
