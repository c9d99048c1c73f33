"""Passes over minipallas IR: the collective-axes check, discharge, cleanup, batching, and the
pass manager that composes them (``run(fn, "collectives,discharge,cleanup")``). The effects
analysis and the collective-axes check itself are on the floor below (``minipallas.ir.effects``,
``minipallas.ir.collectives``), since the printer, parser and interpreter need them; the names
are re-exported here.

The registry is the passes' own declarations: each pass module registers its pass and typed
options with ``registry.register`` where the pass is defined, and importing this package imports
every pass module, so ``PASSES`` holds them all once ``minipallas.passes`` (or any module in it)
is imported. A new pass is a module with a ``@register`` imported here; there is no other list.
Imports point one way, ``ir`` <- ``passes``, and the passes import each other at module level.

The ``cleanup`` function is reached through its module (``minipallas.passes.cleanup.cleanup``),
so the module name is never shadowed by the function.
"""

from __future__ import annotations

from minipallas.ir.collectives import check_collective_axes
from minipallas.ir.effects import Accum, Effect, EffectsAnalysis, Read, Write
from minipallas.passes import (  # noqa: F401  (each registers its pass)
    batching,
    cleanup,
    collectives,
    discharge,
    kernel,  # the kernel passes: fuse-grid-steps, reassociate-sums, bind-grid, ...
    promote_scratch,
    xla_cpu,  # registers batch, the generic batching with XLA:CPU's policy
)
from minipallas.passes.cleanup import count_ops
from minipallas.passes.pipeline import run
from minipallas.passes.registry import PASSES, register

__all__ = [
    "PASSES",
    "Accum",
    "Effect",
    "EffectsAnalysis",
    "Read",
    "Write",
    "check_collective_axes",
    "count_ops",
    "register",
    "run",
]
