"""``minipallas.pallas_call``: a kernel, a grid and block specs, as in ``jax.experimental.pallas``.

``pallas_call(kernel, out_shape, grid=..., in_specs=..., out_specs=...)`` returns a
``PallasCall``. Calling it on arrays runs the kernel on the CPU: the grid becomes loops over
whole arrays (``grid.grid_program``), discharged, lowered to StableHLO and compiled by XLA,
once per input types. ``trace`` gives the ``Kernel`` every backend reads, and ``lower`` emits
it for a target of the one target table (``minipallas.lowering.TARGETS``): ``"stablehlo"`` (the
CPU program), ``"tpu"`` (Mosaic), ``"gpu"`` (Triton) or ``"ptx"``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from minipallas import lowering
from minipallas.ir import dtypes
from minipallas.ir.collectives import COLLECTIVE_MODES
from minipallas.ir.core import Function
from minipallas.ir.errors import MiniPallasError, TraceError
from minipallas.ir.kernel_spec import DEFAULT_MEMORY_SPACE, BlockSpec, Kernel
from minipallas.ir.location import user_location
from minipallas.ir.types import TPU_SMEM, ArrayType, MemorySpace, RefType, as_ref_type
from minipallas.kernels import params as kernel_params
from minipallas.kernels.accumulation import accumulated_program
from minipallas.kernels.aliases import normalize_aliases, with_aliases
from minipallas.kernels.collective_program import collective_program
from minipallas.kernels.grid import grid_program
from minipallas.kernels.simulate import simulate
from minipallas.kernels.tracing import trace_kernel
from minipallas.kernels.vectorized_grid import vectorized_grid_program
from minipallas.lowering import AfterEach

if TYPE_CHECKING:  # imported on first use: jaxlib's MLIR bindings are slow to import
    from minipallas.lowering.lowered import Lowered

DIMENSION_SEMANTICS = ("parallel", "arbitrary", "core_parallel", "subcore_parallel")


def pallas_call(
    kernel: Callable[..., Any],
    out_shape: Any,
    *,
    grid: int | Sequence[int] = (),
    in_specs: Sequence[BlockSpec | None] | BlockSpec | None = None,
    out_specs: Sequence[BlockSpec | None] | BlockSpec | None = None,
    scratch_shapes: Sequence[RefType] = (),
    grid_spec: Any = None,
    dimension_semantics: Sequence[str] | None = None,
    name: str | None = None,
    match_upstream: bool = True,
    compiler_params: Any = None,
    debug: bool = False,
    input_output_aliases: Mapping[int, int] | None = None,
    grid_names: Sequence[str] | None = None,
    collectives: str = "reject",
) -> PallasCall:
    """A kernel call: ``kernel(*in_refs, *out_refs, *scratch_refs)`` at every point of ``grid``.

    ``out_shape`` is one array type (anything with ``shape`` and ``dtype``: an ``ArrayType``,
    a ``jax.ShapeDtypeStruct``, an array) or a tuple/list of them; the call returns the same
    structure. A missing spec means the whole array in one block. ``scratch_shapes`` are ref
    types (``minipallas.tpu.VMEM((8, 128), f32)``) allocated once for the whole grid.

    On the CPU, results equal upstream ``pallas_call(..., interpret=True)`` bit for bit.
    ``match_upstream=False`` trades that for speed: float reductions and dots of independent
    grid points run batched, rounding as XLA does at the batched shape (``jax.jit``-like), and
    a sequential axis that only accumulates is summed at once, its sums reassociated.

    ``compiler_params`` (``minipallas.tpu.CompilerParams`` or ``minipallas.gpu.CompilerParams``,
    or upstream's) go to the Mosaic/Triton emitters (``params``); ``debug=True`` prints the
    kernel when traced and the module when lowered, as upstream prints its jaxpr and module.
    ``input_output_aliases={input_index: output_index}``: that output starts as the input's
    contents, as upstream's (``kernels/aliases.py``; input indices count every operand, the
    scalar-prefetch ones included, as upstream's).

    ``grid_spec=minipallas.tpu.PrefetchScalarGridSpec(num_scalar_prefetch=n, grid=...,
    in_specs=..., out_specs=..., scratch_shapes=...)`` gives those four fields instead, and
    makes the call's first ``n`` operands scalar-prefetch arrays: index maps take them as refs
    after the grid indices, the kernel before its input refs. A grid size may be a traced
    integer under ``jax.jit`` (a dynamic grid); outside it, grid sizes are ints.

    ``grid_names=("x", ...)`` names the grid axes (``axis_index("x")`` is ``program_id`` of
    that axis). ``collectives="simulate"`` runs every program of the grid together in the
    multi-program interpreter (``kernels/simulate.py``): collective ``run_scoped`` scratch is
    shared by each group, ``barrier`` works, races and deadlocks are reported; the default
    ``"reject"`` keeps upstream's errors for collective axes.
    """
    if not callable(kernel):
        raise _error(f"pallas_call needs a kernel function, got {type(kernel).__name__}")
    prefetch = 0
    if grid_spec is not None:
        grid, in_specs, out_specs, scratch_shapes, prefetch = _from_grid_spec(
            grid_spec, grid, in_specs, out_specs, scratch_shapes
        )
    static_grid, bounds = _grid(grid)
    return PallasCall(
        kernel, out_shape, static_grid, in_specs, out_specs, scratch_shapes,
        dimension_semantics, name, match_upstream, compiler_params, debug,
        input_output_aliases=input_output_aliases, num_scalar_prefetch=prefetch,
        grid_bounds=bounds, grid_names=_grid_names(grid_names, len(static_grid)),
        collectives=_collectives(collectives, grid_names),
    )  # fmt: skip


class PallasCall:
    """A configured kernel call; see ``pallas_call``. Traces and compiles once per input types."""

    def __init__(
        self,
        kernel: Callable[..., Any],
        out_shape: Any,
        grid: tuple[int | None, ...],
        in_specs: Any,
        out_specs: Any,
        scratch_shapes: Sequence[RefType],
        dimension_semantics: Sequence[str] | None,
        name: str | None,
        match_upstream: bool = True,
        compiler_params: Any = None,
        debug: bool = False,
        input_output_aliases: Mapping[int, int] | None = None,
        num_scalar_prefetch: int = 0,
        grid_bounds: tuple[Any, ...] = (),
        grid_names: tuple[str, ...] | None = None,
        collectives: str = "reject",
    ) -> None:
        self.kernel = kernel
        self.grid_names = grid_names
        self.collectives = collectives
        self.num_scalar_prefetch = num_scalar_prefetch
        self.grid_bounds = grid_bounds  # the traced sizes of the grid's None axes, in order
        self.input_output_aliases = normalize_aliases(input_output_aliases)
        self.match_upstream = bool(match_upstream)
        self.grid = grid
        self.out_structure = type(out_shape) if isinstance(out_shape, tuple | list) else None
        outs = list(out_shape) if self.out_structure else [out_shape]
        self.out_types = tuple(_array_type(o, f"out_shape {k}") for k, o in enumerate(outs))
        self.in_specs = None if in_specs is None else _specs(in_specs)
        self.out_specs = (
            (None,) * len(outs) if out_specs is None else _out_specs(out_specs, len(outs))
        )
        self.scratch_types = tuple(_scratch(s, k) for k, s in enumerate(scratch_shapes))
        self.compiler_params = kernel_params.compiler_params(compiler_params)
        self.debug = bool(debug)
        self.dimension_semantics = _semantics(
            kernel_params.semantics_from(self.compiler_params, dimension_semantics), len(grid)
        )
        self.name = name
        self._kernels: dict[tuple, Kernel] = {}
        self._programs: dict[tuple, Function] = {}
        self._compiled: dict[tuple, Any] = {}  # ((shape, numpy dtype) per input) -> Compiled

    # ----- tracing -----

    def trace(self, *args: Any, memory_space: MemorySpace = DEFAULT_MEMORY_SPACE) -> Kernel:
        """The ``Kernel`` for inputs like ``args`` (arrays or ``ArrayType``s); blocks whose spec
        names no memory space live in ``memory_space``."""

        types = self._input_types(args)
        key = (types, memory_space)
        if key not in self._kernels:
            prefetch, types = types[: self.num_scalar_prefetch], types[self.num_scalar_prefetch :]
            n = len(types)
            self._kernels[key] = trace_kernel(
                self.kernel,
                name=self.name,
                grid=self.grid,
                inputs=types,
                outputs=self.out_types,
                in_specs=(None,) * n if self.in_specs is None else self.in_specs,
                out_specs=self.out_specs,
                scratch_types=self.scratch_types,
                dimension_semantics=self.dimension_semantics,
                memory_space=memory_space,
                scalar_prefetch=tuple(RefType(t.shape, t.dtype, TPU_SMEM) for t in prefetch),
                grid_names=self.grid_names,
            )
            self._kernels[key] = with_aliases(self._kernels[key], self._kernel_aliases())
            if self.debug:
                kernel_params.debug_kernel(self._kernels[key])
        return self._kernels[key]

    def program(self, *args: Any) -> Function:
        """The CPU program: ``(inputs...) -> outputs``, independent grid points batched and the
        rest as loops (``cpu_program``)."""
        types = self._input_types(args)
        if types not in self._programs:
            if self.collectives == "simulate":  # the groups' epochs in turn, as one program
                made = collective_program(self.trace(*types), self.grid_names)
            else:
                made = cpu_program(self.trace(*types), self.match_upstream)
            self._programs[types] = made
        return self._programs[types]

    # ----- running and lowering -----

    def __call__(self, *arrays: Any) -> Any:
        """Runs the kernel over its grid on the CPU (XLA); returns numpy arrays. Given a JAX
        array or tracer (under ``jax.jit``, ``vmap``, ``grad``), or with a traced grid size,
        it runs as JAX ops instead, fused with the code around it, and returns JAX values
        (``jax_call``)."""
        if self.collectives == "simulate":
            return self.simulate(*arrays)
        if self.grid_bounds or _has_jax_value(arrays):
            from minipallas.kernels.jax_call import call_jax

            return call_jax(self, arrays)
        from minipallas.compiled import compile

        values = [np.asarray(a) for a in arrays]
        key = tuple((v.shape, v.dtype) for v in values)  # cheaper to build than ArrayTypes
        compiled = self._compiled.get(key)
        if compiled is None:
            for k, v in enumerate(values):
                _array_type(v, f"input {k}")
            compiled = compile(self.program(*self._input_types(values)))
            self._compiled[key] = compiled
        outs = compiled(*values)
        if self.out_structure is None:
            return outs[0]
        return self.out_structure(outs)

    def simulate(self, *arrays: Any, schedule: str | int = "lockstep") -> Any:
        """Every program of the grid together (``kernels/simulate.py``), numpy arrays in and
        out: what calling a ``collectives="simulate"`` call does; ``schedule`` is "lockstep" or
        a seed for random interleavings."""
        if self.grid_names is None:
            raise _error("simulate needs the grid axes named",
                         fix="pallas_call(..., grid_names=('x', ...))")  # fmt: skip
        if _has_jax_value(arrays):
            raise _error(
                "collectives='simulate' runs in minipallas's interpreter, on numpy arrays",
                fix="pass numpy arrays (np.asarray(x)), outside jax.jit",
            )
        values = [np.asarray(a) for a in arrays]
        outs = simulate(self.trace(*values), values, self.grid_names, schedule)
        return outs[0] if self.out_structure is None else self.out_structure(outs)

    def lower(
        self,
        *args: Any,
        target: str = "stablehlo",
        after_each: AfterEach | None = None,
        **options: Any,
    ) -> Lowered:
        """The kernel emitted for ``target`` (a row of ``minipallas.lowering.TARGETS``:
        "stablehlo" is the CPU program, "tpu", "gpu", "ptx" the kernel); ``options`` go to the
        emitter (e.g. ``promote_scratch=True`` for "tpu"), ``after_each`` to the pipeline. Blocks
        whose spec names no memory space are in the target's (VMEM for "tpu", as Pallas TPU)."""
        row = lowering.target(target)
        options = {**kernel_params.emitter_options(self.compiler_params, row.name), **options}
        if row.kernel:
            subject = self.trace(*args, memory_space=row.memory_space)
        else:
            subject = self.program(*args)
        lowered = row.lower(subject, after_each=after_each, **options)
        info = getattr(lowered, "info", None)  # the ptx target's CompiledKernel has none
        if self.compiler_params is not None and row.kernel and info is not None:
            info["compiler_params"] = self.compiler_params
        if self.debug:
            kernel_params.debug_module(subject.name, row.name, lowered.as_text())
        return lowered

    def _input_types(self, args: Sequence[Any]) -> tuple[ArrayType, ...]:
        """The operands' types: the scalar-prefetch arrays, then the inputs."""
        types = tuple(_array_type(a, f"input {k}") for k, a in enumerate(args))
        n = self.num_scalar_prefetch
        if len(types) < n:
            raise _error(
                f"the kernel call has num_scalar_prefetch={n}, but got {len(types)} operands",
                fix="pass the scalar-prefetch arrays first, then the inputs",
            )
        if self.in_specs is not None and len(types) - n != len(self.in_specs):
            raise _error(
                f"the kernel call has {len(self.in_specs)} in_specs, but got {len(types) - n} "
                f"inputs" + (f" after {n} scalar-prefetch operands" if n else ""),
                fix="give one input per in_spec",
            )
        return types

    def _kernel_aliases(self) -> tuple[tuple[int, int], ...]:
        """The aliases with input indices counted among the kernel's inputs (upstream counts
        the scalar-prefetch operands too); aliasing a scalar-prefetch operand is refused."""
        n = self.num_scalar_prefetch
        for i, o in self.input_output_aliases:
            if 0 <= i < n:
                raise _error(
                    f"input_output_aliases maps operand {i}, a scalar-prefetch operand, to "
                    f"output {o}; minipallas aliases inputs only",
                    fix=f"alias an input (operand index >= num_scalar_prefetch={n})",
                )
        return tuple((i - n, o) for i, o in self.input_output_aliases)

    def __repr__(self) -> str:
        return (
            f"<pallas_call {self.name or getattr(self.kernel, '__name__', '?')} grid={self.grid}>"
        )


def lower_kernel(
    kernel: Kernel,
    target: str = "stablehlo",
    *,
    after_each: AfterEach | None = None,
    **options: Any,
) -> Lowered:
    """A traced (or imported) ``Kernel`` emitted for ``target``; a target that lowers a
    ``Function`` ("stablehlo") gets the CPU program (``cpu_program``)."""
    row = lowering.target(target)
    subject = kernel if row.kernel else cpu_program(kernel)
    return row.lower(subject, after_each=after_each, **options)


def cpu_program(kernel: Kernel, match_upstream: bool = True) -> Function:
    """What the CPU runs: the grid with its independent points batched
    (``vectorized_grid``), or, when none can be, as loops over blocks (``grid``). With
    ``match_upstream=False`` a sequential axis that only accumulates is first summed at once
    (``accumulation``: a blocked matmul becomes one dot). ``Element``
    block dims run as loops: the batched grid takes a grid index for a block index; so do
    scalar prefetch (data-dependent block indices) and dynamic grids (sizes known at run
    time)."""
    if (
        any(s.element_dims for s in (*kernel.in_specs, *kernel.out_specs))
        or kernel.scalar_prefetch
        or kernel.dynamic_axes
    ):
        return grid_program(kernel)
    summed = None if match_upstream else accumulated_program(kernel)
    return summed or vectorized_grid_program(kernel, exact=match_upstream) or grid_program(kernel)


# ----- argument checks -----


def _has_jax_value(args: Sequence[Any]) -> bool:
    """Whether any argument is a JAX array or tracer; without jax imported, none can be."""
    jax = sys.modules.get("jax")
    return jax is not None and any(isinstance(a, jax.Array) for a in args)


def _error(message: str, fix: str | None = None) -> TraceError:
    return TraceError(message, loc=user_location(), fix=fix)


def _grid(grid: Any) -> tuple[tuple[int | None, ...], tuple[Any, ...]]:
    """The grid with ``None`` for each traced size (a dynamic grid, under ``jax.jit``), and
    those traced sizes in order."""
    single = isinstance(grid, int | np.integer) or _is_tracer(grid)
    axes = () if grid is None else (grid,) if single else grid
    try:
        axes = tuple(axes)
    except TypeError:
        raise _error(f"grid must be an int or a tuple of ints, got {grid!r}") from None
    static: list[int | None] = []
    bounds = []
    for n in axes:
        if _is_tracer(n) and n.shape == () and np.issubdtype(n.dtype, np.integer):
            static.append(None)
            bounds.append(n)
        elif isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
            raise _error(
                f"grid sizes must be non-negative ints, got {grid!r}",
                fix="give Python ints; a traced integer scalar is a grid size only inside "
                "jax.jit (a dynamic grid)",
            )
        else:
            static.append(int(n))
    return tuple(static), tuple(bounds)


def _is_tracer(x: Any) -> bool:
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(x, jax.core.Tracer)


def _from_grid_spec(
    spec: Any, grid: Any, in_specs: Any, out_specs: Any, scratch_shapes: Any
) -> tuple[Any, Any, Any, Any, int]:
    """``grid``, ``in_specs``, ``out_specs``, ``scratch_shapes`` and ``num_scalar_prefetch``
    read from a grid spec (``minipallas.tpu.PrefetchScalarGridSpec``, or anything with those
    fields); giving them beside it is an error, as upstream's."""
    if not hasattr(spec, "grid"):
        raise _error(
            f"grid_spec must be a grid spec, got {spec!r}",
            fix="use minipallas.tpu.PrefetchScalarGridSpec(num_scalar_prefetch, grid, ...)",
        )
    if grid not in ((), None) or in_specs is not None or out_specs is not None or scratch_shapes:
        raise _error(
            "pallas_call got grid_spec and also grid, in_specs, out_specs or scratch_shapes",
            fix="give those inside the grid spec only",
        )
    n = getattr(spec, "num_scalar_prefetch", 0)
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
        raise _error(
            f"num_scalar_prefetch must be a non-negative int, got {n!r}",
            fix="give the number of leading operands to prefetch into SMEM",
        )

    def field(name: str) -> Any:
        value = getattr(spec, name, None)
        return None if type(value).__name__ == "NoBlockSpec" else value  # upstream's default

    return spec.grid, field("in_specs"), field("out_specs"), tuple(spec.scratch_shapes), int(n)


def _array_type(x: Any, what: str) -> ArrayType:
    if isinstance(x, ArrayType):
        return x
    if isinstance(x, RefType):
        raise _error(f"{what} must be an array type, got the ref type {x}")
    shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
    if shape is None or dtype is None:
        x = np.asarray(x)
        shape, dtype = x.shape, x.dtype
    try:
        return ArrayType(tuple(shape), dtypes.canonicalize(dtype))
    except MiniPallasError as e:
        raise _error(f"{what}: {e.message}", fix=e.fix) from None


def _specs(specs: Any) -> tuple[BlockSpec | None, ...]:
    items = tuple(specs) if isinstance(specs, tuple | list) else (specs,)
    for s in items:
        if s is not None and not isinstance(s, BlockSpec):
            raise _error(
                f"specs must be minipallas.BlockSpec objects or None, got {s!r}",
                fix="use minipallas.BlockSpec(block_shape, index_map)",
            )
    return items


def _out_specs(specs: Any, n_outputs: int) -> tuple[BlockSpec | None, ...]:
    items = _specs(specs)
    if len(items) != n_outputs:
        raise _error(
            f"out_specs has {len(items)} specs for {n_outputs} outputs",
            fix="give out_specs the structure of out_shape",
        )
    return items


def _scratch(t: Any, k: int) -> RefType:
    ref = as_ref_type(t)
    if ref is None:
        raise _error(
            f"scratch_shapes[{k}] must be a ref type, got {t!r}",
            fix="use a memory space: minipallas.tpu.VMEM((8, 128), minipallas.numpy.float32)",
        )
    return ref


def _grid_names(names: Any, n_axes: int) -> tuple[str, ...] | None:
    if names is None:
        return None
    items = (names,) if isinstance(names, str) else tuple(names)
    if (
        len(items) != n_axes
        or len(set(items)) != n_axes
        or not all(isinstance(a, str) and a for a in items)
    ):
        raise _error(
            f"grid_names must give one distinct name per grid axis ({n_axes}), got {names!r}",
            fix="grid_names=('x', 'y') for a 2-D grid",
        )
    return items


def _collectives(mode: Any, names: Any) -> str:
    if mode not in COLLECTIVE_MODES:
        raise _error(f"collectives={mode!r} is not a mode",
                     fix=f"use one of {', '.join(map(repr, COLLECTIVE_MODES))}")  # fmt: skip
    if mode == "simulate" and names is None:
        raise _error("collectives='simulate' needs the grid axes named",
                     fix="pass grid_names=('x', ...), one name per grid axis")  # fmt: skip
    return mode


def _semantics(semantics: Sequence[str] | None, n_axes: int) -> tuple[str, ...] | None:
    if semantics is None:
        return None
    items = tuple(str(getattr(s, "value", s)).lower() for s in semantics)  # strings or enums
    if len(items) != n_axes or any(s not in DIMENSION_SEMANTICS for s in items):
        raise _error(
            f"dimension_semantics must give one of {DIMENSION_SEMANTICS} per grid axis "
            f"({n_axes}), got {semantics!r}"
        )
    return items
