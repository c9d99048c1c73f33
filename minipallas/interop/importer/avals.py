"""What upstream's values are in minipallas: dtypes, memory spaces, and avals as IR types; and
``JaxprImportError``, what every import refuses with.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from jax import numpy as jnp

from minipallas.ir import dtypes
from minipallas.ir.errors import MiniPallasError
from minipallas.ir.types import (
    ANY,
    DMA_SEMAPHORE,
    GPU_GMEM,
    GPU_SMEM,
    SEMAPHORE,
    TPU_SMEM,
    TPU_VMEM,
    TPU_VMEM_SHARED,
    ArrayType,
    RefType,
    Type,
)
from minipallas.lowering.compat.jax_private import core as jax_core
from minipallas.lowering.compat.jax_private import pallas_core, state_types
from minipallas.lowering.compat.jax_private import pallas_tpu_core as tpu_core


class JaxprImportError(MiniPallasError):
    """An upstream jaxpr uses something minipallas cannot import (a primitive, a dtype, a form)."""


def dtype_of(dtype: object, what: str) -> str:
    """The minipallas name of an upstream dtype, or a ``JaxprImportError`` saying which."""
    try:
        return dtypes.canonicalize(np.dtype(dtype))
    except (MiniPallasError, TypeError):
        raise JaxprImportError(
            f"{what} has dtype {dtype}, which minipallas does not support",
            fix=f"use one of {', '.join(dtypes.NAMES)} (and keep jax_enable_x64 off)",
        ) from None


def memory_space(space: object) -> Any:
    """The minipallas memory space of a Pallas one (``pltpu.VMEM``, ``pl.ANY``, ...)."""
    if space is None:
        return ANY
    name = str(getattr(space, "value", space)).lower()
    module = type(space).__module__
    if "mosaic_gpu" in module or "triton" in module:
        table = {"gmem": GPU_GMEM, "smem": GPU_SMEM, "any": ANY}
    elif "mosaic" in module:
        table = {"vmem": TPU_VMEM, "smem": TPU_SMEM, "vmem_shared": TPU_VMEM_SHARED, "any": ANY,
                 "hbm": ANY}  # fmt: skip
    else:
        table = {"any": ANY, "default": ANY}
    if name not in table:
        raise JaxprImportError(f"memory space {space!r} has no minipallas counterpart")
    return table[name]


def type_of(aval: object, what: str = "a value", barrier: bool = False) -> Type:
    """The minipallas type of an upstream aval: ``Ref{...}`` for a ref, an array type otherwise.
    ``barrier``: a barrier semaphore is a regular one (``get_barrier_semaphore``'s, ``devices``);
    elsewhere (``SemaphoreType.BARRIER`` scratch) it is refused."""
    if type(aval) is jax_core.ShapedArray:  # the common case, made once per shape and dtype
        try:
            return _array_type(aval.shape, aval.dtype)
        except JaxprImportError:
            pass  # the uncached path below says which value has the bad dtype
    if isinstance(aval, state_types.AbstractRef):
        inner = aval.inner_aval
        if not isinstance(inner, jax_core.ShapedArray):
            raise JaxprImportError(f"{what} is a ref of {inner}, not of an array")
        if jnp.issubdtype(inner.dtype, pallas_core.semaphore_dtype):
            return _semaphores(inner, what, barrier)
        space = memory_space(aval.memory_space)
        return RefType(inner.shape, dtype_of(inner.dtype, what), space)
    if isinstance(aval, jax_core.ShapedArray):  # a PRNG key array is its uint32 key data
        aval = jax_core.physical_aval(aval)
        return ArrayType(aval.shape, dtype_of(aval.dtype, what))
    raise JaxprImportError(f"{what} has type {aval}, which is neither an array nor a ref")


def _semaphores(inner: jax_core.ShapedArray, what: str, barrier: bool) -> RefType:
    """A ref of upstream's regular or DMA semaphores (``pltpu.SemaphoreType.REGULAR`` / ``DMA``):
    minipallas's int32 semaphore ref of that kind; with ``barrier``, a barrier semaphore too."""
    for dtype, space in (
        *(((pallas_core.barrier_semaphore, SEMAPHORE),) if barrier else ()),
        (pallas_core.semaphore, SEMAPHORE),
        (tpu_core.dma_semaphore, DMA_SEMAPHORE),
    ):
        if jnp.issubdtype(inner.dtype, dtype):
            return RefType(inner.shape, "int32", space)
    raise JaxprImportError(
        f"{what} is a ref of {inner.dtype} semaphores; only regular and DMA semaphores "
        "(SemaphoreType.REGULAR, SemaphoreType.DMA) import"
    )


@functools.lru_cache(maxsize=1024)
def _array_type(shape: tuple[int, ...], dtype: object) -> ArrayType:
    return ArrayType(shape, dtype_of(dtype, "a value"))
