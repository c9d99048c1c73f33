"""Shared helpers for the kernel tests: bitwise comparison of results, the custom calls of a
function lowered for a platform."""

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


def custom_call_ops(fn, args, platform):
    """The ``stablehlo.custom_call`` operations of ``jax.jit(fn)`` lowered for ``platform`` (on
    any machine: ``lowering_platforms`` needs no device), in module order."""
    import jax

    module = jax.jit(fn).trace(*args).lower(lowering_platforms=(platform,))
    found = []

    def walk(op):
        for region in op.regions:
            for block in region:
                for inner in block:
                    if inner.operation.name == "stablehlo.custom_call":
                        found.append(inner.operation)
                    walk(inner.operation)

    walk(module.compiler_ir("stablehlo").operation)
    return found
