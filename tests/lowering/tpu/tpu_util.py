"""Shared helpers for the Mosaic TPU emitter's tests.

- ``spec`` / ``kernel`` build ``Kernel`` objects directly from Python bodies and index maps, so a
  test can state exactly the block specs it needs;
- ``suite_kernel`` / ``upstream_module`` give a suite kernel on both sides;
- ``mosaic_refuses(reason)`` marks a test whose module libtpu's Mosaic refuses
  (``tests/mosaic_compile.py`` compiles every module a test emits).
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
import sys
from collections.abc import Callable, Sequence

import pytest
from ir_types import I32

import minipallas as mp
from minipallas.ir.kernel_spec import Kernel, TracedBlockSpec
from minipallas.ir.types import TPU_VMEM, ArrayType, MemorySpace, RefType
from minipallas.lowering.lowered import Lowered
from minipallas.lowering.tpu.aot import MosaicCompileError, libtpu_available

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "kernels"))

from minipallas.tools.corpora.suite import (  # noqa: E402
    BY_NAME,
    KERNELS,
    Case,
    inputs,
    jax_namespace,
    normal,
    upstream_running_rows,
)

__all__ = [
    "BY_NAME",
    "KERNELS",
    "Case",
    "inputs",
    "kernel",
    "lower_case",
    "mosaic_refuses",
    "normal",
    "spec",
    "tpu_shaped",
    "upstream_module",
    "upstream_running_rows",
]


def mosaic_refuses(reason: str) -> pytest.MarkDecorator:
    """The test's module is one libtpu's Mosaic refuses for a v5e (``reason``: its message, and
    whether upstream's is the same module); strict, so a libtpu that accepts it shows. The
    test's own assertions still fail it. Without libtpu nothing is compiled."""
    return pytest.mark.xfail(
        libtpu_available(),
        reason=f"Mosaic (libtpu, v5e) refuses it: {reason}",
        raises=MosaicCompileError,
        strict=True,
    )


def spec(
    shape: Sequence[int],
    dtype: str,
    block: Sequence[int | None] | None = None,
    index_map: Callable | None = None,
    space: MemorySpace = TPU_VMEM,
) -> Callable[[int], TracedBlockSpec]:
    """A block spec, traced by ``kernel`` once the grid's rank is known; no ``block`` means
    the whole array with an all-zero index map."""
    array = ArrayType(tuple(shape), dtype)
    if block is None:
        block = tuple(shape)
        index_map = lambda *ids: tuple(0 for _ in shape)  # noqa: E731
    ref = RefType(tuple(b for b in block if b is not None), dtype, space)

    def traced(grid_rank: int) -> TracedBlockSpec:
        fn = mp.trace(lambda *ids: index_map(*ids), *([I32] * grid_rank), name="index_map")
        return TracedBlockSpec(array, tuple(block), fn, ref)

    return traced


def kernel(
    body: Callable,
    grid: Sequence[int],
    ins: Sequence[Callable[[int], TracedBlockSpec]],
    outs: Sequence[Callable[[int], TracedBlockSpec]],
    scratch: Sequence[RefType] = (),
    dimension_semantics: Sequence[str] | None = None,
) -> Kernel:
    """The ``Kernel`` of ``body`` over refs ``[*ins, *outs, *scratch]``."""
    ins = [s(len(grid)) for s in ins]
    outs = [s(len(grid)) for s in outs]
    refs = [s.ref_type for s in (*ins, *outs)] + list(scratch)
    fn = mp.trace(body, *refs)
    semantics = None if dimension_semantics is None else tuple(dimension_semantics)
    return Kernel(fn.name, fn, tuple(grid), tuple(ins), tuple(outs), tuple(scratch), semantics)


def lower_case(case: Case, **options: object) -> Lowered:
    return case.minipallas().lower(*case.inputs(), target="tpu", **options)


def upstream_call(case: Case) -> Callable:
    """The suite case as a plain (compiled, not interpreted) upstream ``pallas_call``, with the
    case's ``dimension_semantics`` as Mosaic compiler parameters."""
    ns = jax_namespace()
    from jax.experimental.pallas import tpu as pltpu

    kwargs = {}
    if case.in_specs is not None:
        kwargs["in_specs"] = [ns.pl.BlockSpec() if s is None else ns.pl.BlockSpec(*s)
                              for s in case.in_specs]  # fmt: skip
    if case.out_specs is not None:
        kwargs["out_specs"] = case._out_specs(ns.pl.BlockSpec)
    if case.dimension_semantics is not None:
        kwargs["compiler_params"] = pltpu.CompilerParams(
            dimension_semantics=case.dimension_semantics
        )
    return ns.pl.pallas_call(
        functools.partial(case.kernel, ns),
        case._outs(lambda shape, dtype: ns.jax.ShapeDtypeStruct(shape, dtype)),
        grid=case.grid,
        scratch_shapes=[ns.VMEM(shape, dtype) for shape, dtype in case.scratch],
        name=case.name,
        **kwargs,
    )


def upstream_module(case: Case):
    """Upstream Pallas's canonicalized Mosaic module for ``case`` (``UpstreamError`` if it
    rejects the kernel)."""
    from minipallas.tools.difftest.mosaic import upstream_mosaic

    ns = jax_namespace()
    specs = [ns.jax.ShapeDtypeStruct(a.shape, a.dtype) for a in case.inputs()]
    return upstream_mosaic(upstream_call(case), *specs)


def tpu_shaped(case: Case, suffix: str = "_tpu", **changes: object) -> Case:
    """``case`` renamed with ``suffix`` and other block shapes, grid... (for suite kernels whose
    blocks Mosaic rejects)."""
    return dataclasses.replace(case, name=case.name + suffix, **changes)
