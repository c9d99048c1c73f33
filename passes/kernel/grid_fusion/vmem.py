"""The bytes a value or buffer takes in a TPU's VMEM, where its last two dimensions fill whole
(8, 128) tiles of 32-bit words: the VMEM budget of ``cost`` and the values ``carried`` keeps
in registers are weighed so."""

from __future__ import annotations

import math

from minipallas.ir import dtypes


def tiled_bytes(shape: tuple[int, ...], dtype: str) -> int:
    """Bytes in VMEM, where the last two dimensions fill whole (8, 128) tiles of 32-bit words:
    flash attention's running max of 4096x1 floats takes 2 MiB, not 16 KiB."""
    size = dtypes.itemsize(dtype)
    tile = (max(1, 32 // (8 * size)) * 8, 128)
    last = shape[-2:]
    tiles = tile[2 - len(last) :]
    padded = [*shape[:-2], *(-(-n // t) * t for n, t in zip(last, tiles, strict=True))]
    return math.prod(padded) * size
