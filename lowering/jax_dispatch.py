"""A StableHLO module run through ``jax.jit``'s dispatch instead of jaxlib's Python bindings.

A call places each numpy argument on the CPU, runs the executable and wraps each result.
``jax.jit`` does those steps in C++ in a few µs; through jaxlib's Python bindings
(``jaxlib_shim.cpu_execute``) they cost 20-30 µs, more than a small kernel's whole run
(``bench/call_overhead.py``). So the module becomes one primitive, ``minipallas_module``, in an
ahead-of-time compiled ``jax.jit`` function: its lowering parses the module into jax's own
(``merge_mlir_modules``) and calls it, XLA inlines the call, and the executable is the one
``cpu_compile`` builds, with the same option (no excess precision), so the bits are too.

Every minipallas dtype is one jax carries unchanged (none is 64-bit, which jax without
``jax_enable_x64`` would narrow). A module whose ``debug_print`` calls back into Python keeps
jaxlib's bindings, which take the callbacks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.extend.core import Primitive
from jax.extend.mlir import ir
from jax.extend.mlir.dialects import func
from jax.interpreters import mlir as jax_mlir

from minipallas.lowering import jaxlib_shim

Types = tuple[tuple[tuple[int, ...], np.dtype], ...]  # (shape, numpy dtype) per array

module_p = Primitive("minipallas_module")
module_p.multiple_results = True


@module_p.def_abstract_eval
def _results(*args: Any, text: str, results: Types) -> list[jax.core.ShapedArray]:
    return [jax.core.ShapedArray(shape, dtype) for shape, dtype in results]


def _lower(ctx: Any, *args: Any, text: str, results: Types) -> Sequence[Any]:
    module = ir.Module.parse(text, context=ctx.module_context.context)
    name = jax_mlir.merge_mlir_modules(ctx.module_context.module, "minipallas_main", module)
    types = [jax_mlir.aval_to_ir_type(ctx.module_context, a) for a in ctx.avals_out]
    return func.CallOp(types, ir.FlatSymbolRefAttr.get(name), list(args)).results


jax_mlir.register_lowering(module_p, _lower, platform="cpu")


def jitted(text: str, params: Types, results: Types) -> Callable[..., Any]:
    """The module's ``@main`` compiled for the CPU behind ``jax.jit``'s dispatch: call it with
    numpy arrays of ``params``' types, get jax arrays of ``results``' types."""

    def run(*arrays: Any) -> Any:
        return module_p.bind(*arrays, text=text, results=results)

    cpu = jax.sharding.SingleDeviceSharding(jaxlib_shim.cpu_device())  # even where a TPU is
    avals = [jax.ShapeDtypeStruct(shape, dtype, sharding=cpu) for shape, dtype in params]
    options = {"xla_allow_excess_precision": False}  # as jaxlib_shim.cpu_compile
    return jax.jit(run, compiler_options=options).lower(*avals).compile()
