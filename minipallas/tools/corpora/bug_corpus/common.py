"""What every corpus module shares: the entry record, its allowed values, seeded inputs and one
``pallas_call`` wrapper that threads the harness's ``interpret`` through."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from jax.experimental import pallas as pl

# The kinds a no-chip check should report (issue 39), and what a TPU v5e does with a kernel.
BUGS = (
    "out-of-bounds",
    "undefined-read",
    "unwritten-output",
    "dma",
    "semaphore",
    "race",
    "compile",
    "overflow",
)
CHIPS = ("halt", "hang", "compile-error", "varies", "wrong", "latent", "correct")

F32 = np.float32
I32 = np.int32
S = jax.ShapeDtypeStruct
HIGHEST = jax.lax.Precision.HIGHEST  # the chip's default f32 dot is one bf16 pass


@dataclass(frozen=True)
class Entry:
    """One kernel: ``fn(*args, interpret=...)`` runs it; ``want(*args)`` is what its author
    meant (numpy); ``bug`` the kind a check should report (None: a correct control); ``chip``
    what a TPU v5e did with it (``bench/chip/tpu_bugs.py``, ``bench/results/tpu_bugs.txt``);
    ``note`` the bug in a reviewer's words."""

    name: str
    fn: Callable[..., Any]
    args: tuple[np.ndarray, ...]
    want: Callable[..., Any]
    bug: str | None
    chip: str
    note: str


def normal(seed: int, *shape: int) -> np.ndarray:
    """Deterministic f32 data, rounded to two decimals (sums stay exact-ish)."""
    return np.round(np.random.default_rng(seed).standard_normal(shape), 2).astype(F32)


def call(kernel: Callable[..., Any], out_shape: Any, interpret: Any, **kw: Any) -> Any:
    """``pl.pallas_call`` with the harness's ``interpret`` (False on the chip; True or
    ``pltpu.InterpretParams`` on the CPU)."""
    return pl.pallas_call(kernel, out_shape=out_shape, interpret=interpret, **kw)


def matmul_ref(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return (x.astype(np.float64) @ y.astype(np.float64)).astype(F32)


# |got - want| <= ATOL + RTOL |want|: f32 sums in another order, the chip's exp and rsqrt.
RTOL, ATOL = 1e-5, 1e-4


def outputs(value: Any) -> tuple[np.ndarray, ...]:
    """A kernel's result (an array or a tuple of them) as numpy arrays."""
    values = value if isinstance(value, tuple | list) else (value,)
    return tuple(np.asarray(v) for v in values)


def matches(got: Any, want: Any) -> bool:
    """``got`` equals ``want`` within ``RTOL``/``ATOL``, shapes equal; a NaN never matches."""
    got, want = outputs(got), outputs(want)
    if len(got) != len(want):
        return False
    for g, w in zip(got, want, strict=True):
        if g.shape != w.shape:
            return False
        g, w = g.astype(np.float64), w.astype(np.float64)
        if not np.allclose(g, w, rtol=RTOL, atol=ATOL, equal_nan=False):
            return False
    return True
