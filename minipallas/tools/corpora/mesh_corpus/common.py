"""The corpus's shared pieces: ``MeshCase``, tile sizes, meshes and deterministic data."""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

R = 8  # rows (sublanes) of one tile


L = 128  # lanes of one tile


EPS = 1e-5


F32 = jnp.float32


I32 = jnp.int32


@dataclasses.dataclass(frozen=True)
class MeshCase:
    name: str
    cores: int  # num_cores of the mesh
    build: Callable[[], tuple[Callable, tuple[np.ndarray, ...]]]  # -> (f, numpy args)
    reference: Callable[..., tuple[np.ndarray, ...]] | None  # numpy outputs; None unless "ok"
    expect: str = "ok"  # "ok", "race" or "deadlock"
    what: str = ""
    exact: bool = True  # False: exp/rsqrt inside, compare with a tolerance


def _mesh(cores):
    return pltpu.create_tensorcore_mesh("core", num_cores=cores)


def _kernel(body, out_type, cores, **kw):
    return jax.jit(pl.kernel(body, out_type=tuple(out_type), mesh=_mesh(cores), **kw))


def _rng(name, cores):
    return np.random.default_rng(zlib.crc32(f"{name}/{cores}".encode()))


def _ints(rng, shape, lo, hi, dtype=np.float32):
    """Integers in [lo, hi) as ``dtype``: exact under any summation order."""
    return rng.integers(lo, hi, shape).astype(dtype)


def _signal_all_but_me(sem, cores):
    """Core 0's broadcast: one signal to every other core's copy of ``sem``."""
    for k in range(1, cores):
        pl.semaphore_signal(sem, 1, core_index=k)
