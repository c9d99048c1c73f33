"""Control flow: counted loops, while loops, N-way conditionals and calls.

Regions are closed: each op passes what its regions need as operands (refs included), and the
region receives them as parameters. Loop carries and results are arrays, never refs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from minipallas.ir.opdef import Attrs, Regions, Types, declare, require
from minipallas.ir.opset.common import int_scalar, no_refs, same_type
from minipallas.ir.types import ArrayType, Type

if TYPE_CHECKING:
    from minipallas.ir.core import Block


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


@declare("for", regions=1, pure=False)
def for_(types: Types, attrs: Attrs, regions: Regions) -> Types:
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
    lower = int_scalar(types[0], "lower bound")
    same_type(types[1], lower, "upper bound")
    n_consts = _num(attrs, "num_consts")
    require(len(types) >= 2 + n_consts, f"expected at least {n_consts} loop-invariant operands")
    consts, inits = types[2 : 2 + n_consts], types[2 + n_consts :]
    no_refs(inits, "loop carry")
    _params_match(body, (lower, *consts, *inits), "body")
    _yields_match(body, inits, "body")
    return tuple(inits)


@declare("while", regions=2, pure=False)
def while_(types: Types, attrs: Attrs, regions: Regions) -> Types:
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
    cond_consts, body_consts, inits = types[:nc], types[nc : nc + nb], types[nc + nb :]
    no_refs(inits, "loop carry")
    _params_match(cond, (*cond_consts, *inits), "condition")
    _yields_match(cond, (ArrayType((), "bool"),), "condition")
    _params_match(body, (*body_consts, *inits), "body")
    _yields_match(body, inits, "body")
    return tuple(inits)


@declare("cond", regions=None, pure=False)
def cond(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """Run one of N branches chosen by an integer index (clamped into range, as in lax.switch)::

    %r = cond %idx (%a, %ref) [{
    ^(%a: f32[], %ref: Ref{f32[8]}): ... yield %x
    }, {
    ^(%a: f32[], %ref: Ref{f32[8]}): ... yield %y
    }] : f32[]
    """
    require(len(regions) >= 1, "needs at least one branch")
    require(len(types) >= 1, "expected an index operand")
    int_scalar(types[0], "branch index")
    args = types[1:]
    out = regions[0].result_types
    no_refs(out, "result")
    for k, branch in enumerate(regions):
        _params_match(branch, args, f"branch {k}")
        _yields_match(branch, out, f"branch {k}")
    return out


@declare("call", pure=False)
def call(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """Call another function: ``%r = call @f(%x, %ref) : f32[8]``."""
    from minipallas.ir.core import Function

    callee = attrs.get("callee")
    require(isinstance(callee, Function), f"attribute 'callee' must be a function, got {callee!r}")
    params = callee.body.param_types
    require(
        len(types) == len(params), f"@{callee.name} takes {len(params)} arguments, got {len(types)}"
    )
    for i, (t, p) in enumerate(zip(types, params, strict=True)):
        same_type(t, p, f"argument {i} of @{callee.name}")
    return callee.result_types
