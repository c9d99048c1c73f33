"""``jax.debug.print`` imported: the ``debug_print`` primitive becomes the ``debug_print`` op
(``to_jax`` evaluates that op as a ``jax.debug.print`` call: ``exporter/rules/debug.py``).

A ref operand (``pl.debug_print("{}", o_ref)``) prints its current contents, as upstream's
interpret mode does: the import reads the whole ref first. What the op keeps of the primitive:
``fmt``; which operand is which argument, from
``in_tree`` (positional ones, then keywords in sorted order, as upstream flattens them); the
numpy print options upstream captured, where they differ from numpy's defaults. Refused, each
with a fix: non-array arguments (``static_args``), nested arguments (a list or dict of arrays),
``jax.debug.log`` (a logging record), a custom ``formatter`` or ``override_repr``, and ``!r``
fields (JAX's ``Array(...)`` repr, which the interpreter does not reproduce). ``ordered`` and
``partitioned`` are dropped: one device, and the interpreter prints in program order.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from typing import Any

from jax import tree_util

from minipallas.interop.importer.engine import ImportScope, rule
from minipallas.interop.importer.indexers import Window
from minipallas.interop.importer.params import READ, NoEffect
from minipallas.ir.core import Value
from minipallas.ir.opset.debug import DEFAULT_OPTIONS
from minipallas.ir.types import RefType
from minipallas.lowering.compat.jax_private import core as jax_core

_FIX = "pass the arrays themselves as arguments: jax.debug.print('{} {x}', a, x=b)"


def _names(scope: ImportScope, eqn: jax_core.JaxprEqn) -> tuple[str, ...]:
    """One name per operand: "" for a positional argument, else its keyword."""
    n = len(eqn.invars)
    try:
        args, kwargs = tree_util.tree_unflatten(eqn.params["in_tree"], range(n))
    except (TypeError, ValueError):
        raise scope.error("the arguments' structure cannot be read", fix=_FIX) from None
    leaves = [*args, *kwargs.values()]
    if not all(isinstance(i, int) for i in leaves) or len(leaves) != n:
        raise scope.error("nested arguments (a list or dict of arrays) are not imported", fix=_FIX)
    names = [""] * n
    for key, i in kwargs.items():
        names[i] = key
    return tuple(names)


def _options(
    scope: ImportScope, captured: Sequence[tuple[str, Any]]
) -> tuple[tuple[str, Any], ...]:
    """The captured numpy print options that differ from numpy's defaults."""
    kept = []
    for name, value in captured:
        if name in ("formatter", "override_repr"):
            if value is not None:
                raise scope.error(
                    f"the numpy print option '{name}' is a function, which the IR cannot hold",
                    fix=f"print without np.set_printoptions({name}=...)",
                )
        elif name not in DEFAULT_OPTIONS:
            raise scope.error(f"unknown numpy print option '{name}'", fix="print with defaults")
        elif value != DEFAULT_OPTIONS[name] or type(value) is not type(DEFAULT_OPTIONS[name]):
            kept.append((name, value))
    return tuple(kept)


def _contents(scope: ImportScope, x: Value) -> Value:
    """What upstream prints for an operand: a ref's current contents (a whole-ref ``get``)."""
    if not isinstance(x.type, RefType):
        return x
    return scope.emit("get", [x], indexer=Window.whole(x.type.shape).indexer)


@rule(
    "debug_print",
    params={
        "fmt": READ,
        "in_tree": READ,
        "static_args": READ,
        "np_printoptions": READ,
        "logging_record": READ,
        "has_placeholders": NoEffect(
            "whether fmt has a field: the interpreter finds it in fmt, as jax does"
        ),
        "ordered": NoEffect("one device, and the interpreter prints in program order"),
        "partitioned": NoEffect("one device: every print is the whole program's"),
    },
)
def debug_print(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    p = eqn.params
    if p["static_args"]:
        raise scope.error("non-array arguments (strings, None, ...) are not imported", fix=_FIX)
    if p.get("logging_record") is not None:
        raise scope.error("jax.debug.log is not imported", fix="use jax.debug.print")
    fmt = p["fmt"]
    if any(field[3] == "r" for field in string.Formatter().parse(fmt)):
        raise scope.error(
            f"the format {fmt!r} uses '!r', JAX's Array(...) repr", fix="drop the '!r'"
        )
    operands = [_contents(scope, scope.read(a)) for a in eqn.invars]
    scope.emit_op(
        "debug_print",
        operands,
        fmt=fmt,
        names=_names(scope, eqn),
        options=_options(scope, p["np_printoptions"]),
    )
    return []
