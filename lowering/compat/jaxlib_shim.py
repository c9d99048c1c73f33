"""Every jaxlib entry point minipallas's lowering uses, in one small file.

The MLIR Python bindings, the dialect registration and the CPU client are not a stable public
API of jaxlib: names move between releases. Everything else in minipallas reaches jaxlib
through this file (``tests/lowering/compat/test_jaxlib_shim.py`` holds every other file to it), so a
jaxlib upgrade touches this file only. Known to work with jaxlib 0.10.2. The private jax
modules come from ``jax_private``, like everyone else's.

- ``ir``, ``func``, ``stablehlo``, ``chlo`` and the dialects a Mosaic kernel is written in
  (``arith``, ``math``, ``memref``, ``scf``, ``vector``, jaxlib's own ``tpu``): the bindings'
  modules, re-exported;
- ``make_context()``: an MLIR context with the dialects JAX registers (func, arith, scf, ...)
  plus stablehlo and chlo, as ``jax._src.interpreters.mlir.make_ir_context`` builds it;
  ``make_tpu_context()`` adds Mosaic's ``tpu`` dialect, ``make_triton_context()`` Triton's
  ``tt`` (``triton_bindings()``); ``canonicalize(module)`` runs MLIR's canonicalizer;
- ``xla_client()``: jaxlib's XLA client module, for the CPU client.

What minipallas does with them lives by concern in the runtime room (``lowering/runtime``):
``xla_cpu`` (compiling and running a module on XLA's CPU client), ``triton_call`` (launching a
Triton module as upstream Pallas does, and its launch defaults), ``libtpu`` (libtpu's Mosaic
compiler ahead of time, and what the machine has).
"""

from __future__ import annotations

import functools
import os

# XLA's C++ logging reads its level once, when jaxlib is first imported: without this a program
# that runs on the CPU prints pjrt_client's INFO lines to stderr. setdefault: a user's own level,
# or a jaxlib already imported, wins.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
from types import ModuleType  # noqa: E402
from typing import Any  # noqa: E402

from jaxlib.mlir import ir, passmanager  # noqa: E402
from jaxlib.mlir._mlir_libs import _jax_mlir_ext  # noqa: E402
from jaxlib.mlir.dialects import (  # noqa: E402
    arith,
    chlo,
    func,
    math,
    memref,
    scf,
    stablehlo,
    vector,
)
from jaxlib.mosaic.python import tpu  # noqa: E402

__all__ = [
    "arith",
    "canonicalize",
    "chlo",
    "func",
    "ir",
    "make_context",
    "make_tpu_context",
    "make_triton_context",
    "math",
    "memref",
    "scf",
    "stablehlo",
    "tpu",
    "triton_bindings",
    "vector",
    "xla_client",
]


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


def make_tpu_context() -> ir.Context:
    """``make_context()`` with Mosaic's ``tpu`` dialect registered, as Pallas TPU lowering does."""
    context = make_context()
    tpu.register_dialect(context)
    return context


def canonicalize(module: ir.Module) -> None:
    """Runs MLIR's ``canonicalize`` pass on ``module`` in place: folds constants, removes dead
    ops and applies each loaded dialect's patterns (``tpu``'s included). Upstream Pallas runs the
    same pipeline before printing a Mosaic module (``pallas_call(..., debug=True)``)."""
    with module.context:
        passmanager.PassManager.parse("builtin.module(canonicalize)").run(module.operation)


def triton_bindings() -> tuple[Any, Any, Any, Any]:
    """jaxlib's Triton dialect bindings (``tt``, imported on first use) and the ``arith``,
    ``scf``, ``math`` dialects."""
    from jaxlib.triton import dialect as tt

    return tt, arith, scf, math


def make_triton_context() -> ir.Context:
    """An MLIR context with ``make_context``'s dialects plus Triton's ``tt``, registered the way
    upstream Pallas's Triton lowering registers it."""
    tt, *_ = triton_bindings()
    context = make_context()
    tt.register_dialect(context)
    context.load_all_available_dialects()
    return context


def xla_client() -> ModuleType:
    """jaxlib's ``xla_client`` (the CPU client's compile options, device lists, buffers),
    imported on first use."""
    from jaxlib import xla_client as client

    return client
