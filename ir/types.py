"""Types of SSA values: immutable arrays (``ArrayType``) and mutable references (``RefType``).

Both are frozen, hashable dataclasses that check themselves when built, so a malformed type can
never enter the IR. A ``RefType`` also names the memory space the buffer lives in, following
Pallas (``tpu.VMEM``, ``tpu.SMEM``, ``tpu.ANY``, ``gpu.GMEM``, ``gpu.SMEM``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.errors import MiniPallasError


def _check_shape(shape: object) -> tuple[int, ...]:
    try:
        dims = tuple(shape)  # type: ignore[arg-type]
    except TypeError:
        raise MiniPallasError(f"shape must be a sequence of ints, got {shape!r}") from None
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int | np.integer) or d < 0:
            raise MiniPallasError(f"shape dimensions must be non-negative ints, got {shape!r}")
    return tuple(int(d) for d in dims)


def _shape_text(dtype: str, shape: tuple[int, ...]) -> str:
    return f"{dtypes.SHORT[dtype]}[{','.join(map(str, shape))}]"


@dataclass(frozen=True)
class ArrayType:
    """An immutable array value, e.g. ``f32[8,128]``; ``f32[]`` is a scalar."""

    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", _check_shape(self.shape))
        object.__setattr__(self, "dtype", dtypes.canonicalize(self.dtype))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def __str__(self) -> str:
        return _shape_text(self.dtype, self.shape)


@dataclass(frozen=True)
class MemorySpace:
    """Where a buffer lives. Calling one with ``(shape, dtype)`` gives a ``RefType``."""

    name: str

    def __call__(self, shape: tuple[int, ...], dtype: object) -> RefType:
        return RefType(shape, dtype, self)

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Semaphores(MemorySpace):
    """Counting semaphores (upstream's ``pltpu.SemaphoreType.REGULAR``): int32 counters that
    start at 0, changed only by ``semaphore_signal`` / ``semaphore_wait`` and seen only by
    ``semaphore_read`` (``ir.opset.semaphore``). ``REGULAR`` alone is one semaphore,
    ``REGULAR((4,))`` an array of four."""

    def __call__(self, shape: tuple[int, ...] = (), dtype: object = "int32") -> RefType:
        return RefType(shape, dtype, self)


ANY = MemorySpace("any")
TPU_VMEM = MemorySpace("tpu.vmem")
TPU_SMEM = MemorySpace("tpu.smem")
# memory every TensorCore of a chip sees (``pltpu.VMEM_SHARED``): what a mesh kernel's cores
# share through a collective ``run_scoped`` (``ir/opset/mesh.py``)
TPU_VMEM_SHARED = MemorySpace("tpu.vmem_shared")
GPU_GMEM = MemorySpace("gpu.gmem")
GPU_SMEM = MemorySpace("gpu.smem")
SEMAPHORE = Semaphores("semaphore")
# DMA semaphores (``pltpu.SemaphoreType.DMA``): the counter an async copy signals when its data
# has landed and its wait takes back (``ir.opset.dma``); ``semaphore_read`` may read one.
DMA_SEMAPHORE = Semaphores("dma_semaphore")
MEMORY_SPACES = {
    m.name: m
    for m in (
        ANY,
        TPU_VMEM,
        TPU_SMEM,
        TPU_VMEM_SHARED,
        GPU_GMEM,
        GPU_SMEM,
        SEMAPHORE,
        DMA_SEMAPHORE,
    )
}


@dataclass(frozen=True)
class RefType:
    """A mutable buffer, e.g. ``Ref{f32[8,128], tpu.vmem}``."""

    shape: tuple[int, ...]
    dtype: str
    memory_space: MemorySpace = ANY

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", _check_shape(self.shape))
        object.__setattr__(self, "dtype", dtypes.canonicalize(self.dtype))
        space = self.memory_space
        name = space if isinstance(space, str) else getattr(space, "name", None)
        space = MEMORY_SPACES.get(name) if isinstance(space, str | MemorySpace) else None
        if space is None:
            raise MiniPallasError(
                f"unknown memory space {self.memory_space!r}",
                fix=f"use one of {', '.join(MEMORY_SPACES)}",
            )
        if isinstance(space, Semaphores) and self.dtype != "int32":
            raise MiniPallasError(
                f"semaphores count in int32, got a {self.dtype} semaphore ref",
                fix="allocate them as tpu.SemaphoreType.REGULAR / DMA, or REGULAR((n,))",
            )
        object.__setattr__(self, "memory_space", space)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def value_type(self) -> ArrayType:
        """The type of the array the ref holds."""
        return ArrayType(self.shape, self.dtype)

    def __str__(self) -> str:
        space = "" if self.memory_space == ANY else f", {self.memory_space}"
        return f"Ref{{{_shape_text(self.dtype, self.shape)}{space}}}"


Type = ArrayType | RefType


def initial_value(t: RefType) -> object:
    """What a fresh buffer of ``t`` holds: ``dtypes.fill_value`` (upstream's uninitialized
    contents), or 0 for semaphores, which start counting there."""
    return 0 if is_semaphore(t) else dtypes.fill_value(t.dtype)


def as_ref_type(t: object) -> RefType | None:
    """What ``run_scoped`` and ``scratch_shapes`` allocate for ``t``: a ref type as it is, and
    ``SemaphoreType.REGULAR`` / ``DMA`` on its own as one semaphore (upstream's spelling); None
    otherwise."""
    if isinstance(t, RefType):
        return t
    return t() if isinstance(t, Semaphores) else None


def is_semaphore(t: Type) -> bool:
    """Whether ``t`` is a ref of semaphores, regular or DMA: counters, not memory."""
    return isinstance(t, RefType) and isinstance(t.memory_space, Semaphores)


def scalar(dtype: object) -> ArrayType:
    return ArrayType((), dtype)
