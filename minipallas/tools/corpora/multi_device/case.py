"""One kernel that spans devices, as a record, and the few helpers the corpus's kernels share.

A case builds its JAX function only when asked (``Case.build()``): upstream decides at the
``pl.pallas_call(...)`` whether a kernel runs in TPU interpret mode
(``pltpu.force_tpu_interpret_mode``), and the mesh needs the process's devices, which exist
only where ``XLA_FLAGS=--xla_force_host_platform_device_count=8`` was set before jax started.
Inputs are small integers stored as float32, so every sum and matmul is exact in any order and
numpy's result is the kernel's bit for bit (the ring attention's exponentials, within ``atol``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# a Pallas ref, semaphore or copy descriptor, and the kernels' index values: upstream's own
# types for them are internal, so the corpus's kernels take them untyped
Ref = Any
Fn = Callable[..., Any]  # the JAX function a case runs
Build = Callable[[], Fn]  # makes it, under the caller's interpret mode
# what a kernel does when run correctly: its result, or the kind of its planted bug
EXPECTS = ("ok", "race", "deadlock", "wrong-count")
# what upstream's TPU interpret mode may do with one (``run.upstream``'s verdicts)
UPSTREAM_KINDS = ("ok", "wrong", "race", "wrong-count", "not-run", "hangs", "error")
MESH, LOGICAL = pl.DeviceIdType.MESH, pl.DeviceIdType.LOGICAL
DMA, REGULAR = pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.REGULAR
F32 = np.float32
P = jax.sharding.PartitionSpec
# where the ports come from (jax-ml/jax) and the guide they follow
DISTRIBUTED_TEST = "upstream tests/pallas/tpu_pallas_distributed_test.py"
INTERPRET_TEST = "upstream tests/pallas/tpu_pallas_interpret_distributed_test.py"
GUIDE = "upstream guide 'Distributed Computing in Pallas for TPUs'"
SHIPPED = "upstream jax.experimental.pallas.ops.tpu.all_gather"
OWN = "own"


@dataclass(frozen=True)
class Case:
    """A kernel in ``jax.shard_map`` over a mesh of CPU devices, its inputs and what it gives.

    ``build()`` returns the function (of ``inputs()``); ``reference`` computes its result with
    numpy (for a planted bug, what it means to compute, or None); ``expect`` is one of
    ``EXPECTS``; ``compilable`` says its communication does not depend on data (targets and
    sizes come from the device's position alone), so it could become XLA collectives;
    ``upstream`` is what upstream's TPU interpret mode does with it: ``"KIND: why"``, KIND one
    of ``UPSTREAM_KINDS`` (``a|b`` where upstream varies between runs); ``atol`` is 0 for an
    exact comparison, else the tolerance of a kernel with exponentials.
    """

    name: str
    source: str
    mesh: tuple[int, ...]
    build: Build
    inputs: Callable[[], tuple[np.ndarray, ...]]
    reference: Callable[..., np.ndarray] | None
    expect: str = "ok"
    compilable: bool = True
    upstream: str = "ok"
    atol: float = 0.0

    def __post_init__(self) -> None:
        if self.expect not in EXPECTS:
            raise ValueError(f"case {self.name}: expect={self.expect!r}, not one of {EXPECTS}")
        if self.reference is None and self.expect == "ok":
            raise ValueError(f"case {self.name}: a correct kernel needs a numpy reference")
        if not set(self.upstream_kinds) <= set(UPSTREAM_KINDS):
            raise ValueError(
                f"case {self.name}: upstream={self.upstream!r} does not start with "
                f"kinds of {UPSTREAM_KINDS}"
            )
        if (self.expect == "deadlock") != (self.upstream_kinds == ("not-run",)):
            raise ValueError(f"case {self.name}: a deadlock, and only one, is not run upstream")

    @property
    def upstream_kinds(self) -> tuple[str, ...]:
        """The kinds of verdict upstream's interpret mode gives (``upstream``'s head)."""
        return tuple(self.upstream.split(":")[0].split("|"))

    @property
    def devices(self) -> int:
        return int(np.prod(self.mesh))


def mesh(shape: Sequence[int], axes: Sequence[str]) -> jax.sharding.Mesh:
    """The first ``prod(shape)`` devices of the process as a mesh (refused if too few)."""
    n = int(np.prod(shape))
    if jax.device_count() < n:
        raise RuntimeError(
            f"a mesh {tuple(shape)} needs {n} devices, jax sees {jax.device_count()}: set "
            f"XLA_FLAGS=--xla_force_host_platform_device_count={n} before jax starts"
        )
    return jax.sharding.Mesh(np.array(jax.devices()[:n]).reshape(tuple(shape)), tuple(axes))


def ints(seed: int, *shapes: tuple[int, ...], low: int = -4, high: int = 5) -> tuple:
    """Arrays of small integers as float32 from one seed: exact under any order of sums."""
    rng = np.random.default_rng(seed)
    return tuple(rng.integers(low, high, shape).astype(F32) for shape in shapes)


def on_mesh(
    kernel: Any,
    mesh_: Any,
    out_shape: Any,
    in_specs: Any,
    out_specs: Any,
    *,
    scratch: Any = (),
    space: Any = pltpu.VMEM,
    n_in: int = 1,
    collective_id: int = 0,
) -> Fn:
    """The corpus's usual shape of kernel: one whole-shard ``pallas_call`` in a ``shard_map``.

    Every operand and the result are whole shards in ``space``; ``out_shape`` is the shard's
    result; ``collective_id`` names the barrier semaphore the kernel may use.
    """
    spec = pl.BlockSpec(memory_space=space)
    call = pl.pallas_call(
        kernel,
        out_shape=out_shape,
        in_specs=[spec] * n_in,
        out_specs=spec,
        scratch_shapes=list(scratch),
        compiler_params=pltpu.CompilerParams(collective_id=collective_id),
    )
    return jax.shard_map(call, mesh=mesh_, in_specs=in_specs, out_specs=out_specs, check_vma=False)


def shape(*dims: int) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(dims, F32)


def blocks(x: np.ndarray, n: int, axis: int = 0) -> list[np.ndarray]:
    """The shards of ``x`` along ``axis`` for a mesh axis of ``n`` devices."""
    return np.split(x, n, axis=axis)
