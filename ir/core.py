"""The IR's containers: functions and modules, over the values, ops and blocks of ``ir.nodes``.

A ``Function`` is a named, closed block; a ``Module`` an ordered list of functions. ``Value``,
``Op`` and ``Block`` are re-exported here, the one place the rest of the project imports the IR's
containers from; only the modules the printer needs at import time (``ir.effects``,
``ir.syntax``, ``ir.printer``) take them from ``ir.nodes``, since this module imports the
printer, at its top, for ``str(fn)``.
"""

from __future__ import annotations

from collections.abc import Iterator

from minipallas.ir.errors import MiniPallasError
from minipallas.ir.nodes import Block, Op, Value
from minipallas.ir.printer import print_function
from minipallas.ir.types import Type

__all__ = ["Block", "Function", "Module", "Op", "Value"]


# Ops whose "callee" attribute is a function they run: a plain call, and a kernel over a mesh
CALLS = frozenset({"call", "mesh_call"})


class Function:
    """A named, closed block: the unit minipallas traces, prints, passes and runs."""

    __slots__ = ("name", "body", "__weakref__")  # weak references: caches keyed by the function

    def __init__(self, name: str, body: Block) -> None:
        self.name = name
        self.body = body

    @property
    def params(self) -> tuple[Value, ...]:
        return self.body.params

    @property
    def param_types(self) -> tuple[Type, ...]:
        return self.body.param_types

    @property
    def result_types(self) -> tuple[Type, ...]:
        return self.body.result_types

    def walk(self) -> Iterator[Op]:
        return self.body.walk()

    def callees(self) -> list[Function]:
        """Functions this one calls, transitively, each once, callees before callers."""
        order: list[Function] = []
        seen: set[int] = {id(self)}

        def visit(fn: Function) -> None:
            for op in fn.walk():
                callee = op.attrs.get("callee") if op.name in CALLS else None
                if isinstance(callee, Function) and id(callee) not in seen:
                    seen.add(id(callee))
                    visit(callee)
                    order.append(callee)

        visit(self)
        return order

    def __str__(self) -> str:
        return print_function(self)

    def __repr__(self) -> str:
        return f"<Function @{self.name}>"


class Module:
    """An ordered collection of functions, the last one being the entry point."""

    __slots__ = ("functions",)

    def __init__(self, functions: list[Function] | tuple[Function, ...]) -> None:
        self.functions = tuple(functions)

    @property
    def entry(self) -> Function:
        return self.functions[-1]

    def __getitem__(self, name: str) -> Function:
        for fn in self.functions:
            if fn.name == name:
                return fn
        raise MiniPallasError(f"no function named @{name} in this module")
