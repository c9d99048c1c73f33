"""minipallas: a small compiler that reimplements JAX/Pallas state discharge.

The public API is gathered here; each name lives in the module listed in ``_PUBLIC`` and is
imported on first use, so ``import minipallas`` stays cheap and free of import cycles.
"""

from __future__ import annotations

import importlib
from typing import Any

_PUBLIC = {
    # the exception hierarchy
    "MiniPallasError": "minipallas.ir.errors",
    "VerificationError": "minipallas.ir.errors",
    "ParseError": "minipallas.ir.errors",
    "TraceError": "minipallas.ir.errors",
    "InterpretError": "minipallas.ir.errors",
    "PassError": "minipallas.ir.errors",
    "RaceError": "minipallas.ir.errors",
    "DeadlockError": "minipallas.ir.errors",
    "ScheduleDependentError": "minipallas.ir.errors",
    # types and memory spaces
    "ArrayType": "minipallas.ir.types",
    "RefType": "minipallas.ir.types",
    "Function": "minipallas.ir.core",
    "Module": "minipallas.ir.core",
    # text, verifier, reference interpreter
    "parse": "minipallas.ir.parser",
    "parse_module": "minipallas.ir.parser",
    "verify": "minipallas.ir.verifier",
    "interpret": "minipallas.ir.interpret",
    # tracing front end
    "trace": "minipallas.frontend.tracing",
    "ds": "minipallas.frontend.refs",
    "addupdate": "minipallas.frontend.refs",
    "load": "minipallas.frontend.refs",
    "store": "minipallas.frontend.refs",
    "run_scoped": "minipallas.frontend.control",
    "axis_index": "minipallas.frontend.collective",
    "barrier": "minipallas.frontend.collective",
    "semaphore_signal": "minipallas.frontend.semaphores",
    "semaphore_wait": "minipallas.frontend.semaphores",
    "semaphore_read": "minipallas.frontend.semaphores",
    "fori_loop": "minipallas.frontend.control",
    "while_loop": "minipallas.frontend.control",
    "cond": "minipallas.frontend.control",
    "switch": "minipallas.frontend.control",
    "when": "minipallas.frontend.control",
    "call": "minipallas.frontend.control",
    "program_id": "minipallas.frontend.control",
    "reciprocal": "minipallas.frontend.compiler_ops",
    "multiple_of": "minipallas.frontend.compiler_ops",
    "num_programs": "minipallas.frontend.control",
    # passes
    "effects": "minipallas.ir.effects",
    "discharge": "minipallas.passes.discharge",
    "cleanup": "minipallas.passes.cleanup",
    "count_ops": "minipallas.passes.cleanup",
    "batch": "minipallas.passes.batching",
    # lowering and running
    "lower": "minipallas.lowering.lowered",
    "compile": "minipallas.lowering.runtime.compiled",
    # pictures (Graphviz)
    "view": "minipallas.pictures",
    # interop with upstream JAX
    "from_jaxpr": "minipallas.interop",
    "to_jax": "minipallas.interop",
    # kernels
    "pallas_call": "minipallas.kernels.pallas_call",
    "on_devices": "minipallas.platforms.devices_xla",
    "BlockSpec": "minipallas.ir.kernel_spec",
    "Element": "minipallas.ir.kernel_spec",
    "Buffered": "minipallas.ir.kernel_spec",
    "RevisitMode": "minipallas.ir.kernel_spec",
    "CostEstimate": "minipallas.ir.kernel_spec",
}
_SUBMODULES = {
    **{name: f"minipallas.{name}" for name in ("numpy", "tpu", "gpu", "ir", "passes", "lowering")},
    "difftest": "minipallas.tools.difftest",  # a tool: imported only when asked for
}

__all__ = [*_PUBLIC, *_SUBMODULES]


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name]), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(_SUBMODULES[name])
    else:
        raise AttributeError(f"module 'minipallas' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names too, though each is imported only on first use: for ``dir``, tab
    completion and ``help(minipallas)``."""
    return sorted({*globals(), *__all__})
