"""Control flow: counted loops, while loops, N-way conditionals and calls.

Regions are closed: each op passes what its regions need as operands (refs included), and the
region receives them as parameters. Loop carries and results are arrays, never refs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from minipallas.ir.core import Function
from minipallas.ir.opdef import Attrs, OperandTypes, Regions, Types, Variadic, declare, require
from minipallas.ir.opset.common import int_scalar, no_refs, same_type
from minipallas.ir.syntax import Parsed, Pieces, symbol
from minipallas.ir.types import ArrayType, Type

if TYPE_CHECKING:
    from minipallas.ir.core import Block, Op
    from minipallas.ir.parser import Parser
    from minipallas.ir.printer import Printer


def _num(attrs: Attrs, name: str) -> int:
    n = attrs.get(name)
    require(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0,
        f"attribute '{name}' must be a non-negative int, got {n!r}",
    )
    return n


def _params_match(block: Block, types: Sequence[Type], what: str) -> None:
    require(
        len(block.params) == len(types),
        f"{what} has {len(block.params)} parameters, expected {len(types)}",
    )
    for i, (p, t) in enumerate(zip(block.params, types, strict=True)):
        same_type(p.type, t, f"{what} parameter {i}")


def _yields_match(block: Block, types: Sequence[Type], what: str) -> None:
    require(
        len(block.results) == len(types),
        f"{what} yields {len(block.results)} values, expected {len(types)}",
    )
    for i, (r, t) in enumerate(zip(block.results, types, strict=True)):
        same_type(r.type, t, f"{what} result {i}")


class For:
    """``%c = for %lo to %hi (%consts) iter (%inits) { ^(%i, %consts, %carries): ... }``;
    the ``(...)`` and ``iter (...)`` lists are left out when empty."""

    def print(self, p: Printer, op: Op) -> Pieces:
        lo, hi, consts, inits = map(op.group, ("lower", "upper", "consts", "inits"))
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


@declare(
    "for",
    operands=("lower", "upper", Variadic("consts", count="num_consts"), Variadic("inits")),
    syntax=For(),
    regions=1,
    pure=False,
    params=(("index", "consts", "inits"),),
)
def for_(types: OperandTypes, attrs: Attrs, regions: Regions) -> Types:
    """Counted loop ``for i in range(lower, upper)`` with carried values::

        %c = for %lo to %hi (%ref) iter (%init) {
        ^(%i: i32[], %r: Ref{f32[8]}, %acc: f32[]):
          ...
          yield %acc2
        } : f32[]

    Operands: lower, upper, ``num_consts`` loop-invariant values, then the initial carries.
    """
    (body,) = regions
    require(len(types) >= 2, "expected lower and upper bounds")
    n_consts = _num(attrs, "num_consts")
    require(len(types) >= 2 + n_consts, f"expected at least {n_consts} loop-invariant operands")
    lower = int_scalar(types.one("lower"), "lower bound")
    same_type(types.one("upper"), lower, "upper bound")
    consts, inits = types.group("consts"), types.group("inits")
    no_refs(inits, "loop carry")
    _params_match(body, (lower, *consts, *inits), "body")
    _yields_match(body, inits, "body")
    return tuple(inits)


class While:
    """``%c = while (%cond_consts) (%body_consts) iter (%inits) cond {...} body {...}``."""

    def print(self, p: Printer, op: Op) -> Pieces:
        cond_consts, body_consts, inits = map(op.group, ("cond_consts", "body_consts", "inits"))
        pieces: Pieces = [
            f" ({p.values(cond_consts)}) ({p.values(body_consts)})",
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


@declare(
    "while",
    operands=(
        Variadic("cond_consts", count="cond_nconsts"),
        Variadic("body_consts", count="body_nconsts"),
        Variadic("inits"),
    ),
    syntax=While(),
    regions=2,
    pure=False,
    params=(("cond_consts", "inits"), ("body_consts", "inits")),
)
def while_(types: OperandTypes, attrs: Attrs, regions: Regions) -> Types:
    """Loop while a condition region yields true::

        %c = while (%x) (%r) iter (%init) cond {
        ^(%x: f32[], %c: i32[]): ... yield %p
        } body {
        ^(%r: Ref{f32[8]}, %c: i32[]): ... yield %c2
        } : i32[]

    Operands: ``cond_nconsts`` values for the condition, ``body_nconsts`` for the body, then the
    initial carries. The condition yields one ``bool[]``.
    """
    cond, body = regions
    nc, nb = _num(attrs, "cond_nconsts"), _num(attrs, "body_nconsts")
    require(len(types) >= nc + nb, f"expected at least {nc + nb} loop-invariant operands")
    cond_consts, body_consts, inits = map(types.group, ("cond_consts", "body_consts", "inits"))
    no_refs(inits, "loop carry")
    _params_match(cond, (*cond_consts, *inits), "condition")
    _yields_match(cond, (ArrayType((), "bool"),), "condition")
    _params_match(body, (*body_consts, *inits), "body")
    _yields_match(body, inits, "body")
    return tuple(inits)


class Cond:
    """``%r = cond %index (%args) [{ branch 0 }, { branch 1 }] : f32[]``."""

    def print(self, p: Printer, op: Op) -> Pieces:
        pieces: Pieces = [f" {p.values(op.group('index'))} ({p.values(op.group('args'))}) ["]
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


@declare(
    "cond",
    operands=("index", Variadic("args")),
    syntax=Cond(),
    regions=None,
    pure=False,
    params=(("args",),),
)
def cond(types: OperandTypes, attrs: Attrs, regions: Regions) -> Types:
    """Run one of N branches chosen by an integer index (clamped into range, as in lax.switch)::

    %r = cond %idx (%a, %ref) [{
    ^(%a: f32[], %ref: Ref{f32[8]}): ... yield %x
    }, {
    ^(%a: f32[], %ref: Ref{f32[8]}): ... yield %y
    }] : f32[]
    """
    require(len(regions) >= 1, "needs at least one branch")
    require(len(types) >= 1, "expected an index operand")
    int_scalar(types.one("index"), "branch index")
    args = types.group("args")
    out = regions[0].result_types
    no_refs(out, "result")
    for k, branch in enumerate(regions):
        _params_match(branch, args, f"branch {k}")
        _yields_match(branch, out, f"branch {k}")
    return out


class Call:
    """``%r = call @f(%x, %ref) : f32[8]``; the callee is defined earlier in the text."""

    def print(self, p: Printer, op: Op) -> Pieces:
        callee = op.attrs.get("callee")
        name = symbol(callee.name) if callee is not None else "@<missing>"
        return [f" {name}({p.values(op.operands)})"]

    def parse(self, r: Parser) -> Parsed:
        callee = r.callee()
        return Parsed(r.paren_values("after the callee"), {"callee": callee})


@declare("call", operands=(Variadic("args"),), syntax=Call(), pure=False)
def call(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """Call another function: ``%r = call @f(%x, %ref) : f32[8]``."""

    callee = attrs.get("callee")
    require(isinstance(callee, Function), f"attribute 'callee' must be a function, got {callee!r}")
    params = callee.body.param_types
    require(
        len(types) == len(params), f"@{callee.name} takes {len(params)} arguments, got {len(types)}"
    )
    for i, (t, p) in enumerate(zip(types, params, strict=True)):
        same_type(t, p, f"argument {i} of @{callee.name}")
    return callee.result_types
