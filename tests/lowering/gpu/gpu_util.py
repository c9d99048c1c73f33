"""Shared helpers for the GPU emitter's tests: suite kernels on both sides."""

from __future__ import annotations

import functools

import numpy as np

from minipallas.tools.corpora.suite import (  # noqa: F401
    BY_NAME,
    KERNELS,
    MP,
    Case,
    _spec,
    jax_namespace,
    upstream_running_rows,
)

__all__ = ["BY_NAME", "KERNELS", "MP", "Case", "lowered", "upstream_text"]


@functools.cache
def lowered(name: str):
    """The suite kernel ``name`` lowered for "gpu" (cached: tests share it)."""
    case = BY_NAME[name]
    return case.minipallas().lower(*case.inputs(), target="gpu")


def upstream_call(case: Case):
    """The case as upstream ``pallas_call`` for the Triton backend (not interpret mode)."""
    ns = jax_namespace()
    from jax.experimental.pallas import triton as plgpu

    kwargs = {}
    if case.in_specs is not None:
        kwargs["in_specs"] = [_spec(ns.pl.BlockSpec, s) for s in case.in_specs]
    if case.out_specs is not None:
        kwargs["out_specs"] = case._out_specs(ns.pl.BlockSpec)
    return ns.pl.pallas_call(
        functools.partial(case.kernel, ns),
        case._outs(lambda shape, dtype: ns.jax.ShapeDtypeStruct(shape, dtype)),
        grid=case.grid,
        scratch_shapes=[ns.VMEM(shape, dtype) for shape, dtype in case.scratch],
        compiler_params=plgpu.CompilerParams(),
        name=case.name,
        **kwargs,
    )


@functools.cache
def upstream_text(name: str) -> str:
    """Upstream Pallas's Triton module for the suite kernel ``name`` (raises if it rejects it)."""
    from minipallas.tools.difftest.triton import upstream_triton

    case = BY_NAME[name]
    ns = jax_namespace()
    specs = [ns.jax.ShapeDtypeStruct(a.shape, a.dtype) for a in case.inputs()]
    return upstream_triton(upstream_call(case), *specs)


def as_float(x) -> np.ndarray:
    return np.asarray(x).astype(np.float64)
