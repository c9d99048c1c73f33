"""``Element`` block-dim kernels written once, built for minipallas and for upstream Pallas.

A spec is ``(block, index_map)``; a block entry is an int (blocked), ``None`` (squeezed) or
``E(n, low, high)`` (``Element(n, padding=(low, high))``). ``calls`` gives the same
``pallas_call`` on both sides; ``upstream(..., interpret=True)`` is the reference for the CPU
bits, ``interpret=False`` (lowered for TPU or CUDA) for the Mosaic and Triton modules.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import minipallas


@dataclass(frozen=True)
class E:
    """An ``Element(n, padding=(low, high))`` block entry, for either side."""

    size: int
    low: int = 0
    high: int = 0


Spec = tuple[tuple[Any, ...], Callable[..., Any]]


def _ours(b: Any) -> Any:
    return minipallas.Element(b.size, (b.low, b.high)) if isinstance(b, E) else b


def _theirs(b: Any) -> Any:
    from jax.experimental import pallas as pl

    return pl.Element(b.size, (b.low, b.high)) if isinstance(b, E) else b


@dataclass(frozen=True)
class Calls:
    """One kernel call on both sides; ``args`` are its example inputs."""

    name: str
    kernel: Callable[..., None]
    out: tuple[tuple[int, ...], Any]  # (shape, numpy dtype)
    grid: tuple[int, ...]
    in_specs: Sequence[Spec]
    out_spec: Spec
    args: tuple[np.ndarray, ...]
    aliases: dict[int, int] | None = None

    def minipallas(self) -> minipallas.PallasCall:
        shape, dtype = self.out
        return minipallas.pallas_call(
            self.kernel,
            minipallas.ArrayType(shape, np.dtype(dtype).name),
            grid=self.grid,
            in_specs=[minipallas.BlockSpec(tuple(map(_ours, b)), m) for b, m in self.in_specs],
            out_specs=minipallas.BlockSpec(tuple(map(_ours, self.out_spec[0])), self.out_spec[1]),
            input_output_aliases=self.aliases,
            name=self.name,
        )

    def upstream(self, interpret: bool = True, **kwargs: Any) -> Callable[..., Any]:
        import jax
        from jax.experimental import pallas as pl

        shape, dtype = self.out
        return pl.pallas_call(
            self.kernel,
            jax.ShapeDtypeStruct(shape, dtype),
            grid=self.grid,
            in_specs=[pl.BlockSpec(tuple(map(_theirs, b)), m) for b, m in self.in_specs],
            out_specs=pl.BlockSpec(tuple(map(_theirs, self.out_spec[0])), self.out_spec[1]),
            input_output_aliases=self.aliases or {},
            interpret=interpret,
            name=self.name,
            **kwargs,
        )

    def specs(self) -> list[Any]:
        import jax

        return [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in self.args]


def _window_sum(x_ref, o_ref):
    """A 3-tap sliding window: each output block reads its block and one element either side."""
    o_ref[...] = x_ref[0:8] + x_ref[1:9] * 2.0 + x_ref[2:10]


def _two_halves(x_ref, o_ref):
    o_ref[...] = x_ref[0:8] + x_ref[8:16] * 2.0


def _copy_plus_one(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1


def _rows_window(x_ref, o_ref):
    """A (8, 128) output tile from a (16, 256) window: a 2-D stencil-like mix."""
    o_ref[...] = x_ref[0:8, 0:128] + x_ref[8:16, 128:256] - x_ref[4:12, 64:192]


X64 = np.arange(64, dtype=np.float32) * 0.5 + 0.25
X2D = (np.arange(32 * 512, dtype=np.float32).reshape(32, 512) % 97) / 7


# The CPU cases: padding on inputs and outputs, overlapping and out-of-range windows.
CPU_CASES = [
    Calls("halo", _window_sum, ((64,), np.float32), (8,),
          [((E(10, 1, 1),), lambda i: (i * 8,))], ((8,), lambda i: (i,)), (X64,)),
    Calls("halo_low_only", _window_sum, ((64,), np.float32), (8,),
          [((E(10, 2, 0),), lambda i: (i * 8,))], ((8,), lambda i: (i,)), (X64,)),
    Calls("pad_past_blocks", _two_halves, ((64,), np.float32), (8,),
          [((E(16, 3, 9),), lambda i: (i * 8 - 2,))], ((8,), lambda i: (i,)), (X64,)),
    Calls("pad_start_past_end", _two_halves, ((64,), np.float32), (8,),
          [((E(16, 0, 5),), lambda i: (i * 9,))], ((8,), lambda i: (i,)), (X64,)),
    Calls("padded_output", _copy_plus_one, ((40,), np.float32), (5,),
          [((8,), lambda i: (i,))], ((E(8, 2, 3),), lambda i: (i * 8,)),
          (np.arange(40, dtype=np.float32),)),
    Calls("padded_output_low", _copy_plus_one, ((40,), np.int32), (5,),
          [((8,), lambda i: (i,))], ((E(8, 5, 0),), lambda i: (i * 8 + 3,)),
          (np.arange(40, dtype=np.int32),)),
    Calls("rows_window", _rows_window, ((32, 512), np.float32), (4, 4),
          [((E(16, 4, 4), E(256, 64, 64)), lambda i, j: (i * 8, j * 128))],
          ((8, 128), lambda i, j: (i, j)), (X2D,)),
    Calls("squeezed_and_element", _two_halves, ((4, 64), np.float32), (4, 8),
          [((None, E(16, 4, 4)), lambda b, i: (b, i * 8))],
          ((None, 8), lambda b, i: (b, i)),
          (np.arange(4 * 64, dtype=np.float32).reshape(4, 64) / 3,)),
]  # fmt: skip
BY_NAME = {c.name: c for c in CPU_CASES}
