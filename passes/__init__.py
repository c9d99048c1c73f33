"""Passes over minipallas IR: effects, the collective-axes check, discharge, cleanup, and the
pass manager that composes them (``run(fn, "collectives,discharge,cleanup")``).

Names are imported on first use, as in ``minipallas/__init__.py``, so importing one pass does not
import them all (and the passes may import each other without cycles). The ``effects`` and
``cleanup`` functions are reached through their modules (``minipallas.passes.effects.effects``),
so those module names are never shadowed by functions.
"""

from __future__ import annotations

import importlib
from typing import Any

_PUBLIC = {
    "run": "minipallas.passes.pipeline",
    "register": "minipallas.passes.pipeline",
    "PASSES": "minipallas.passes.pipeline",
    "Effect": "minipallas.passes.effects",
    "EffectsAnalysis": "minipallas.passes.effects",
    "Read": "minipallas.passes.effects",
    "Write": "minipallas.passes.effects",
    "Accum": "minipallas.passes.effects",
    "check_collective_axes": "minipallas.passes.collectives",
    "count_ops": "minipallas.passes.cleanup",
}

__all__ = list(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'minipallas.passes' has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value
    return value
