"""TPU memory spaces, semaphores, async copies, compiler params and grid specs, named as in
``jax.experimental.pallas.tpu``: ``VMEM((8, 128), f32)``, ``SemaphoreType.REGULAR``,
``make_async_copy(x_ref.at[pl.ds(i, 8)], buf, sem).start()``,
``CompilerParams(dimension_semantics=("parallel",))``,
``PrefetchScalarGridSpec(num_scalar_prefetch=1, grid=..., in_specs=..., out_specs=...)``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from minipallas.frontend.dma import (
    AsyncCopyDescriptor,
    async_copy,
    async_remote_copy,
    make_async_copy,
    make_async_remote_copy,
)
from minipallas.frontend.lanes import bitcast, roll
from minipallas.ir.types import ANY, DMA_SEMAPHORE, SEMAPHORE, TPU_SMEM, TPU_VMEM
from minipallas.kernels.spec.params import TpuCompilerParams as CompilerParams

VMEM = TPU_VMEM
SMEM = TPU_SMEM


class SemaphoreType:
    """Upstream's ``pltpu.SemaphoreType``: ``REGULAR`` is one counting semaphore (a scratch or
    ``run_scoped`` type), ``REGULAR((n,))`` an array of them (``ir.types.Semaphores``); ``DMA``
    and ``DMA((n,))`` count async copies (``make_async_copy``)."""

    REGULAR = SEMAPHORE
    DMA = DMA_SEMAPHORE


@dataclass(frozen=True)
class PrefetchScalarGridSpec:
    """A grid spec whose first ``num_scalar_prefetch`` call operands are scalar-prefetch
    arrays (upstream's ``pltpu.PrefetchScalarGridSpec``): they live in SMEM, whole, for the
    whole grid; every index map receives them as refs after its grid indices, so block
    indices may depend on data (a gather by an index table, a block-sparse matmul), and the
    kernel receives them first, before its inputs. The other fields are ``pallas_call``'s."""

    num_scalar_prefetch: int
    grid: Any = ()
    in_specs: Sequence[Any] | Any = None
    out_specs: Sequence[Any] | Any = None
    scratch_shapes: Sequence[Any] = ()


__all__ = [
    "ANY",
    "SMEM",
    "VMEM",
    "AsyncCopyDescriptor",
    "CompilerParams",
    "PrefetchScalarGridSpec",
    "SemaphoreType",
    "async_copy",
    "async_remote_copy",
    "make_async_copy",
    "make_async_remote_copy",
]
__all__ += ["bitcast", "roll"]  # upstream's TPU vector primitives
