"""Emission rules for the structural ops (``reverse``, ``pad``, the cumulative ops,
``reduce_prod``, ``sort``, ``top_k``, ``argmax`` / ``argmin``) and ``debug_print``: upstream
computes each with the ``jax.lax`` call (``jax.debug.print``) ``to_jax`` already makes for it,
so the rule is ``to_jax``'s. On tracers of a
program over refs these are plain array ops, which upstream's ``discharge_state`` leaves alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from minipallas.difftest.jax_emit import Emitter, rule
from minipallas.interop.exporter import debug, structural  # noqa: F401  (their to_jax rules)
from minipallas.interop.exporter.engine import RULES as TO_JAX
from minipallas.ir.core import Op
from minipallas.ir.opset.scans import CUMULATIVE

STRUCTURAL = ("reverse", "pad", *CUMULATIVE, "reduce_prod", "sort", "top_k", "argmax", "argmin")


@rule(*STRUCTURAL, "debug_print")
def _as_to_jax(e: Emitter, op: Op, args: list) -> Sequence[Any]:
    return TO_JAX[op.name](op, args)
