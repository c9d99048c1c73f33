"""The abstract program a generator draws: statements over variables, with *open* regions.

The sampler does not build IR directly. It draws a ``Program``: a tree of ``Stmt`` s whose
bodies (``Body``) may use any variable of an enclosing body, the way Python closures and JAX
tracing see them. Two back ends read the same tree:

- ``minipallas.tools.generate.to_ir`` builds minipallas IR, turning each use of an outer variable
  into an operand of the region op and a body parameter (the IR's regions are closed);
- a later back end can emit the same program as an upstream JAX function, where closures are
  free and each statement maps onto one ``jax.lax`` / ``jax._src.state`` call.

A statement names the IR op it stands for and carries the op's attributes unchanged, so the
IR back end is a thin closure conversion and the op set documents the statement set. Region
statements use these *open* layouts (the IR's closed layouts add captured operands):

- ``run_scoped``: body params = the allocated refs;
- ``for``: args = [lower, upper, *inits]; body params = [i, *carries];
- ``while``: args = inits; bodies = (cond, body), both with params = carries;
- ``cond``: args = [index]; one body per branch, with no params;
- ``call``: args = the callee's arguments; attr ``callee`` is a ``Program`` (closed: it sees
  only its params).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from minipallas.ir.types import Type


class Var:
    """A variable of the abstract program; identity equality, like an SSA value."""

    __slots__ = ("type", "id")

    def __init__(self, type: Type, id: int) -> None:  # noqa: A002 - mirror ir.Value
        self.type = type
        self.id = id

    def __repr__(self) -> str:
        return f"v{self.id}: {self.type}"


@dataclass(eq=False)
class Body:
    """A region: parameters, statements in order, yielded variables."""

    params: tuple[Var, ...] = ()
    stmts: list[Stmt] = field(default_factory=list)
    results: tuple[Var, ...] = ()


@dataclass(eq=False)
class Stmt:
    """One statement: IR op name, argument variables, op attributes, defined variables."""

    op: str
    args: tuple[Var, ...]
    attrs: dict[str, Any]
    outs: tuple[Var, ...] = ()
    bodies: tuple[Body, ...] = ()


@dataclass(eq=False)
class Program:
    """A closed function: parameters (refs and arrays), a body, and a name."""

    name: str
    body: Body

    @property
    def params(self) -> tuple[Var, ...]:
        return self.body.params


def count_ops(body: Body) -> int:
    """How many IR ops the body becomes (one per statement, regions included, callees not)."""
    return sum(1 + sum(count_ops(b) for b in s.bodies) for s in body.stmts)
