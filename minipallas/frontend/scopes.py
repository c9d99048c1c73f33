"""Trace scopes: the regions being recorded, and closure conversion between them.

Tracing runs the user's Python function on stand-in values (*tracers*) and records every
operation as an IR op. A *scope* is one region under construction: the traced function itself,
or the body of a ``run_scoped``, a loop or a branch. Scopes nest as the Python calls that open
them nest; the innermost open one is *current* and receives new ops. A tracer is an SSA value
plus the scope that defined it.

Closure conversion. IR regions are closed (see ``minipallas.ir``), but user code freely uses
values from enclosing scopes. When an op in scope S uses a tracer defined in an enclosing scope
P, S *captures* it:

1. S asks its parent for the value (the parent captures it in turn, unless it is P), so a value
   used three scopes down is threaded through every scope in between;
2. S makes a fresh parameter standing for it, once per value, and uses that parameter;
3. when S is closed, the op that owns S's region passes the captured outer values as operands,
   in order, and places the parameters where its region layout wants them.

Refs are captured the same way, so every effect on an outer ref is an effect on an operand
position of the region op. A tracer whose scope has been closed (a ref allocated by
``run_scoped`` and kept in a Python variable) can never be used again, and a tracer of another
traced function cannot be captured at all: both are ``TraceError``s at the user's line.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.builder import Builder
from minipallas.ir.core import Block, Op, Value
from minipallas.ir.errors import TraceError
from minipallas.ir.location import Location, user_location
from minipallas.ir.types import Type


def trace_error(message: str, *, op: str | None = None, fix: str | None = None) -> TraceError:
    """A ``TraceError`` located at the user's line that is being traced."""
    return TraceError(message, op=op, loc=user_location(), fix=fix)


class TraceScope:
    """One region under construction: its ops, the outer values it captured, its state.

    ``captures`` maps each captured value of the parent scope to the parameter standing for it
    here, in order of first use. ``what`` names the region for error messages.
    """

    def __init__(self, what: str, parent: TraceScope | None, loc: Location) -> None:
        self.what = what
        self.parent = parent
        self.loc = loc
        self.builder = Builder(error=TraceError)
        self.captures: dict[Value, Value] = {}
        self.open = True
        self.cache: dict[Any, Any] = {} if parent is None else parent.cache  # traced callees
        self.names: set[str] = set() if parent is None else parent.names  # function names used
        # values known to be >= 0 (grid indices, counting loop indices): no index wrap needed
        self.nonnegative: set[Value] = set() if parent is None else parent.nonnegative

    def __enter__(self) -> TraceScope:
        _STATE.stack.append(self)
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        popped = _STATE.stack.pop()
        assert popped is self, "trace scopes must close in order"
        if kind is not None:
            self.open = False  # tracing failed: nothing more goes into this scope

    def encloses(self, other: TraceScope) -> bool:
        scope = self.parent
        while scope is not None:
            if scope is other:
                return True
            scope = scope.parent
        return False

    def lift(self, x: Tracer | Value) -> Value:
        """The value standing for ``x`` in this scope, capturing it if it comes from outside."""
        if isinstance(x, Value):
            return x
        owner = x._scope
        if owner is self:
            return x._value
        if not owner.open:
            raise _ended(x)
        if not self.encloses(owner):
            raise trace_error(
                f"this {x.kind} belongs to a {owner.what} (at {owner.loc}) that does not "
                f"enclose the {self.what} using it",
                fix="pass the value as an argument (branches and called functions see only "
                "their own values and those of the code around them)",
            )
        outer = self.parent.lift(x)  # type: ignore[union-attr]  # encloses() => parent
        inner = self.captures.get(outer)
        if inner is None:
            inner = self.captures[outer] = Value(outer.type)
        return inner

    def close(self, params: Sequence[Value], results: Sequence[Value]) -> Block:
        """Ends the scope: its tracers die, and its ops become a block."""
        self.open = False
        return self.builder.block(params, results)


class Tracer:
    """A stand-in for a value of the program being traced: an SSA value and its scope."""

    __slots__ = ("_value", "_scope")
    kind = "value"  # what error messages call it

    def __init__(self, value: Value, scope: TraceScope) -> None:
        self._value = value
        self._scope = scope

    @property
    def type(self) -> Type:
        """The IR type (``ArrayType`` or ``RefType``)."""
        return self._value.type

    @property
    def shape(self) -> tuple[int, ...]:
        return self._value.type.shape

    @property
    def ndim(self) -> int:
        return len(self._value.type.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self._value.type.shape, dtype=np.int64))

    @property
    def dtype(self) -> np.dtype:
        """The numpy dtype, so ``x.dtype == minipallas.numpy.float32`` works as in JAX."""
        return dtypes.to_numpy(self._value.type.dtype)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._value.type})"


def mark_nonnegative(x: Tracer) -> None:
    """Records that ``x`` is never negative, so indexing with it needs no negative wrap."""
    x._scope.nonnegative.add(x._value)


def is_nonnegative(x: Tracer) -> bool:
    """Whether ``x`` was recorded as never negative (``mark_nonnegative``)."""
    return x._value in x._scope.nonnegative


def _ended(x: Tracer) -> TraceError:
    owner = x._scope
    return trace_error(
        f"this {x.kind} was made in a {owner.what} (at {owner.loc}) that has already ended, "
        "and cannot be used afterwards",
        fix="use values only inside the body that made them; return arrays from the body "
        "(refs never leave it) to use their contents outside",
    )


class _State(threading.local):
    """The open scopes of this thread, innermost last."""

    def __init__(self) -> None:
        self.stack: list[TraceScope] = []


_STATE = _State()


def check_open(*xs: object) -> None:
    """Rejects tracers whose scope has ended (before anything is built from them)."""
    for x in xs:
        if isinstance(x, Tracer) and not x._scope.open:
            raise _ended(x)


def innermost() -> TraceScope | None:
    """The current scope, or None when nothing is being traced."""
    return _STATE.stack[-1] if _STATE.stack else None


def current() -> TraceScope:
    """The innermost open scope: where new ops go."""
    stack = _STATE.stack
    if not stack:
        raise trace_error(
            "no function is being traced",
            fix="call this inside a function passed to minipallas.trace",
        )
    return stack[-1]


def child(what: str) -> TraceScope:
    """A new scope nested in the current one (not yet entered)."""
    return TraceScope(what, current(), user_location())


T = TypeVar("T")


def emit(
    wrap: Callable[[Value, TraceScope], T],
    name: str,
    operands: Sequence[Tracer | Value],
    attrs: Mapping[str, Any] | None = None,
    regions: Sequence[Block] = (),
) -> tuple[T, ...]:
    """Records op ``name`` in the current scope at the user's line; returns its results.

    Tracer operands are lifted into the current scope (captured when they come from outside);
    plain ``Value`` operands must already belong to it. ``wrap`` makes each result a tracer.
    """
    check_open(*operands)
    scope = current()
    values = [scope.lift(x) for x in operands]
    op: Op = scope.builder.create(name, values, attrs, regions, loc=user_location())
    return tuple(wrap(v, scope) for v in op.results)
