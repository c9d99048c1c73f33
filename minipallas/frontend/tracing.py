"""``trace``: record a Python function over refs and arrays as an IR ``Function``.

The function receives one tracer per type (a ``TracedRef`` for a ``RefType``, a ``TracedArray``
for an ``ArrayType``) and returns nothing, one array, or a tuple of arrays. Each op it records
carries the user's ``file:line``; mistakes are ``TraceError``s at that line, and so are JAX
functions refusing minipallas values (see ``foreign``).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any

import minipallas.numpy as mnp
from minipallas.frontend.foreign import jax_rejection
from minipallas.frontend.refs import TracedRef
from minipallas.frontend.scopes import TraceScope, innermost, trace_error
from minipallas.frontend.values import TracedArray, as_result
from minipallas.ir.builder import params
from minipallas.ir.core import Function
from minipallas.ir.location import Location, is_internal, user_location
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
    check_arity(
        f,
        len(types),
        f"@{name}",
        f"trace was given {_count(len(types), 'type')}",
        fix=f"give trace one type per parameter of @{name}",
    )
    scope = TraceScope(f"function @{name}", None, user_location())
    caller = innermost()
    if caller is not None:  # a callee: share the caller's traced callees and used names
        scope.cache, scope.names = caller.cache, caller.names
    scope.names.add(name)
    with scope:
        inputs = params(types)
        args = [
            (TracedRef if isinstance(p.type, RefType) else TracedArray)(p, scope) for p in inputs
        ]
        try:
            out = f(*args)
        except Exception as e:
            rejection = jax_rejection(e, mnp)
            if rejection is None:
                raise
            raise rejection from e
        outs = [] if out is None else list(out) if isinstance(out, tuple | list) else [out]
        results = [scope.lift(as_result(x, f"function @{name}")) for x in outs]
    return Function(name, scope.close(inputs, results))


def function_name(f: Callable[..., Any]) -> str:
    """``f``'s name as an IR identifier (``<lambda>`` becomes ``lambda``)."""
    name = re.sub(r"\W+", "_", getattr(f, "__name__", "")).strip("_")
    return name or "fn"


_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def check_arity(
    f: Callable[..., Any], n: int, what: str, given: str, fix: str | None = None
) -> None:
    """Rejects ``f`` (called ``what``) unless it takes ``n`` positional arguments; ``given``
    says where they come from. The fix is to change ``f``'s parameters, or, where the caller
    chose the arguments (``trace``), ``fix``, followed by ``f``'s parameters. A callable
    without a signature is left to the call."""
    try:
        signature = inspect.signature(f)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*range(n))
    except TypeError as e:
        defined = _definition(f)
        raise trace_error(
            f"{what}{defined} takes {_expected(signature)}, but {given} ({e})",
            fix=f"{fix}: {_names(signature)}"
            if fix
            else f"give {what} one parameter per argument ({n})",
        ) from None


def _expected(signature: inspect.Signature) -> str:
    """How many positional parameters a signature takes, in words."""
    positional = [p for p in signature.parameters.values() if p.kind in _POSITIONAL]
    required = sum(p.default is inspect.Parameter.empty for p in positional)
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in signature.parameters.values()):
        return f"at least {_count(required, 'parameter')}"
    if required == len(positional):
        return _count(required, "parameter")
    return f"{required} to {_count(len(positional), 'parameter')}"


def _names(signature: inspect.Signature) -> str:
    """The positional parameters of a signature, by name: ``x_ref, o_ref, *rest``."""
    kept = (*_POSITIONAL, inspect.Parameter.VAR_POSITIONAL)
    params = signature.parameters.values()
    return ", ".join(str(p).split(":")[0].split("=")[0] for p in params if p.kind in kept)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def defined_at(f: Callable[..., Any]) -> Location:
    """Where the user defined ``f`` (its ``def`` or ``lambda`` line); for a function of
    minipallas's own, or a callable without code, the user's line being traced."""
    code = getattr(inspect.unwrap(f), "__code__", None)
    if code is None or is_internal(code.co_filename):
        return user_location()
    return Location(code.co_filename, code.co_firstlineno)


def _definition(f: Callable[..., Any]) -> str:
    """`` (defined at file:line)`` for a Python function, else nothing."""
    code = getattr(inspect.unwrap(f), "__code__", None)
    return "" if code is None else f" (defined at {code.co_filename}:{code.co_firstlineno})"
