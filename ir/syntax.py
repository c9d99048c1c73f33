"""The shared machinery of op syntax: how an op's text prints and parses, one rule per op.

A line of text IR is ``%results = NAME <body> : <result types> <loc>``; the printer and parser
handle the names, types and location, and an op's rule handles only the ``<body>``. ``print``
returns the body as pieces: strings, and ``Block`` objects where a region goes (the printer
opens ``{``, prints the region indented and closes ``}``). ``parse`` reads the same body back
into a ``Parsed``. Attributes that the result type already shows (a ``reshape``'s shape, a
``convert``'s dtype, an ``iota``'s type) are not printed twice: ``Parsed.from_types`` reads
them off the printed result type.

Each op gives its rule where it is declared (``@declare(name, syntax=...)`` in ``ir.opset``),
next to its type rule. This module holds the rules several op families share (``Operands``,
``IntsAttr``, ``IntAttr``, ``Windowed``, ``Keywords``); a family with a syntax of its own
(``for``, ``constant``, ``debug_print``...) writes it beside its declaration.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from minipallas.ir.nodes import Block, Op, Value
from minipallas.ir.types import Type

if TYPE_CHECKING:
    from minipallas.ir.parser import Parser
    from minipallas.ir.printer import Printer

Pieces = list[str | Block]
_BARE_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_.$]*\Z")


@dataclass
class Parsed:
    """What an op's syntax rule read: everything the op needs except its result types.

    ``from_types`` fills in attributes that the text shows only as the result type (a
    ``reshape``'s shape, a ``convert``'s dtype); it runs once the ``: types`` are read.
    """

    operands: list[Value] = field(default_factory=list)
    attrs: dict[str, Any] = field(default_factory=dict)
    regions: list[Block] = field(default_factory=list)
    from_types: Callable[[list[Type]], dict[str, Any]] | None = None


def symbol(name: str) -> str:
    """``@name``, quoted when the name is not a plain identifier (e.g. ``@"<lambda>"``)."""
    return f"@{name}" if _BARE_SYMBOL.match(name) else f"@{json.dumps(name)}"


@runtime_checkable
class Rule(Protocol):
    """An op's syntax: ``print`` gives the body's pieces, ``parse`` reads them back."""

    def print(self, p: Printer, op: Op) -> Pieces: ...

    def parse(self, r: Parser) -> Parsed: ...


def _from_result(read: Callable[[Type], dict[str, Any]] | None) -> Callable | None:
    return None if read is None else lambda types: read(types[0])


class Operands:
    """``%z = add %x, %y : f32[8]``; ``%y = convert %x : i32[8]``; ``%u = uninitialized : f32[8]``.

    ``read`` gives the attributes shown only by the result type.
    """

    def __init__(self, read: Callable[[Type], dict[str, Any]] | None = None) -> None:
        self.read = read

    def print(self, p: Printer, op: Op) -> Pieces:
        return [" " + p.values(op.operands)] if op.operands else []

    def parse(self, r: Parser) -> Parsed:
        return Parsed(r.values(), from_types=_from_result(self.read))


class IntsAttr:
    """Operands then a keyword and a tuple: ``%y = transpose %x, permutation (1, 0) : ...``."""

    def __init__(self, keyword: str, read: Callable[[Type], dict[str, Any]] | None = None) -> None:
        self.keyword = keyword
        self.read = read

    def print(self, p: Printer, op: Op) -> Pieces:
        values = op.attrs.get(self.keyword, ())
        return [f" {p.values(op.operands)}, {self.keyword} {p.ints(values)}"]

    def parse(self, r: Parser) -> Parsed:
        operands = r.values()
        r.expect(",", f"before '{self.keyword}'")
        r.expect(self.keyword, "after the operands")
        values = r.int_tuple(f"after '{self.keyword}'")
        return Parsed(operands, {self.keyword: values}, from_types=_from_result(self.read))


class IntAttr:
    """A keyword and an int, no operands: ``%i = program_id axis 0 : i32[]``."""

    def __init__(self, keyword: str, read: Callable[[Type], dict[str, Any]] | None = None) -> None:
        self.keyword = keyword
        self.read = read

    def print(self, p: Printer, op: Op) -> Pieces:
        return [f" {self.keyword} {op.attrs.get(self.keyword)}"]

    def parse(self, r: Parser) -> Parsed:
        r.expect(self.keyword, "after the op name")
        value = r.integer(f"after '{self.keyword}'")
        return Parsed([], {self.keyword: value}, from_types=_from_result(self.read))


class Windowed:
    """An indexed operand, ``values`` value operands, then optional keyword operands that set
    a flag attribute each: ``%v = load %r[0:8], mask %m, other %o : f32[8]``."""

    def __init__(self, values: int, flags: tuple[tuple[str, str], ...] = ()) -> None:
        self.n_values = values
        self.flags = flags

    def print(self, p: Printer, op: Op) -> Pieces:
        rest = op.operands[op.slices()["indices"].stop :]  # the values, then the flagged ones
        text = [" ", p.indexed(op), *(f", {p.value(v)}" for v in rest[: self.n_values])]
        extras = iter(rest[self.n_values :])
        for keyword, flag in self.flags:
            if op.attrs.get(flag):
                text.append(f", {keyword} {p.value(next(extras))}")
        return ["".join(text)]

    def parse(self, r: Parser) -> Parsed:
        base, dyn, indexer = r.indexed()
        operands = [base, *dyn]
        for _ in range(self.n_values):
            r.expect(",", "after the indexer")
            operands.append(r.operand(""))
        attrs: dict[str, Any] = {"indexer": indexer}
        for keyword, flag in self.flags:
            present = r.at(",") and r.tokens[r.pos + 1].text == keyword
            if present:
                r.pos += 2
                operands.append(r.operand(f"after '{keyword}'"))
            attrs[flag] = present
        return Parsed(operands, attrs)


# Readers for attributes the printed result type shows (``Operands(dtype_of)``...).


def dtype_of(t: Type) -> dict[str, Any]:
    return {"dtype": t.dtype}


def shape_of(t: Type) -> dict[str, Any]:
    return {"shape": t.shape}


def type_of(t: Type) -> dict[str, Any]:
    return {"type": t}


INT, INTS, FLAG = "int", "ints", "flag"  # the kinds of a ``Keywords`` attribute


class Keywords:
    """Operands, then each attribute of ``spec`` (``(name, kind)`` pairs) as ``, name value``,
    a ``FLAG`` printed as its bare keyword when set (the structural ops)::

        %y = pad %x, %v, low (1, 0), high (-1, 2), interior (1, 0) : f32[7,8]
        %s = cumsum %x, axis 1, reverse : f32[4,6]
        %k, %i = sort %x, %iota, dimension 1, num_keys 1 : f32[4,6], i32[4,6]
    """

    def __init__(
        self, *spec: tuple[str, str], read: Callable[[Type], dict[str, Any]] | None = None
    ) -> None:
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
        return Parsed(operands, attrs, from_types=_from_result(self.read))
