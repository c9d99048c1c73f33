"""Shared helpers for the kernel tests: bitwise comparison of results."""

from __future__ import annotations

import numpy as np


def as_tuple(out):
    return tuple(out) if isinstance(out, tuple | list) else (out,)


def assert_same_bits(got, expected):
    """Same dtype, shape and bits; NaNs compare equal to NaNs (payloads may differ)."""
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    a, b = got.reshape(-1), expected.reshape(-1)
    same = a.view(np.uint8).reshape(a.size, -1) == b.view(np.uint8).reshape(b.size, -1)
    same = same.all(axis=1)
    if np.issubdtype(a.dtype, np.floating) or a.dtype.name == "bfloat16":
        wide_a, wide_b = a.astype(np.float32), b.astype(np.float32)
        same |= np.isnan(wide_a) & np.isnan(wide_b)
    bad = np.flatnonzero(~same)
    assert bad.size == 0, (
        f"{bad.size} elements differ, first at {bad[0]}: {a[bad[0]]} vs {b[bad[0]]}"
    )
