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

A call from numpy must wait for its results (``ready``). XLA:CPU runs a program on a worker
thread unless its cost analysis calls it cheap, and waiting by blocking puts the calling thread
to sleep: waking it cost 10-30 µs on this project's VMs, more than a small kernel's whole run.
So the caller first polls for a few µs: the 8-step sum went from 40 to 17 µs a call, against
``jax.jit``'s 14-23 µs on the same numpy arrays (``jax.jit``'s one reduction is cheap enough to
run on the calling thread).
"""

from __future__ import annotations

import time
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


# How long a numpy call polls for its results before it blocks: longer than a small kernel
# takes after its dispatch returns (the 8-step sum: a few µs; 10 µs sufficed), short against
# a kernel long enough to keep the worker busy (the poll holds a core meanwhile).
POLL_SECONDS = 20e-6


def ready(results: Sequence[Any]) -> Sequence[Any]:
    """``results`` (jax arrays), polled until computed for up to ``POLL_SECONDS``; whatever is
    still running then is waited for by blocking, as ``np.asarray`` does."""
    end = time.perf_counter() + POLL_SECONDS
    for result in results:
        while not result.is_ready():
            if time.perf_counter() > end:
                return results
    return results
