"""Scalar-prefetch kernels, written once for minipallas and upstream Pallas (as ``suite``).

A ``PrefetchCase`` is a kernel ``kernel(ns, *prefetch_refs, *in_refs, *out_refs, *scratch)``
with a ``PrefetchScalarGridSpec``'s fields; ``minipallas()`` and ``upstream()`` build the call
on either side (``minipallas.tpu.PrefetchScalarGridSpec`` / ``pltpu.PrefetchScalarGridSpec``).
Index maps take ``(*grid_indices, *prefetch_refs)``. Block shapes are TPU-legal, so the
Mosaic tests compare the same cases with upstream's modules.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import minipallas as mp
from minipallas.tools.corpora.suite import MP, jax_namespace


@dataclass(frozen=True)
class PrefetchCase:
    name: str
    kernel: Callable[..., None]
    out_shape: tuple[tuple[int, ...], str]
    make_inputs: Callable[[np.random.Generator], tuple[np.ndarray, ...]]
    num_scalar_prefetch: int
    grid: tuple[int, ...]
    in_specs: Sequence[tuple[tuple[int, ...], Callable[..., Any]]]
    out_specs: tuple[tuple[int, ...], Callable[..., Any]]
    scratch: tuple[tuple[tuple[int, ...], str], ...] = ()

    def inputs(self, seed: int = 0) -> tuple[np.ndarray, ...]:
        return self.make_inputs(np.random.default_rng(seed))

    def minipallas(self, **options: Any) -> mp.PallasCall:
        spec = mp.tpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=self.num_scalar_prefetch,
            grid=self.grid,
            in_specs=[mp.BlockSpec(*s) for s in self.in_specs],
            out_specs=mp.BlockSpec(*self.out_specs),
            scratch_shapes=[MP.VMEM(shape, dtype) for shape, dtype in self.scratch],
        )
        return mp.pallas_call(
            functools.partial(self.kernel, MP),
            mp.ArrayType(*self.out_shape),
            grid_spec=spec,
            name=self.name,
            **options,
        )

    def upstream(self, interpret: bool = True, **options: Any) -> Callable[..., Any]:
        """The jitted upstream call (``interpret=False``: for lowering with Mosaic)."""
        ns = jax_namespace()
        spec = ns.pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=self.num_scalar_prefetch,
            grid=self.grid,
            in_specs=[ns.pl.BlockSpec(*s) for s in self.in_specs],
            out_specs=ns.pl.BlockSpec(*self.out_specs),
            scratch_shapes=[ns.VMEM(shape, dtype) for shape, dtype in self.scratch],
        )
        call = ns.pl.pallas_call(
            functools.partial(self.kernel, ns),
            ns.jax.ShapeDtypeStruct(*self.out_shape),
            grid_spec=spec,
            interpret=interpret,
            name=self.name,
            **options,
        )
        return ns.jax.jit(call)


def gather_rows(ns, idx_ref, x_ref, o_ref):
    """Output block i is input block idx[i], plus idx[i] itself read in the body."""
    i = ns.program_id(0)
    o_ref[...] = x_ref[...] * 2 + idx_ref[i].astype(ns.np.float32)


def block_sparse_matmul(ns, cols_ref, x_ref, y_ref, o_ref, acc_ref):
    """Row block i multiplies only the K blocks ``cols[i, k]`` lists (block-sparse x)."""

    @ns.when(ns.program_id(1) == 0)
    def _():
        acc_ref[...] = ns.np.zeros(acc_ref.shape, ns.np.float32)

    acc_ref[...] += ns.np.dot(x_ref[...], y_ref[...], preferred_element_type=ns.np.float32)

    @ns.when(ns.program_id(1) == ns.num_programs(1) - 1)
    def _():
        o_ref[...] = acc_ref[...]


def permute_scaled(ns, perm_ref, scale_ref, x_ref, o_ref):
    """Two prefetch operands: input block i goes to output block perm[i], times scale[0]."""
    o_ref[...] = x_ref[...] * scale_ref[0]


def writes_prefetch(ns, idx_ref, x_ref, o_ref):
    """Writes its prefetch ref: upstream hands every step the operands as they came in."""
    i = ns.program_id(0)
    o_ref[...] = x_ref[...] + idx_ref[0].astype(ns.np.float32)
    idx_ref[0] = idx_ref[0] + 10 + i


def _table(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    return rng.permutation(n)[:k].astype(np.int32)


def _gather_inputs(rng):
    return _table(rng, 4, 4), rng.standard_normal((32, 128)).astype(np.float32)


def _sparse_inputs(rng):
    cols = np.stack([np.sort(_table(rng, 4, 2)) for _ in range(2)])
    x = rng.standard_normal((16, 512)).astype(np.float32)
    y = rng.standard_normal((512, 128)).astype(np.float32)
    return cols, x, y


def _permute_inputs(rng):
    perm = _table(rng, 4, 4)
    return perm, np.array([1.5], np.float32), rng.standard_normal((32, 128)).astype(np.float32)


ROW = (8, 128)
CASES = [
    PrefetchCase("gather_rows", gather_rows, ((32, 128), "float32"), _gather_inputs, 1, (4,),
                 [(ROW, lambda i, idx: (idx[i], 0))], (ROW, lambda i, idx: (i, 0))),
    PrefetchCase("block_sparse_matmul", block_sparse_matmul, ((16, 128), "float32"),
                 _sparse_inputs, 1, (2, 2),
                 [(ROW, lambda i, k, cols: (i, cols[i, k])),
                  ((128, 128), lambda i, k, cols: (cols[i, k], 0))],
                 (ROW, lambda i, k, cols: (i, 0)), scratch=((ROW, "float32"),)),
    PrefetchCase("permute_scaled", permute_scaled, ((32, 128), "float32"), _permute_inputs, 2,
                 (4,), [(ROW, lambda i, perm, scale: (i, 0))],
                 (ROW, lambda i, perm, scale: (perm[i], 0))),
    PrefetchCase("writes_prefetch", writes_prefetch, ((32, 128), "float32"), _gather_inputs, 1,
                 (4,), [(ROW, lambda i, idx: (idx[i], 0))], (ROW, lambda i, idx: (i, 0))),
]  # fmt: skip
BY_NAME = {c.name: c for c in CASES}
