"""``minipallas_call``: the JAX primitive a ``pallas_call`` on JAX values binds, one lowering
per row of ``PLATFORMS``.

Which program runs is known only when the caller's ``jax.jit`` is lowered, for one platform
(``.lower(lowering_platforms=("tpu",))`` picks it on any machine), so the call stages out as
one primitive and its lowering rules choose by the platform table: a row with a launch builds
the custom call upstream Pallas emits there (``triton.launch``, ``mosaic.launch``) around the
kernel's module, emitted once per call, input types and target (``KernelCall.lowered``); every
other platform (the CPU) inlines the discharged program as ``jax.lax`` ops
(``minipallas.interop.to_jax``), bit for bit what the call gives on numpy arrays. A call made
with ``backend="xla"`` runs that program on every platform, a differential run away from the
kernel.

``jax.vmap`` (the batching rule) binds the primitive on a kernel with one more grid axis
(``batching.batched_kernel``), as upstream's batching adds one: on a device the batch is one
kernel launch, and each slice keeps the unbatched call's bits; a batched dynamic grid size or
scalar-prefetch operand binds it once per batch element (``lax.map``), as upstream loops
then. With ``match_upstream=False`` it batches the to-JAX program's ops instead (XLA ops on
every platform). Derivatives are the to-JAX program's (``KernelCall.function``'s ``custom_jvp``):
the primal stays the primitive, the tangents are XLA ops. A ``KernelCall`` holds what the rules
need but not the ``PallasCall``, so ``jax_values``'s weak cache still frees a dropped call's
functions.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax

from minipallas import lowering
from minipallas.interop import to_jax
from minipallas.ir import dtypes
from minipallas.ir.kernel_spec import Kernel
from minipallas.ir.types import ArrayType, MemorySpace
from minipallas.kernels.batching import batched_kernel
from minipallas.kernels.programs.choose import lower_for_target
from minipallas.kernels.spec.call import CallSpec
from minipallas.lowering.compat.jax_private import batching
from minipallas.lowering.compat.jax_private import core as jax_core
from minipallas.lowering.compat.jax_private import mlir as jax_mlir
from minipallas.platforms import PLATFORMS, Platform

minipallas_call_p = jax_core.Primitive("minipallas_call")
minipallas_call_p.multiple_results = True


@dataclass(frozen=True, eq=False)  # compared and hashed by identity, as jaxpr params are
class KernelCall:
    """One ``pallas_call`` at one set of operand types: its spec (to trace the kernel in a
    target's memory space), the traced kernel, its CPU program as a JAX function, the call's
    compiler params and ``debug``, whether ``vmap`` runs it ``per_slice``
    (``match_upstream``), whether it runs the ``discharged`` program everywhere, and the
    ``batches`` ``vmap`` added, ``(size, mapped inputs)`` each, innermost first."""

    spec: CallSpec
    types: tuple[ArrayType, ...]
    kernel: Kernel
    program: Callable[..., tuple]
    compiler_params: Any
    debug: bool
    per_slice: bool
    discharged: bool = False
    batches: tuple[tuple[int, tuple[bool, ...]], ...] = ()
    _lowered: dict[str, Any] = field(default_factory=dict, repr=False)

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

    def traced(self, memory_space: MemorySpace) -> Kernel:
        """The kernel with blocks that name no memory space in ``memory_space``, batched."""
        kernel = self.spec.trace(self.types, memory_space)
        for size, mapped in self.batches:
            kernel = batched_kernel(kernel, size, mapped)
        return kernel

    def lowered(self, target: str) -> Any:
        """The kernel emitted for ``target``, traced in its memory space, once (CPU runs never
        need it). Another backend's compiler params are the error ``PallasCall.lower``
        raises."""
        if target not in self._lowered:
            self._lowered[target] = lower_for_target(
                self.traced(lowering.target(target).memory_space),
                target,
                compiler_params=self.compiler_params,
                debug=self.debug,
                optimize=self.spec.optimize,
            )
        return self._lowered[target]

    def batched(self, size: int, mapped: tuple[bool, ...]) -> KernelCall:
        """This call with one more grid axis, of ``size``, over the ``mapped`` inputs."""
        kernel = batched_kernel(self.kernel, size, mapped)
        return KernelCall(
            spec=self.spec,
            types=self.types,
            kernel=kernel,
            program=to_jax(lowering.target("stablehlo").prepared(kernel)),
            compiler_params=self.compiler_params,
            debug=self.debug,
            per_slice=True,
            discharged=self.discharged,
            batches=(*self.batches, (size, mapped)),
        )

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
    kernel = call.kernel
    first_input = len(kernel.dynamic_axes) + len(kernel.scalar_prefetch)
    size = next(a.shape[d] for a, d in zip(args, dims, strict=True) if d is not None)
    args, dims = list(args), list(dims)
    if call.per_slice and all(d is None for d in dims[:first_input]):
        for i, _ in kernel.input_output_aliases:  # the output starts as it: batched too
            k = first_input + i
            if dims[k] is None:
                args[k], dims[k] = jax.numpy.broadcast_to(args[k], (size, *args[k].shape)), 0
    mapped = [d is not None for d in dims]
    args = [
        jax.numpy.moveaxis(a, d, 0) if m else a for a, d, m in zip(args, dims, mapped, strict=True)
    ]
    if call.per_slice and not any(mapped[:first_input]):
        outs = call.batched(size, tuple(mapped[first_input:])).bind(*args)
    elif call.per_slice:

        def one(slices: Sequence[Any]) -> tuple:
            it = iter(slices)
            return call.bind(*[next(it) if m else a for a, m in zip(args, mapped, strict=True)])

        outs = jax.lax.map(one, [a for a, m in zip(args, mapped, strict=True) if m])
    else:
        outs = jax.vmap(call.program, in_axes=[0 if m else None for m in mapped])(*args)
    return outs, [0] * len(outs)


_DISCHARGED = jax_mlir.lower_fun(_cpu_program, multiple_results=True)


def _lowering(ctx: Any, *operands: Any, call: KernelCall, platform: Platform) -> Sequence[Any]:
    """The platform's row: its launch around the kernel's module, or the discharged program."""
    if platform.launch is None or call.discharged:
        return _DISCHARGED(ctx, *operands, call=call)
    return platform.launcher()(ctx, operands, call, platform)


minipallas_call_p.def_abstract_eval(_abstract_eval)
minipallas_call_p.def_impl(_cpu_program)  # only under jax.disable_jit: op by op
batching.primitive_batchers[minipallas_call_p] = _batch
jax_mlir.register_lowering(minipallas_call_p, _DISCHARGED)  # platforms without a row
for _platform in PLATFORMS.values():
    jax_mlir.register_lowering(
        minipallas_call_p,
        functools.partial(_lowering, platform=_platform),
        platform=_platform.name,
    )
