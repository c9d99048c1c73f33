"""Each op's text syntax: how it prints and how it parses, side by side, one rule per op.

A line of text IR is ``%results = NAME <body> : <result types> <loc>``; the printer and parser
handle the names, types and location, and an op's rule handles only the ``<body>``. ``print``
returns the body as pieces: strings, and ``Block`` objects where a region goes (the printer
opens ``{``, prints the region indented and closes ``}``). ``parse`` reads the same body back
into a ``Parsed``. Attributes that the result type already shows (a ``reshape``'s shape, a
``convert``'s dtype, an ``iota``'s type) are not printed twice: ``Parsed.from_types`` reads
them off the printed result type.

Every op in ``ir.OPS`` has a rule here; a test checks it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from minipallas.errors import ParseError
from minipallas.ir import indexing
from minipallas.ir.core import Block, Op, Value
from minipallas.ir.literal_text import build_literal, format_literal
from minipallas.ir.opset.arrays import (
    ARITHMETIC,
    BITWISE,
    COMPARISONS,
    FLOAT_BINARY,
    SHIFTS,
    UNARY,
)
from minipallas.ir.types import ArrayType, Type

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


class Rule(Protocol):
    def print(self, p: Printer, op: Op) -> Pieces: ...

    def parse(self, r: Parser) -> Parsed: ...


SYNTAX: dict[str, Rule] = {}


def _use(rule: Rule, *names: str) -> None:
    for name in names:
        if name in SYNTAX:
            raise ValueError(f"op {name!r} has two syntax rules")
        SYNTAX[name] = rule


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
        n_dyn = indexing.num_dyn(op.attrs.get("indexer", ()))
        rest = op.operands[1 + n_dyn :]
        text = [" ", p.indexed(op), *(f", {p.value(v)}" for v in rest[: self.n_values])]
        extras = iter(rest[self.n_values :])
        for keyword, flag in self.flags:
            if op.attrs.get(flag):
                value = next(extras, None)
                text.append(f", {keyword} {p.value(value) if value else '%undef'}")
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


class Constant:
    """``%c = constant 1.5 : f32[8]`` (a splat) or ``%c = constant [1, 2] : i32[2]``."""

    def print(self, p: Printer, op: Op) -> Pieces:
        return [" " + format_literal(op.attrs["value"])]

    def parse(self, r: Parser) -> Parsed:
        tokens, shape, start = r.literal()

        def value(types: list[Type]) -> dict[str, Any]:
            (t,) = types[:1]
            if not isinstance(t, ArrayType):
                raise ParseError(
                    f"a constant's type must be an array type, got {t}",
                    op="constant",
                    loc=r.where(start),
                )
            if shape is not None and shape != t.shape and (t.size or len(tokens)):
                raise ParseError(
                    f"the value has shape {list(shape)}, but the type is {t}",
                    op="constant",
                    loc=r.where(start),
                )
            return {"value": build_literal(tokens, t, shape is None, r.where)}

        return Parsed([], from_types=value)


class Call:
    """``%r = call @f(%x, %ref) : f32[8]``; the callee is defined earlier in the text."""

    def print(self, p: Printer, op: Op) -> Pieces:
        callee = op.attrs.get("callee")
        name = symbol(callee.name) if callee is not None else "@<missing>"
        return [f" {name}({p.values(op.operands)})"]

    def parse(self, r: Parser) -> Parsed:
        callee = r.callee()
        return Parsed(r.paren_values("after the callee"), {"callee": callee})


class RunScoped:
    """``%o = run_scoped(%x) collective_axes ("x") { ^(%scratch, %x_in): ... } : f32[8]``."""

    def print(self, p: Printer, op: Op) -> Pieces:
        axes = op.attrs.get("collective_axes", ())
        names = ", ".join(json.dumps(a) for a in axes)
        return [
            f"({p.values(op.operands)})",
            f" collective_axes ({names})" if axes else "",
            " ",
            *op.regions,
        ]

    def parse(self, r: Parser) -> Parsed:
        operands = r.paren_values("after 'run_scoped'")
        axes = r.string_tuple("after 'collective_axes'") if r.accept("collective_axes") else ()
        return Parsed(operands, {"collective_axes": axes}, [r.region()])


class For:
    """``%c = for %lo to %hi (%consts) iter (%inits) { ^(%i, %consts, %carries): ... }``;
    the ``(...)`` and ``iter (...)`` lists are left out when empty."""

    def print(self, p: Printer, op: Op) -> Pieces:
        n = op.attrs.get("num_consts", 0)
        lo, hi, consts, inits = (
            op.operands[:1],
            op.operands[1:2],
            op.operands[2 : 2 + n],
            op.operands[2 + n :],
        )
        return [
            f" {p.values(lo)} to {p.values(hi)}",
            f" ({p.values(consts)})" if consts else "",
            f" iter ({p.values(inits)})" if inits else "",
            " ",
            *op.regions,
        ]

    def parse(self, r: Parser) -> Parsed:
        lower = r.operand("as the lower bound")
        r.expect("to", "after the lower bound")
        upper = r.operand("as the upper bound")
        consts = r.paren_values("") if r.at("(") else []
        inits = r.paren_values("after 'iter'") if r.accept("iter") else []
        return Parsed([lower, upper, *consts, *inits], {"num_consts": len(consts)}, [r.region()])


class While:
    """``%c = while (%cond_consts) (%body_consts) iter (%inits) cond {...} body {...}``."""

    def print(self, p: Printer, op: Op) -> Pieces:
        nc, nb = op.attrs.get("cond_nconsts", 0), op.attrs.get("body_nconsts", 0)
        ops = op.operands
        inits = ops[nc + nb :]
        pieces: Pieces = [
            f" ({p.values(ops[:nc])}) ({p.values(ops[nc : nc + nb])})",
            f" iter ({p.values(inits)})" if inits else "",
        ]
        for label, region in zip((" cond ", " body "), op.regions, strict=False):
            pieces += [label, region]
        return pieces

    def parse(self, r: Parser) -> Parsed:
        cond_consts = r.paren_values("after 'while'")
        body_consts = r.paren_values("after the condition's operands")
        inits = r.paren_values("after 'iter'") if r.accept("iter") else []
        r.expect("cond", "before the condition region")
        cond = r.region()
        r.expect("body", "before the body region")
        body = r.region()
        attrs = {"cond_nconsts": len(cond_consts), "body_nconsts": len(body_consts)}
        return Parsed([*cond_consts, *body_consts, *inits], attrs, [cond, body])


class Cond:
    """``%r = cond %index (%args) [{ branch 0 }, { branch 1 }] : f32[]``."""

    def print(self, p: Printer, op: Op) -> Pieces:
        pieces: Pieces = [f" {p.values(op.operands[:1])} ({p.values(op.operands[1:])}) ["]
        for k, branch in enumerate(op.regions):
            pieces += [", "] if k else []
            pieces.append(branch)
        return [*pieces, "]"]

    def parse(self, r: Parser) -> Parsed:
        index = r.operand("as the branch index")
        args = r.paren_values("after the branch index")
        r.expect("[", "before the branches")
        branches = [r.region()]
        while r.accept(","):
            branches.append(r.region())
        r.expect("]", "after the branches")
        return Parsed([index, *args], {}, branches)


def _dtype(t: Type) -> dict[str, Any]:
    return {"dtype": t.dtype}


def _shape(t: Type) -> dict[str, Any]:
    return {"shape": t.shape}


def _type(t: Type) -> dict[str, Any]:
    return {"type": t}


_use(Operands(), *ARITHMETIC, *FLOAT_BINARY, *BITWISE, *SHIFTS, *COMPARISONS, *UNARY, "select")
_use(Operands(_dtype), "convert", "bitcast", "dot", "ref.bitcast")
_use(Operands(_shape), "reshape", "ref.reshape")
_use(Operands(_type), "uninitialized")
_use(IntsAttr("permutation"), "transpose", "ref.transpose")
_use(IntsAttr("axes"), "reduce_sum", "reduce_max", "reduce_min")
_use(IntsAttr("dims", _shape), "broadcast_in_dim")
_use(IntAttr("axis"), "program_id", "num_programs")
_use(IntAttr("dimension", _type), "iota")
_use(Constant(), "constant")
_use(Windowed(0), "get", "ref.at", "slice", "dynamic_slice", "gather")
_use(Windowed(1), "swap", "addupdate", "dynamic_update_slice", "scatter", "scatter_add")
_use(Windowed(0, (("mask", "masked"), ("other", "has_other"))), "load")
_use(Windowed(1, (("mask", "masked"),)), "store")
_use(Call(), "call")
_use(RunScoped(), "run_scoped")
_use(For(), "for")
_use(While(), "while")
_use(Cond(), "cond")

from minipallas.ir import syntax_debug, syntax_structural  # noqa: E402, F401  (register theirs)
