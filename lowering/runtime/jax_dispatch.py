"""A StableHLO module run through ``jax.jit``'s dispatch instead of jaxlib's Python bindings.

A call places each numpy argument on the CPU, runs the executable and wraps each result.
``jax.jit`` does those steps in C++ in a few µs; through jaxlib's Python bindings
(``xla_cpu.cpu_execute``) they cost 20-30 µs, more than a small kernel's whole run
(``bench/benchmarks/call_overhead.py``). So the module becomes one primitive,
``minipallas_module``, in an ahead-of-time compiled ``jax.jit`` function: its lowering parses
the module into jax's own (``merge_mlir_modules``) and calls it, XLA inlines the call, and the
executable is the one ``cpu_compile`` builds, with the same option (no excess precision), so
the bits are too.

Every minipallas dtype is one jax carries unchanged (none is 64-bit, which jax without
``jax_enable_x64`` would narrow). A module whose ``debug_print`` calls back into Python keeps
jaxlib's bindings, which take the callbacks.

A call from numpy must wait for its results (``Wait``). XLA:CPU runs a program on a worker
thread unless its cost analysis calls it cheap (under 1000 flops), and waiting by blocking puts
the calling thread to sleep: waking it cost 10-30 µs on the 2-core VMs and 30-100 µs on the
13-core AMD EPYC, more than a small kernel's whole run. So the caller polls first, for about
as long as this executable's results took last time (twice that, at most ``POLL_CAP``): the
8-step sum went from 40 to 17 µs a call on a 2-core VM, and from 89 to 28-38 µs on the EPYC,
against ``jax.jit``'s 25-33 µs there. A kernel slower than the cap blocks at once: its
wake-up is small beside its run, and a poll would hold a core its workers could use.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import numpy as np
from jax.extend.core import Primitive
from jax.extend.mlir import ir
from jax.extend.mlir.dialects import func
from jax.interpreters import mlir as jax_mlir

from minipallas.lowering.compat import jax_private
from minipallas.lowering.runtime import xla_cpu

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

    device = xla_cpu.cpu_device()  # even where a TPU is
    cpu = jax.sharding.SingleDeviceSharding(device)
    avals = [jax.ShapeDtypeStruct(shape, dtype, sharding=cpu) for shape, dtype in params]
    options = dict(xla_cpu.CPU_COMPILE_OPTIONS)
    # the default device too: with no parameters (a kernel without inputs) jax.jit would
    # otherwise lower for the default backend, a TPU's, which has no rule for module_p
    with jax.default_device(device):
        lowered = jax.jit(run, compiler_options=options).lower(*avals)
        with _backend_options():
            return lowered.compile()


@contextlib.contextmanager
def _backend_options() -> Iterator[None]:
    """While it lasts, jax's compile options carry ``xla_cpu.CPU_BACKEND_OPTIONS``, which
    ``compiler_options`` cannot pass (``xla_cpu.with_backend_options``). jax has no hook
    for them, so its private ``get_compile_options`` is swapped for the compile: another
    thread compiling at that moment would get them too."""
    compiler = jax_private.compiler
    original = compiler.get_compile_options

    def get_compile_options(*args: Any, **kwargs: Any) -> Any:  # noqa: ANN401
        return xla_cpu.with_backend_options(original(*args, **kwargs))

    compiler.get_compile_options = get_compile_options
    try:
        yield
    finally:
        compiler.get_compile_options = original


# The longest a numpy call polls for its results before it blocks; and the poll of an
# executable's first call, before any wait was measured.
POLL_CAP = 500e-6
FIRST_POLL = 20e-6


class Wait:
    """Waits for one executable's results, polling for about as long as they took last time.

    Kept by the executable's ``Compiled`` (its own state, nothing shared); ``clock`` is
    ``time.perf_counter``, replaceable in tests."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.poll = FIRST_POLL  # seconds the next call polls before it blocks

    def __call__(self, results: Sequence[Any]) -> Sequence[Any]:
        """``results`` (jax arrays), every one computed."""
        start = self.clock()
        if not self._polled(results, start + self.poll):
            for result in results:
                result.block_until_ready()
        took = self.clock() - start
        self.poll = 2 * took if 2 * took <= POLL_CAP else 0.0
        return results

    def _polled(self, results: Sequence[Any], end: float) -> bool:
        """Whether every result was computed by ``end``, polling."""
        for result in results:
            while not result.is_ready():
                if self.clock() > end:
                    return False
        return True
