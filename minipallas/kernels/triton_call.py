"""``minipallas_call``: the JAX primitive a ``pallas_call`` on JAX values binds, one lowering
per platform.

Which program runs is known only when the caller's ``jax.jit`` is lowered, for one platform
(``.lower(lowering_platforms=("cuda",))`` picks it on any machine), so the call stages out as
one primitive and its lowering rules choose:

- ``"cuda"`` and ``"rocm"``: the kernel's Triton module (the ``gpu`` target, emitted once per
  call and input types) as the custom call upstream Pallas's Triton lowering emits
  (``jaxlib_shim.triton_custom_call``): the launch grid, ``num_warps``/``num_stages`` from the
  call's ``minipallas.gpu.CompilerParams`` (default 4 warps; 3 stages on CUDA, 1 on ROCm, as
  upstream), ``input_output_aliases`` as ``output_operand_aliases``;
- every other platform (the CPU): the discharged CPU program as ``jax.lax`` ops
  (``minipallas.interop.to_jax``), inlined into the caller's module: what ``jax_call`` gave
  before the primitive, bit for bit.

``jax.vmap`` (the batching rule) binds the primitive once per batch element (``lax.map``), as
upstream's batching adds a grid axis, so each slice keeps the unbatched call's bits, and on a
GPU each runs the Triton kernel; with ``match_upstream=False`` it batches the to-JAX program's
ops instead (XLA ops on every platform). Derivatives are the to-JAX program's
(``KernelCall.function``'s ``custom_jvp``): the primal stays the primitive, the tangents are
XLA ops. A ``KernelCall`` holds what the rules need but not the ``PallasCall``, so
``jax_call``'s weak cache still frees a dropped call's functions.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
from jax._src import core as jax_core
from jax._src.interpreters import batching
from jax._src.interpreters import mlir as jax_mlir

from minipallas.ir import dtypes
from minipallas.ir.kernel_spec import Kernel
from minipallas.kernels import params as kernel_params
from minipallas.kernels.pallas_call import lower_kernel
from minipallas.lowering.jaxlib_shim import triton_custom_call

minipallas_call_p = jax_core.Primitive("minipallas_call")
minipallas_call_p.multiple_results = True


@dataclass(frozen=True, eq=False)  # compared and hashed by identity, as jaxpr params are
class KernelCall:
    """One ``pallas_call`` at one set of input types: the traced kernel (for Triton), its CPU
    program as a JAX function, the call's compiler params and ``debug``, and whether ``vmap``
    runs it ``per_slice`` (``match_upstream``)."""

    kernel: Kernel
    program: Callable[..., tuple]
    compiler_params: Any
    debug: bool
    per_slice: bool

    def bind(self, *args: Any) -> tuple:
        return tuple(minipallas_call_p.bind(*args, call=self))

    def function(self) -> Callable[..., tuple]:
        """The primitive as a JAX function with the to-JAX program's derivatives (a primitive
        of its own would need JVP and transpose rules for every op it holds)."""

        @jax.custom_jvp
        def call(*args: Any) -> tuple:
            return self.bind(*args)

        @call.defjvp
        def _jvp(primals: Sequence[Any], tangents: Sequence[Any]) -> tuple:
            return self.bind(*primals), jax.jvp(self.program, primals, tangents)[1]

        return call

    @functools.cached_property
    def out_avals(self) -> tuple[jax_core.ShapedArray, ...]:
        return tuple(
            jax_core.ShapedArray(t.shape, dtypes.to_numpy(t.dtype)) for t in self.kernel.out_types
        )

    @functools.cached_property
    def triton(self) -> Any:
        """The ``gpu`` target's ``GpuLowered`` (emitted on first use: CPU runs never need it).
        Another backend's compiler params are the error ``PallasCall.lower`` raises."""
        kernel_params.emitter_options(self.compiler_params, "gpu")
        lowered = lower_kernel(self.kernel, "gpu")
        if self.debug:
            kernel_params.debug_module(self.kernel.name, "gpu", lowered.as_text())
        return lowered

    def __repr__(self) -> str:
        return f"<pallas_call {self.kernel.name} grid={self.kernel.grid}>"


def _abstract_eval(*avals: Any, call: KernelCall) -> tuple[jax_core.ShapedArray, ...]:
    return call.out_avals


def _cpu_program(*args: Any, call: KernelCall) -> tuple:
    return call.program(*args)


def _batch(
    args: Sequence[Any], dims: Sequence[Any], *, call: KernelCall
) -> tuple[Sequence[Any], Sequence[int]]:
    """The batching rule: see the module doc; every result is batched along axis 0."""
    mapped = [d is not None for d in dims]
    args = [
        jax.numpy.moveaxis(a, d, 0) if m else a for a, d, m in zip(args, dims, mapped, strict=True)
    ]
    if call.per_slice:

        def one(slices: Sequence[Any]) -> tuple:
            it = iter(slices)
            return call.bind(*[next(it) if m else a for a, m in zip(args, mapped, strict=True)])

        outs = jax.lax.map(one, [a for a, m in zip(args, mapped, strict=True) if m])
    else:
        outs = jax.vmap(call.program, in_axes=[0 if m else None for m in mapped])(*args)
    return outs, [0] * len(outs)


def _triton_lowering(ctx: Any, *operands: Any, call: KernelCall, platform: str) -> Sequence[Any]:
    lowered = call.triton
    params = call.compiler_params
    num_warps = getattr(params, "num_warps", None)
    num_stages = getattr(params, "num_stages", None)
    return triton_custom_call(
        ctx,
        operands,
        lowered.module,
        call.kernel.name,
        lowered.launch_grid,
        num_warps=4 if num_warps is None else num_warps,
        num_stages=(1 if platform == "rocm" else 3) if num_stages is None else num_stages,
        aliases=call.kernel.input_output_aliases,
        debug=call.debug,
    )


minipallas_call_p.def_abstract_eval(_abstract_eval)
minipallas_call_p.def_impl(_cpu_program)  # only under jax.disable_jit: op by op
batching.primitive_batchers[minipallas_call_p] = _batch
jax_mlir.register_lowering(
    minipallas_call_p, jax_mlir.lower_fun(_cpu_program, multiple_results=True)
)
for _platform in ("cuda", "rocm"):
    jax_mlir.register_lowering(
        minipallas_call_p,
        functools.partial(_triton_lowering, platform=_platform),
        platform=_platform,
    )
