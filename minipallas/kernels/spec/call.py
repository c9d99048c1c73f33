"""What a ``pallas_call`` traces: the body, its grid and specs, checked, apart from the call.

A ``CallSpec`` is everything ``trace_kernel`` needs. ``PallasCall`` holds one, and so does the
JAX primitive a call on JAX values binds (``platforms/primitive.py``): which memory space a
block without one lives in is the lowering target's choice (VMEM for Mosaic, as Pallas TPU),
known only when the caller's ``jax.jit`` is lowered for a platform, so the primitive traces the
kernel again then. Holding the spec, not the call, keeps the call's weak caches weak.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from minipallas.ir.kernel_spec import DEFAULT_MEMORY_SPACE, BlockSpec, CostEstimate, Kernel
from minipallas.ir.types import TPU_SMEM, ArrayType, MemorySpace, RefType
from minipallas.kernels.spec import checks
from minipallas.kernels.spec import params as kernel_params
from minipallas.kernels.spec.aliases import with_aliases
from minipallas.kernels.spec.tracing import trace_kernel
from minipallas.passes.pipeline import run


@dataclass(frozen=True, eq=False)  # compared and hashed by identity, as jaxpr params are
class CallSpec:
    """A kernel body, its grid and its checked specs; traces once per input types and memory
    space (``trace``)."""

    body: Callable[..., Any]
    name: str | None
    grid: tuple[int | None, ...]
    out_types: tuple[ArrayType, ...]
    in_specs: tuple[BlockSpec | None, ...] | None
    out_specs: tuple[BlockSpec | None, ...]
    scratch_types: tuple[RefType, ...]
    dimension_semantics: tuple[str, ...] | None
    num_scalar_prefetch: int
    grid_names: tuple[str, ...] | None
    input_output_aliases: tuple[tuple[int, int], ...]  # operand indices, as upstream counts
    debug: bool
    # the user's passes, run on every traced kernel (so on every platform), and whether the
    # lowering target's optimizations run: exact (``Target.optimizations``), or at "fast" those
    # that may reorder float sums (``Target.fast``)
    passes: str = ""
    optimize: bool | str = True
    # what the TPU's custom call carries (``Kernel.cost_estimate``, ``Kernel.metadata``)
    cost_estimate: CostEstimate | None = None
    metadata: tuple[tuple[str, str], ...] = ()
    fuse_transposed_lhs: bool = False  # ``Kernel.fuse_transposed_lhs``
    vmem_limit_bytes: int | None = None  # ``Kernel.vmem_limit_bytes``
    _kernels: dict[tuple, Kernel] = field(default_factory=dict, repr=False)

    def trace(
        self, types: tuple[ArrayType, ...], memory_space: MemorySpace = DEFAULT_MEMORY_SPACE
    ) -> Kernel:
        """The ``Kernel`` for operands of ``types`` (``input_types``), after the call's
        ``passes``; blocks whose spec names no memory space live in ``memory_space``."""
        key = (types, memory_space)
        if key not in self._kernels:
            n = self.num_scalar_prefetch
            prefetch, inputs = types[:n], types[n:]
            kernel = trace_kernel(
                self.body,
                name=self.name,
                grid=self.grid,
                inputs=inputs,
                outputs=self.out_types,
                in_specs=(None,) * len(inputs) if self.in_specs is None else self.in_specs,
                out_specs=self.out_specs,
                scratch_types=self.scratch_types,
                dimension_semantics=self.dimension_semantics,
                memory_space=memory_space,
                scalar_prefetch=tuple(RefType(t.shape, t.dtype, TPU_SMEM) for t in prefetch),
                grid_names=self.grid_names,
                cost_estimate=self.cost_estimate,
                metadata=self.metadata,
                fuse_transposed_lhs=self.fuse_transposed_lhs,
                vmem_limit_bytes=self.vmem_limit_bytes,
            )
            self._kernels[key] = run(with_aliases(kernel, self.kernel_aliases()), self.passes)
            if self.debug:
                kernel_params.debug_kernel(self._kernels[key])
        return self._kernels[key]

    def input_types(self, args: Sequence[Any]) -> tuple[ArrayType, ...]:
        """The operands' types: the scalar-prefetch arrays, then the inputs."""
        types = tuple(checks.array_type(a, f"input {k}") for k, a in enumerate(args))
        n = self.num_scalar_prefetch
        if len(types) < n:
            raise checks.error(
                f"the kernel call has num_scalar_prefetch={n}, but got {len(types)} operands",
                fix="pass the scalar-prefetch arrays first, then the inputs",
            )
        if self.in_specs is not None and len(types) - n != len(self.in_specs):
            raise checks.error(
                f"the kernel call has {len(self.in_specs)} in_specs, but got {len(types) - n} "
                f"inputs" + (f" after {n} scalar-prefetch operands" if n else ""),
                fix="give one input per in_spec",
            )
        return types

    def kernel_aliases(self) -> tuple[tuple[int, int], ...]:
        """The aliases with input indices counted among the kernel's inputs (upstream counts
        the scalar-prefetch operands too); aliasing a scalar-prefetch operand is refused."""
        n = self.num_scalar_prefetch
        for i, o in self.input_output_aliases:
            if 0 <= i < n:
                raise checks.error(
                    f"input_output_aliases maps operand {i}, a scalar-prefetch operand, to "
                    f"output {o}; minipallas aliases inputs only",
                    fix=f"alias an input (operand index >= num_scalar_prefetch={n})",
                )
        return tuple((i - n, o) for i, o in self.input_output_aliases)
