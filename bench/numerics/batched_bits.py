"""Which float reductions and dots XLA:CPU computes bit for bit alike batched and per grid point.

``passes.batching`` may batch a float reduction or dot in exact mode (``match_upstream=True``)
only where the batched program gives the loop program's bits (``passes/xla_cpu/exactness.py``
states the rule). This script measures it on the programs the pass really emits: each case is a
small ``pallas_call`` kernel; its batched program (``vectorized_grid_program`` with
``exact=False``: every reduction and dot batched, batch axes placed as the pass places them,
blocks in place ``(n0, b0, n1, b1, ...)``) and its loop program (``grid_program``, one XLA
while-loop step per grid point, as upstream interpret mode runs it) are compiled by XLA:CPU and
run on the same inputs for several seeds. The table gives the elements that differ (NaNs equal)
and, where the exact rule admits the case, those that exact mode's own program (which may run
an op in chunks) gets wrong: any such element is a bug in the rule. Cases cover sums, products,
max and min of f32, bf16 and f16 over the minor, major and all block dims, keepdims or not, a
unit dim (``[1, 1024]``), alone and fused with producers (``exp(x - max)`` as softmax,
``(x - mean)**2`` as a variance, a layer norm's rows), and dots of blocks batched over
one or two grid axes (``x @ y``, ``q @ k.T``, bf16 in with f32 out), plus the suite's and
bench/realistic_kernels.py's kernels.

    python -m bench.numerics.batched_bits [--seeds 3] [--only softmax]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass

import ml_dtypes
import numpy as np

import minipallas as mp
import minipallas.numpy as mnp
from bench.common import table
from bench.realistic_kernels import realistic_cases
from minipallas.kernels.programs.grid import grid_program
from minipallas.kernels.programs.vectorized_grid import (
    vectorized_grid_plan,
    vectorized_grid_program,
)
from minipallas.tools.corpora.suite import KERNELS

DTYPES = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16}


@dataclass(frozen=True)
class Probe:
    """One kernel to measure: a ``PallasCall`` and its inputs for a seed."""

    name: str
    call: Callable[[], object]
    inputs: Callable[[int], tuple[np.ndarray, ...]]


def _normal(shape, dtype, near_one=False, zeros=False):
    """Normal values; ``near_one``: 1 + 0.01 normal (products stay finite); ``zeros``: only
    +0 and -0 (a max or min over them depends on the order XLA compares them in)."""

    def make(rng):
        x = rng.standard_normal(shape, dtype=np.float32)
        if zeros:
            x = np.where(x > 0, np.float32(0.0), np.float32(-0.0))
        return (1 + 0.01 * x if near_one else x).astype(dtype)

    return make


def reduction(kind, dtype, block, grid, axis, keepdims=True, fused=None, zeros=False) -> Probe:
    """``kind`` (sum/prod/max/min) of each ``block`` of an input cut along a grid of up to two
    axes (rows, columns), over ``axis`` (1 minor, 0 major, None all), optionally after a
    producer (``fused``: "softmax" sums ``exp(x - max)``, "variance" sums ``(x - mean)**2``,
    "norm" the rows of a layer norm)."""
    bm, bn = block
    rows, cols = grid if len(grid) == 2 else (grid[0], 1)
    np_dtype = DTYPES[dtype]

    def kernel(x_ref, o_ref):
        x = x_ref[...]
        if fused == "softmax":
            x = mnp.exp(x - x.max(axis=1, keepdims=True))
        elif fused == "variance":
            c = x - x.sum(axis=1, keepdims=True) / bn
            x = c * c
        elif fused == "norm":  # a layer norm's rows, its rsqrt of one value a row
            c = x - x.sum(axis=1, keepdims=True) / bn
            x = c * mnp.rsqrt((c * c).sum(axis=1, keepdims=True) / bn + 1e-5)
        o_ref[...] = getattr(mnp, kind)(x, axis=axis, keepdims=keepdims)

    if len(grid) == 1:
        in_spec = mp.BlockSpec(block, lambda i: (i, 0))
    else:
        in_spec = mp.BlockSpec(block, lambda i, j: (i, j))
    out_block = {1: (bm, 1), 0: (1, bn), None: (1, 1)}[axis]
    if not keepdims:
        assert axis == 1 and len(grid) == 1
        out_shape, out_spec = (rows * bm,), mp.BlockSpec((bm,), lambda i: (i,))
    elif len(grid) == 1:
        out_shape = (rows * out_block[0], out_block[1])
        out_spec = mp.BlockSpec(out_block, lambda i: (i, 0))
    else:
        out_shape = (rows * out_block[0], cols * out_block[1])
        out_spec = mp.BlockSpec(out_block, lambda i, j: (i, j))
    name = f"{kind} {dtype} {bm}x{bn} grid {'x'.join(map(str, grid))} axis {axis}"
    name += "" if keepdims else " flat"
    name += f" after {fused}" if fused else ""
    name += " of +-0" if zeros else ""

    def call():
        return mp.pallas_call(
            kernel, mp.ArrayType(out_shape, dtype), grid=grid, in_specs=[in_spec],
            out_specs=out_spec, name="probe",
        )  # fmt: skip

    make = _normal((rows * bm, cols * bn), np_dtype, near_one=kind == "prod", zeros=zeros)
    return Probe(name, call, lambda seed: (make(np.random.default_rng(seed)),))


def dot(form, dtype, m, k, n, grid, after=None) -> Probe:
    """A block of ``x`` (m, k) times a block of ``y`` on a ``grid`` of (row blocks, column
    blocks): ``form`` "x@y" (y is (k, n)), "q@k.T" (y is (n, k), contracted on its dim 1) or
    "x.T@y" (x is (k, m), contracted on its dim 0);
    ``after`` "exp" applies exp to the product (flash attention's scores)."""
    rows, cols = grid
    np_dtype = DTYPES[dtype]
    x_block, x_map = (
        ((k, m), lambda i, j: (0, i)) if form == "x.T@y" else ((m, k), lambda i, j: (i, 0))
    )
    x_shape = (k, rows * m) if form == "x.T@y" else (rows * m, k)

    def kernel(x_ref, y_ref, o_ref):
        y = y_ref[...].T if form == "q@k.T" else y_ref[...]
        x = x_ref[...].T if form == "x.T@y" else x_ref[...]
        s = mnp.dot(x, y, preferred_element_type=mnp.float32)
        o_ref[...] = mnp.exp(s) if after == "exp" else s

    y_shape = (cols * n, k) if form == "q@k.T" else (k, cols * n)
    y_block = (n, k) if form == "q@k.T" else (k, n)
    y_map = (lambda i, j: (j, 0)) if form == "q@k.T" else (lambda i, j: (0, j))

    def call():
        return mp.pallas_call(
            kernel, mp.ArrayType((rows * m, cols * n), "float32"), grid=grid,
            in_specs=[mp.BlockSpec(x_block, x_map), mp.BlockSpec(y_block, y_map)],
            out_specs=mp.BlockSpec((m, n), lambda i, j: (i, j)), name="probe",
        )  # fmt: skip

    mx, my = _normal(x_shape, np_dtype), _normal(y_shape, np_dtype)

    def inputs(seed):
        rng = np.random.default_rng(seed)
        return mx(rng), my(rng)

    name = f"dot {form} {dtype} {m}x{k}x{n} grid {rows}x{cols}" + (
        f" then {after}" if after else ""
    )
    return Probe(name, call, inputs)


def probes() -> list[Probe]:
    out = []
    for kind in ("sum", "max", "min", "prod"):
        for dtype in ("f32", "bf16", "f16"):
            for block, grid in (((8, 1024), (64,)), ((16, 128), (8,)), ((8, 256), (8,))):
                out.append(reduction(kind, dtype, block, grid, 1))
            if dtype != "f32":
                continue
            out += [
                reduction(kind, dtype, (1, 1024), (64,), 1),
                reduction(kind, dtype, (128, 128), (4, 4), 1),
                reduction(kind, dtype, (128, 128), (4, 4), 0),
                reduction(kind, dtype, (8, 512), (16, 2), 0),
                reduction(kind, dtype, (64, 64), (4, 4), None),
                reduction(kind, dtype, (8, 1024), (16,), 1, keepdims=False),
            ]
    for kind in ("max", "min"):
        for block, grid in (((8, 1024), (64,)), ((16, 128), (8,)), ((128, 128), (4, 4))):
            out.append(reduction(kind, "f32", block, grid, 1, zeros=True))
            out.append(reduction(kind, "f32", block, grid, 0, zeros=True))
    for block, grid in (((8, 1024), (64,)), ((8, 256), (8,)), ((128, 128), (16,))):
        out.append(reduction("sum", "f32", block, grid, 1, fused="softmax"))
        out.append(reduction("sum", "f32", block, grid, 1, fused="variance"))
    for grid in ((255,), (256,), (1024,)):  # the rsqrt: one program, two chunks, refused
        out.append(reduction("sum", "f32", (16, 1024), grid, 1, fused="norm"))
    for dtype in ("f32", "bf16"):
        for m, k, n, grid in ((128, 128, 128, (4, 4)), (32, 32, 128, (2, 2)), (8, 512, 8, (8, 8))):
            out.append(dot("x@y", dtype, m, k, n, grid))
        out.append(dot("q@k.T", dtype, 128, 64, 128, (8, 8)))
    for k in (128, 256, 512, 1024):
        out.append(dot("q@k.T", "f32", 32, k, 32, (4, 4)))
    out.append(dot("x.T@y", "f32", 128, 128, 128, (4, 4)))
    out.append(dot("x@y", "f32", 1, 128, 128, (8, 8)))
    out.append(dot("x@y", "f32", 128, 128, 1, (8, 8)))
    out.append(dot("x@y", "f32", 16, 1024, 16, (4, 4)))
    for grid in ((8, 1), (1, 8)):  # narrow dots batched over rows only, over columns only
        out.append(dot("x@y", "f32", 8, 512, 8, grid))
        out.append(dot("q@k.T", "f32", 32, 256, 32, grid))
    out.append(dot("x@y", "f32", 64, 256, 64, (4, 4)))
    out.append(dot("x@y", "f32", 8, 2048, 128, (4, 1)))
    out.append(dot("q@k.T", "f32", 128, 64, 128, (16, 1), after="exp"))
    for case in (*KERNELS, *realistic_cases()):
        out.append(Probe(f"suite {case.name}", case.minipallas, case.inputs))
    return out


def measure(probe: Probe, seeds: int) -> tuple | None:
    """(name, batched axes fast / exact, elements, differing elements per seed batched as
    ``exact=False`` batches, and as exact mode does), or None when nothing is batched even with
    ``exact=False`` (then there is nothing to compare)."""
    call = probe.call()
    args = probe.inputs(0)
    kernel = call.trace(*args)
    fast_axes = vectorized_grid_plan(kernel, exact=False)
    if fast_axes is None:
        return None
    exact_axes = vectorized_grid_plan(kernel, exact=True)
    loop = mp.compile(grid_program(kernel))
    ways = [mp.compile(vectorized_grid_program(kernel, exact=False))]
    if exact_axes is not None:  # exact mode's own program (reductions or ops in chunks)
        ways.append(mp.compile(vectorized_grid_program(kernel, exact=True)))
    diffs, exact_diffs, size = [], [], 0
    for seed in range(seeds):
        args = probe.inputs(seed)
        expected = loop(*args)
        size = sum(np.asarray(e).size for e in expected)
        counts = [
            sum(_differing(g, e) for g, e in zip(way(*args), expected, strict=True)) for way in ways
        ]
        diffs.append(counts[0])
        exact_diffs.append(counts[-1] if exact_axes is not None else None)
    return (probe.name, _axes(fast_axes), _axes(exact_axes), size, diffs, exact_diffs)


def _differing(a: np.ndarray, b: np.ndarray) -> int:
    """Elements whose bits differ (NaNs of any payload equal)."""
    a, b = np.asarray(a).reshape(-1), np.asarray(b).reshape(-1)
    if a.dtype.kind not in "fV":
        return int((a != b).sum())
    bits_a, bits_b = a.view(f"u{a.itemsize}"), b.view(f"u{b.itemsize}")
    if a.itemsize == 2 and a.dtype != np.float16:
        a, b = a.view(ml_dtypes.bfloat16), b.view(ml_dtypes.bfloat16)
    nan = np.isnan(a.astype(np.float32)) & np.isnan(b.astype(np.float32))
    bits = bits_a != bits_b
    return int((bits & ~nan).sum())


def _axes(axes: tuple[int, ...] | None) -> str:
    return "-" if axes is None else ",".join(map(str, axes))


def main(argv: list[str] | None = None) -> list[tuple]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--only", default="", help="only cases whose name contains this")
    args = parser.parse_args(argv)
    rows = []
    for probe in probes():
        if args.only not in probe.name:
            continue
        row = measure(probe, args.seeds)
        if row is not None:
            rows.append(row)
            print(*row, sep=" | ", flush=True, file=sys.stderr)
    header = ["case", "batched", "exact", "elements", "differ per seed", "exact mode differs"]
    print(
        table(
            header,
            [
                (
                    *r[:4],
                    ",".join(map(str, r[4])),
                    "-" if r[5][0] is None else ",".join(map(str, r[5])),
                )
                for r in rows
            ],
        )
    )
    bad = [r[0] for r in rows if r[5][0] is not None and any(r[5])]
    print(f"\nadmitted cases that differ: {len(bad)} {bad if bad else ''}")
    return rows


if __name__ == "__main__":
    main()
