"""Every jaxlib/jax entry point minipallas's lowering uses, in one small file.

The MLIR Python bindings, the dialect registration and the CPU client are not a stable public
API of jaxlib: names move between releases. Everything else in ``minipallas.lowering`` imports
them from here, so a jaxlib upgrade touches this file only. Known to work with jaxlib 0.10.2.

- ``ir``, ``func``, ``stablehlo``: the bindings' modules, re-exported.
- ``make_context()``: an MLIR context with the dialects JAX registers (func, arith, scf, ...)
  plus stablehlo and chlo, as ``jax._src.interpreters.mlir.make_ir_context`` builds it.
- ``cpu_compile(text)`` / ``cpu_execute(executable, arrays)``: XLA's CPU client, compiling a
  module's text whose entry is a public ``@main`` and running it on numpy arrays.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir._mlir_libs import _jax_mlir_ext
from jaxlib.mlir.dialects import chlo, func, stablehlo

__all__ = ["cpu_compile", "cpu_execute", "func", "ir", "make_context", "stablehlo"]


@functools.cache
def _registry() -> ir.DialectRegistry:
    registry = ir.DialectRegistry()
    _jax_mlir_ext.register_dialects(registry)
    return registry


def make_context() -> ir.Context:
    """A fresh MLIR context with func, arith, ..., stablehlo and chlo loaded."""
    context = ir.Context()
    context.append_dialect_registry(_registry())
    context.load_all_available_dialects()
    stablehlo.register_dialect(context)
    chlo.register_dialect(context)
    return context


@functools.cache
def _cpu() -> tuple[Any, Any]:
    """The XLA CPU client and its first device (made once per process)."""
    from jax.extend.backend import get_backend

    backend = get_backend("cpu")
    return backend, backend.devices()[0]


def cpu_compile(text: str) -> Any:
    """Compiles a StableHLO module (text, entry ``@main``) for the CPU; returns the executable."""
    from jaxlib import xla_client

    backend, device = _cpu()
    return backend.compile_and_load(
        text, xla_client.DeviceList((device,)), xla_client.CompileOptions()
    )


def cpu_execute(executable: Any, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Runs a compiled module on numpy arrays; returns its results as fresh, writable arrays."""
    import jax

    _, device = _cpu()
    buffers = [jax.device_put(a, device) for a in arrays]
    results = executable.execute_sharded(buffers).disassemble_into_single_device_arrays()
    return [np.array(shards[0]) for shards in results]
