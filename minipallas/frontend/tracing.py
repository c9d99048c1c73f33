"""``trace``: record a Python function over refs and arrays as an IR ``Function``.

The function receives one tracer per type (a ``TracedRef`` for a ``RefType``, a ``TracedArray``
for an ``ArrayType``) and returns nothing, one array, or a tuple of arrays. Each op it records
carries the user's ``file:line``; mistakes are ``TraceError``s at that line.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from minipallas.frontend.refs import TracedRef
from minipallas.frontend.scopes import Scope, innermost, trace_error
from minipallas.frontend.values import TracedArray, as_result
from minipallas.ir.builder import params
from minipallas.ir.core import Function
from minipallas.ir.location import user_location
from minipallas.ir.types import ArrayType, RefType


def trace(f: Callable[..., Any], *types: ArrayType | RefType, name: str | None = None) -> Function:
    """Traces ``f`` on one argument per type into a ``Function`` named ``name`` (default: f's)."""
    if not callable(f):
        raise trace_error(f"trace needs a function, got {type(f).__name__}")
    for t in types:
        if not isinstance(t, ArrayType | RefType):
            raise trace_error(
                f"trace takes one type per argument, got {t!r}",
                fix="use minipallas.ArrayType(shape, dtype), minipallas.RefType(shape, dtype) "
                "or a memory space such as minipallas.tpu.VMEM(shape, dtype)",
            )
    name = function_name(f) if name is None else name
    scope = Scope(f"function @{name}", None, user_location())
    caller = innermost()
    if caller is not None:  # a callee: share the caller's traced callees and used names
        scope.cache, scope.names = caller.cache, caller.names
    scope.names.add(name)
    with scope:
        inputs = params(types)
        args = [
            (TracedRef if isinstance(p.type, RefType) else TracedArray)(p, scope) for p in inputs
        ]
        out = f(*args)
        outs = [] if out is None else list(out) if isinstance(out, tuple | list) else [out]
        results = [scope.lift(as_result(x, f"function @{name}")) for x in outs]
    return Function(name, scope.close(inputs, results))


def function_name(f: Callable[..., Any]) -> str:
    """``f``'s name as an IR identifier (``<lambda>`` becomes ``lambda``)."""
    name = re.sub(r"\W+", "_", getattr(f, "__name__", "")).strip("_")
    return name or "fn"
