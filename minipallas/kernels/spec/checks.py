"""The arguments of ``pallas_call``, checked: each bad one is a ``TraceError`` at the user's line.

Upstream checks the same arguments (grid sizes, specs, scratch, names, dimension semantics)
with its own wording where it has one; these checks run before anything is traced, so a kernel
is never traced from a call that cannot run.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.collectives import COLLECTIVE_MODES
from minipallas.ir.errors import MiniPallasError, TraceError
from minipallas.ir.kernel_spec import BlockSpec
from minipallas.ir.location import user_location
from minipallas.ir.types import ArrayType, RefType, as_ref_type
from minipallas.lowering.compat import jax_private
from minipallas.passes.pipeline import parse_pipeline

DIMENSION_SEMANTICS = ("parallel", "arbitrary", "core_parallel", "subcore_parallel")


def has_jax_value(args: Sequence[Any]) -> bool:
    """Whether any argument is a JAX array or tracer; without jax imported, none can be."""
    jax = sys.modules.get("jax")
    return jax is not None and any(isinstance(a, jax.Array) for a in args)


def jax_tracing() -> bool:
    """Whether a JAX transformation (``jax.jit``, ``vmap``) is tracing: a call there stages out
    even with no JAX argument (a kernel without inputs), as upstream's does, rather than run on
    the CPU at trace time."""
    if "jax" not in sys.modules:  # nothing can be tracing; jax_private's core would load it
        return False
    return not jax_private.core.trace_ctx.is_top_level()


def error(message: str, fix: str | None = None) -> TraceError:
    return TraceError(message, loc=user_location(), fix=fix)


def grid_axes(grid: Any) -> tuple[tuple[int | None, ...], tuple[Any, ...]]:
    """The grid with ``None`` for each traced size (a dynamic grid, under ``jax.jit``), and
    those traced sizes in order."""
    single = isinstance(grid, int | np.integer) or is_tracer(grid)
    axes = () if grid is None else (grid,) if single else grid
    try:
        axes = tuple(axes)
    except TypeError:
        raise error(f"grid must be an int or a tuple of ints, got {grid!r}") from None
    static: list[int | None] = []
    bounds = []
    for n in axes:
        if is_tracer(n) and n.shape == () and np.issubdtype(n.dtype, np.integer):
            static.append(None)
            bounds.append(n)
        elif isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
            raise error(
                f"grid sizes must be non-negative ints, got {grid!r}",
                fix="give Python ints; a traced integer scalar is a grid size only inside "
                "jax.jit (a dynamic grid)",
            )
        else:
            static.append(int(n))
    return tuple(static), tuple(bounds)


def is_tracer(x: Any) -> bool:
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(x, jax.core.Tracer)


def from_grid_spec(
    spec: Any, grid: Any, in_specs: Any, out_specs: Any, scratch_shapes: Any
) -> tuple[Any, Any, Any, Any, int]:
    """``grid``, ``in_specs``, ``out_specs``, ``scratch_shapes`` and ``num_scalar_prefetch``
    read from a grid spec (``minipallas.tpu.PrefetchScalarGridSpec``, or anything with those
    fields); giving them beside it is an error, as upstream's. Without a grid spec (None),
    the four as given, and no prefetch."""
    if spec is None:
        return grid, in_specs, out_specs, scratch_shapes, 0
    if not hasattr(spec, "grid"):
        raise error(
            f"grid_spec must be a grid spec, got {spec!r}",
            fix="use minipallas.tpu.PrefetchScalarGridSpec(num_scalar_prefetch, grid, ...)",
        )
    if grid not in ((), None) or in_specs is not None or out_specs is not None or scratch_shapes:
        raise error(
            "pallas_call got grid_spec and also grid, in_specs, out_specs or scratch_shapes",
            fix="give those inside the grid spec only",
        )
    n = getattr(spec, "num_scalar_prefetch", 0)
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
        raise error(
            f"num_scalar_prefetch must be a non-negative int, got {n!r}",
            fix="give the number of leading operands to prefetch into SMEM",
        )

    def field(name: str) -> Any:
        value = getattr(spec, name, None)
        return None if type(value).__name__ == "NoBlockSpec" else value  # upstream's default

    return spec.grid, field("in_specs"), field("out_specs"), tuple(spec.scratch_shapes), int(n)


def array_type(x: Any, what: str) -> ArrayType:
    if isinstance(x, ArrayType):
        return x
    if isinstance(x, RefType):
        raise error(f"{what} must be an array type, got the ref type {x}")
    shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
    if shape is None or dtype is None:
        x = np.asarray(x)
        shape, dtype = x.shape, x.dtype
    try:
        return ArrayType(tuple(shape), dtypes.canonicalize(dtype))
    except MiniPallasError as e:
        raise error(f"{what}: {e.message}", fix=e.fix) from None


def block_specs(specs: Any) -> tuple[BlockSpec | None, ...]:
    items = tuple(specs) if isinstance(specs, tuple | list) else (specs,)
    for s in items:
        if s is not None and not isinstance(s, BlockSpec):
            raise error(
                f"specs must be minipallas.BlockSpec objects or None, got {s!r}",
                fix="use minipallas.BlockSpec(block_shape, index_map)",
            )
    return items


def out_block_specs(specs: Any, n_outputs: int) -> tuple[BlockSpec | None, ...]:
    items = block_specs(specs)
    if len(items) != n_outputs:
        raise error(
            f"out_specs has {len(items)} specs for {n_outputs} outputs",
            fix="give out_specs the structure of out_shape",
        )
    return items


def scratch_type(t: Any, k: int) -> RefType:
    ref = as_ref_type(t)
    if ref is None:
        raise error(
            f"scratch_shapes[{k}] must be a ref type, got {t!r}",
            fix="use a memory space: minipallas.tpu.VMEM((8, 128), minipallas.numpy.float32)",
        )
    return ref


def grid_names(names: Any, n_axes: int) -> tuple[str, ...] | None:
    if names is None:
        return None
    items = (names,) if isinstance(names, str) else tuple(names)
    if (
        len(items) != n_axes
        or len(set(items)) != n_axes
        or not all(isinstance(a, str) and a for a in items)
    ):
        raise error(
            f"grid_names must give one distinct name per grid axis ({n_axes}), got {names!r}",
            fix="grid_names=('x', 'y') for a 2-D grid",
        )
    return items


BACKENDS = (None, "xla")  # None: the platform table decides


def backend(value: Any) -> str | None:
    if value not in BACKENDS:
        raise error(f"backend={value!r} is not a backend",
                    fix="leave backend unset (the platform's kernel) or give backend='xla' "
                    "(the discharged program as XLA ops everywhere)")  # fmt: skip
    return value


def pipeline(passes: Any) -> str:
    """The call's ``passes``, parsed now, so a misspelt pass or option is an error at the
    call (located in the user's file), not at the first run."""
    if not isinstance(passes, str):
        raise error(f"passes={passes!r} is not a pipeline",
                    fix="give a string such as passes='fuse-grid-steps{max_unroll=8}'")  # fmt: skip
    try:
        parse_pipeline(passes)
    except MiniPallasError as e:
        raise error(e.message, fix=e.fix) from None
    return passes


def collectives_mode(mode: Any, names: Any) -> str:
    if mode not in COLLECTIVE_MODES:
        raise error(f"collectives={mode!r} is not a mode",
                     fix=f"use one of {', '.join(map(repr, COLLECTIVE_MODES))}")  # fmt: skip
    if mode == "simulate" and names is None:
        raise error("collectives='simulate' needs the grid axes named",
                     fix="pass grid_names=('x', ...), one name per grid axis")  # fmt: skip
    return mode


def semantics(semantics: Sequence[str] | None, n_axes: int) -> tuple[str, ...] | None:
    if semantics is None:
        return None
    items = tuple(str(getattr(s, "value", s)).lower() for s in semantics)  # strings or enums
    if len(items) != n_axes or any(s not in DIMENSION_SEMANTICS for s in items):
        raise error(
            f"dimension_semantics must give one of {DIMENSION_SEMANTICS} per grid axis "
            f"({n_axes}), got {semantics!r}"
        )
    return items
