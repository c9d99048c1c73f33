"""Edge-rich float32 samples for the tests that compare the interpreter's math with XLA's."""

from collections.abc import Callable

import numpy as np


def edge_rich_float32(
    centres: np.ndarray, typical: Callable[[int], np.ndarray], n: int, rng: np.random.Generator
) -> np.ndarray:
    """``n`` float32 values: every value within 32 ulps of each centre, subnormals, NaN
    payloads and infinities (both signs), then half random bit patterns and half ``typical``."""
    bits_of_centres = np.asarray(centres, np.float32).view(np.int32)
    near = (bits_of_centres[:, None] + np.arange(-32, 33, dtype=np.int32)).ravel().view(np.float32)
    subnormals = np.arange(1, 1 << 23, 8191, dtype=np.uint32).view(np.float32)
    nans = np.array([0x7FC00000, 0x7F800001, 0x7FA00000, 0x7FFFFFFF], np.uint32).view(np.float32)
    fixed = np.concatenate([near, subnormals, nans, np.float32([np.inf])])
    fixed = np.concatenate([fixed, -fixed])
    rest = n - fixed.size
    bits = rng.integers(0, 2**32, rest // 2, dtype=np.uint64).astype(np.uint32).view(np.float32)
    return np.concatenate([fixed, bits, typical(rest - rest // 2).astype(np.float32)])
