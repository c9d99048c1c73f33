"""Emission rules for the structural ops (``reverse``, ``pad``, the cumulative ops,
``reduce_prod``, ``sort``, ``top_k``, ``argmax`` / ``argmin``): upstream computes each with the
``jax.lax`` call ``to_jax`` already makes for it, so the rule is ``to_jax``'s. On tracers of a
program over refs these are plain array ops, which upstream's ``discharge_state`` leaves alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from minipallas.difftest.jax_emit import Emitter, emits
from minipallas.interop import to_jax_structural  # noqa: F401  (registers the to_jax rules)
from minipallas.interop.to_jax import RULES as TO_JAX
from minipallas.ir.core import Op
from minipallas.ir.opset.scans import CUMULATIVE

STRUCTURAL = ("reverse", "pad", *CUMULATIVE, "reduce_prod", "sort", "top_k", "argmax", "argmin")


@emits(*STRUCTURAL)
def _as_to_jax(e: Emitter, op: Op, args: list) -> Sequence[Any]:
    return TO_JAX[op.name](op, args)
