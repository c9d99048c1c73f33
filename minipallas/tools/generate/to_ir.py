"""Builds minipallas IR from an abstract ``Program``: closure conversion plus ``ir.Builder``.

The program's regions are open (a body uses outer variables freely); the IR's are closed. The
conversion is lazy and linear: a body is built in a ``_ClosureScope`` that maps program variables to
IR values. Looking up a variable the scope does not define makes a fresh body parameter for it
and records the variable as a *capture*; when the body is done, the region op passes its
captures as operands, looked up in the enclosing scope (which may capture them in turn). The
captures land in each op's closed layout:

- ``run_scoped``: params [*allocations, *captures], operands = captures;
- ``for``: params [i, *captures, *carries], operands [lower, upper, *captures, *inits],
  ``num_consts`` = number of captures;
- ``while``: operands [*cond captures, *body captures, *inits];
- ``cond``: every branch gets the union of all branches' captures, in one order.
"""

from __future__ import annotations

from minipallas.ir.builder import Builder
from minipallas.ir.core import Function, Value
from minipallas.tools.generate.program import Body, Program, Stmt, Var

_REGION_OPS = ("run_scoped", "for", "while", "cond", "call")


class _ClosureScope:
    __slots__ = ("parent", "env", "captures")

    def __init__(self, parent: _ClosureScope | None) -> None:
        self.parent = parent
        self.env: dict[Var, Value] = {}
        self.captures: list[tuple[Var, Value]] = []

    def bind(self, var: Var) -> Value:
        value = self.env[var] = Value(var.type)
        return value

    def value(self, var: Var) -> Value:
        found = self.env.get(var)
        if found is None:
            if self.parent is None:
                raise ValueError(f"generated program uses {var!r} outside its scope")
            found = self.bind(var)
            self.captures.append((var, found))
        return found


class _Converter:
    def __init__(self) -> None:
        self.functions: dict[int, Function] = {}

    def function(self, program: Program) -> Function:
        fn = self.functions.get(id(program))
        if fn is None:
            scope = _ClosureScope(None)
            params = [scope.bind(p) for p in program.params]
            builder = Builder()
            results = self.body_into(builder, scope, program.body)
            fn = self.functions[id(program)] = builder.function(program.name, params, results)
        return fn

    def body_into(self, builder: Builder, scope: _ClosureScope, body: Body) -> list[Value]:
        for stmt in body.stmts:
            self.stmt(builder, scope, stmt)
        return [scope.value(r) for r in body.results]

    def region(
        self, scope: _ClosureScope, body: Body
    ) -> tuple[_ClosureScope, list[Value], Builder]:
        """Builds a body in a child scope; its params are bound but not yet ordered."""
        inner = _ClosureScope(scope)
        for p in body.params:
            inner.bind(p)
        builder = Builder()
        results = self.body_into(builder, inner, body)
        return inner, results, builder

    def stmt(self, b: Builder, scope: _ClosureScope, stmt: Stmt) -> None:
        if stmt.op in _REGION_OPS:
            op = getattr(self, "stmt_" + stmt.op)(b, scope, stmt)
        else:
            op = b.create(stmt.op, [scope.value(a) for a in stmt.args], stmt.attrs)
        for var, value in zip(stmt.outs, op.results, strict=True):
            scope.env[var] = value

    def stmt_run_scoped(self, b: Builder, scope: _ClosureScope, stmt: Stmt):  # noqa: ANN201
        (body,) = stmt.bodies
        inner, results, builder = self.region(scope, body)
        allocs = [inner.env[p] for p in body.params]
        block = builder.block([*allocs, *(v for _, v in inner.captures)], results)
        operands = [scope.value(var) for var, _ in inner.captures]
        return b.create("run_scoped", operands, stmt.attrs, [block])

    def stmt_for(self, b: Builder, scope: _ClosureScope, stmt: Stmt):  # noqa: ANN201
        (body,) = stmt.bodies
        inner, results, builder = self.region(scope, body)
        i, *carries = (inner.env[p] for p in body.params)
        block = builder.block([i, *(v for _, v in inner.captures), *carries], results)
        lower, upper, *inits = (scope.value(a) for a in stmt.args)
        consts = [scope.value(var) for var, _ in inner.captures]
        attrs = {**stmt.attrs, "num_consts": len(consts)}
        return b.create("for", [lower, upper, *consts, *inits], attrs, [block])

    def stmt_while(self, b: Builder, scope: _ClosureScope, stmt: Stmt):  # noqa: ANN201
        blocks, consts = [], []
        for body in stmt.bodies:
            inner, results, builder = self.region(scope, body)
            carries = [inner.env[p] for p in body.params]
            blocks.append(builder.block([*(v for _, v in inner.captures), *carries], results))
            consts.append([scope.value(var) for var, _ in inner.captures])
        inits = [scope.value(a) for a in stmt.args]
        attrs = {**stmt.attrs, "cond_nconsts": len(consts[0]), "body_nconsts": len(consts[1])}
        return b.create("while", [*consts[0], *consts[1], *inits], attrs, blocks)

    def stmt_cond(self, b: Builder, scope: _ClosureScope, stmt: Stmt):  # noqa: ANN201
        built = [self.region(scope, body) for body in stmt.bodies]
        order: dict[Var, None] = {}
        for inner, _, _ in built:
            order.update((var, None) for var, _ in inner.captures)
        blocks = []
        for inner, results, builder in built:
            params = [inner.env[var] if var in inner.env else Value(var.type) for var in order]
            blocks.append(builder.block(params, results))
        operands = [scope.value(stmt.args[0]), *(scope.value(var) for var in order)]
        return b.create("cond", operands, stmt.attrs, blocks)

    def stmt_call(self, b: Builder, scope: _ClosureScope, stmt: Stmt):  # noqa: ANN201
        callee = self.function(stmt.attrs["callee"])
        args = [scope.value(a) for a in stmt.args]
        return b.create("call", args, {**stmt.attrs, "callee": callee})


def build(program: Program) -> Function:
    """The IR function for ``program`` (callees built once each, shared between calls)."""
    return _Converter().function(program)
