"""What a kernel's outputs owe to memory a TPU leaves undefined, found on the CPU.

On the chip three kinds of memory hold whatever was there before: an output block before the
kernel writes it (Pallas TPU never loads output blocks, ``lowering/tpu/output_reads.py``), the
padding of a partial block past the end of an array, and scratch. Lanes a masked store skips,
rows no block visits and outputs never written end up as such memory; so does anything
computed from it. A bit comparison of two runs on the chip must skip those elements, and only
those.

minipallas's loop program (``kernels.programs.grid``) models each of these memories as a buffer
it fills before the grid runs (upstream interpret mode's NaN or integer minimum). Run it twice
with two different fills, far apart in every dtype, and an output element that changes is one
that depends on undefined memory: ``undefined(kernel, args)`` is that mask per output. An
aliased output's unvisited rows keep its input on both platforms and count as defined.
Elements a chip defines the same way twice by chance (a max over garbage that the real data
wins) are not flagged; nothing defined is ever flagged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.kernel_spec import Kernel
from minipallas.kernels.programs.grid import grid_program
from minipallas.lowering.runtime.compiled import compile as compile_fn

__all__ = ["bits", "high_fill", "low_fill", "undefined"]


def high_fill(name: str) -> np.generic:
    """A fill far above any data: 2**60 (floats; infinity in float16), the integer maximum's
    pattern, True."""
    np_dtype = dtypes.to_numpy(name)
    if dtypes.is_float(name):
        with np.errstate(over="ignore"):
            return np_dtype.type(2.0**60)
    if dtypes.is_int(name):
        return np_dtype.type(np.iinfo(np_dtype).max)
    return np.True_


def low_fill(name: str) -> np.generic:
    """The other fill: -2**40, the integer minimum plus three, False. Not the high fill's
    negation: a product of two fills (padding times padding in a dot) must differ too."""
    np_dtype = dtypes.to_numpy(name)
    if dtypes.is_float(name):
        with np.errstate(over="ignore"):
            return np_dtype.type(-(2.0**40))
    if dtypes.is_int(name):
        return np_dtype.type(np.iinfo(np_dtype).min + 3)
    return np.False_


def undefined(kernel: Kernel, args: Sequence[Any]) -> list[np.ndarray]:
    """Per output of ``kernel`` on ``args`` (the loop program's operands: dynamic grid sizes,
    scalar-prefetch arrays, inputs), a bool mask of the elements a TPU leaves undefined."""
    runs = [compile_fn(grid_program(kernel, fill=fill))(*args) for fill in (high_fill, low_fill)]
    return [bits(a) != bits(b) for a, b in zip(*(map(np.asarray, r) for r in runs), strict=True)]


def bits(a: np.ndarray) -> np.ndarray:
    """The elements' bit patterns (a bool is its byte)."""
    return a.view(np.dtype(f"u{a.dtype.itemsize}")) if a.dtype != np.bool_ else a
