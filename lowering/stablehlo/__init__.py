"""Lowering of pure minipallas functions to StableHLO, built with jaxlib's MLIR bindings.

``lower_stablehlo(fn)`` takes a discharged (pure) function and returns a verified MLIR module
whose public ``@main`` is ``fn``: one argument per parameter, one result per result; functions
it calls become private ``func.func``s. ``emit_stablehlo`` is the target table's emitter (the
pipeline that makes the function pure is the table's, ``minipallas.lowering.TARGETS``). The
rules live one file per op family in ``rules/`` and register themselves in ``context.RULES``
when imported here; ``context`` (the walk, ``func.func`` per function) and ``emit`` (types,
constants, casts) are what they share.
"""

from __future__ import annotations

from minipallas.ir.core import Function
from minipallas.lowering.compat.jaxlib_shim import ir
from minipallas.lowering.lowered import Lowered
from minipallas.lowering.stablehlo import rules  # noqa: F401  (registers every rule)
from minipallas.lowering.stablehlo.context import RULES, LoweringContext, rule

__all__ = ["RULES", "LoweringContext", "emit_stablehlo", "lower_stablehlo", "rule"]


def emit_stablehlo(fn: Function, pure: Function) -> Lowered:
    """The ``Lowered`` of ``pure``, what the stablehlo pipeline made of ``fn``."""
    callbacks: list = []
    return Lowered("stablehlo", lower_stablehlo(pure, callbacks), pure, host_callbacks=callbacks)


def lower_stablehlo(fn: Function, host_callbacks: list | None = None) -> ir.Module:
    """The StableHLO module of a pure function, checked by the MLIR verifier; the Python
    functions its host callbacks run (``debug_print``) are appended to ``host_callbacks``
    (without it, a program that has some is refused)."""
    ctx = LoweringContext(host_callbacks)
    ctx.lower_entry(fn)
    ctx.verify(fn.name, fix="this is a bug in minipallas's lowering rules; please report it")
    return ctx.module
