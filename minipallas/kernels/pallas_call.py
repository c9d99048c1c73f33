"""``minipallas.pallas_call``: a kernel, a grid and block specs, as in ``jax.experimental.pallas``.

``pallas_call(kernel, out_shape, grid=..., in_specs=..., out_specs=...)`` returns a
``PallasCall``. Calling it on arrays runs the kernel on the CPU: the grid becomes loops over
whole arrays (``programs/choose.py``), discharged, lowered to StableHLO and compiled by XLA,
once per input types. ``trace`` gives the ``Kernel`` every backend reads, and ``lower`` emits
it for a target of the one target table (``minipallas.lowering.TARGETS``): ``"stablehlo"`` (the
CPU program), ``"tpu"`` (Mosaic), ``"gpu"`` (Triton) or ``"ptx"``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from minipallas import lowering
from minipallas.ir.core import Function
from minipallas.ir.errors import PassError
from minipallas.ir.kernel_spec import DEFAULT_MEMORY_SPACE, BlockSpec, CostEstimate, Kernel
from minipallas.ir.types import MemorySpace, RefType
from minipallas.kernels.collective.simulate import simulate
from minipallas.kernels.programs.choose import lower_for_target
from minipallas.kernels.spec import checks
from minipallas.kernels.spec import params as kernel_params
from minipallas.kernels.spec.aliases import normalize_aliases
from minipallas.kernels.spec.call import CallSpec
from minipallas.lowering import AfterEach

if TYPE_CHECKING:  # imported on first use: jaxlib's MLIR bindings are slow to import
    from minipallas.lowering.lowered import Lowered
    from minipallas.lowering.runtime.compiled import Compiled

__all__ = ["PallasCall", "lower_for_target", "pallas_call"]


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
    backend: str | None = None,
    passes: str = "",
    optimize: bool | str = True,
    cost_estimate: Any = None,
    metadata: Mapping[str, str] | None = None,
) -> PallasCall:
    """A kernel call: ``kernel(*in_refs, *out_refs, *scratch_refs)`` at every point of ``grid``.

    ``out_shape`` is one array type (anything with ``shape`` and ``dtype``) or a tuple/list of
    them; the call returns the same structure. A missing spec means the whole array in one
    block. ``scratch_shapes`` are ref types (``minipallas.tpu.VMEM((8, 128), f32)``) allocated
    once for the whole grid; a grid size may be a traced integer under ``jax.jit``.
    ``grid_spec=minipallas.tpu.PrefetchScalarGridSpec(num_scalar_prefetch=n, ...)`` gives those
    four fields instead, the first ``n`` operands then scalar-prefetch arrays (index maps take
    them after the grid indices, the kernel before its input refs).

    On the CPU, results equal upstream ``pallas_call(..., interpret=True)`` bit for bit:
    ``match_upstream=False`` trades that for speed (independent grid points batched, rounding as
    XLA does at the batched shape; an accumulating axis's sums reassociated). Under ``jax.jit`` it
    runs where ``platforms`` says, ``backend="xla"`` the discharged program everywhere.

    ``compiler_params`` (minipallas's or upstream's, TPU or GPU) go to the Mosaic/Triton
    emitters; ``debug=True`` prints the kernel when traced and the module when lowered.
    ``input_output_aliases={input_index: output_index}`` starts that output as that input
    (indices count scalar-prefetch operands, as upstream's). ``grid_names`` names the axes for
    ``axis_index``; ``collectives="simulate"`` runs every program together (``simulate``), and
    ``"reject"`` (the default) keeps upstream's errors for collective axes.
    ``passes="my-pass{opt=1},cleanup"`` is a pipeline run on the traced kernel before any
    platform sees it; ``optimize=False`` turns off the target's exact optimizations
    (``fuse-grid-steps`` on the TPU), ``"fast"`` adds ones that may reorder float sums.
    ``cost_estimate`` and ``metadata`` go to the ``tpu_custom_call`` as upstream's; ``vmap``
    scales the estimate by the batch size.
    """
    if not callable(kernel):
        raise checks.error(f"pallas_call needs a kernel function, got {type(kernel).__name__}")
    grid, in_specs, out_specs, scratch_shapes, prefetch = checks.from_grid_spec(
        grid_spec, grid, in_specs, out_specs, scratch_shapes
    )
    static_grid, bounds = checks.grid_axes(grid)
    return PallasCall(
        kernel,
        out_shape,
        static_grid,
        in_specs,
        out_specs,
        scratch_shapes,
        dimension_semantics,
        name,
        match_upstream,
        compiler_params,
        debug,
        input_output_aliases=input_output_aliases,
        num_scalar_prefetch=prefetch,
        grid_bounds=bounds,
        grid_names=checks.grid_names(grid_names, len(static_grid)),
        collectives=checks.collectives_mode(collectives, grid_names),
        backend=checks.backend(backend),
        passes=checks.pipeline(passes),
        optimize=checks_optimize(optimize),
        cost_estimate=kernel_params.cost_estimate(cost_estimate),
        metadata=kernel_params.metadata(metadata),
    )


def checks_optimize(value: Any) -> bool | str:
    """``optimize``, checked now: True, False or "fast" (``lowering.OPTIMIZE_LEVELS``)."""
    try:
        return lowering.optimize_level(value)
    except PassError as e:
        raise checks.error(f"pallas_call: {e.message}", fix=e.fix) from None


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
        backend: str | None = None,
        passes: str = "",
        optimize: bool | str = True,
        cost_estimate: CostEstimate | None = None,
        metadata: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self.collectives = collectives
        self.backend = backend
        self.grid_bounds = grid_bounds  # the traced sizes of the grid's None axes, in order
        self.match_upstream = bool(match_upstream)
        self.out_structure = type(out_shape) if isinstance(out_shape, tuple | list) else None
        outs = list(out_shape) if self.out_structure else [out_shape]
        self.compiler_params = kernel_params.compiler_params(compiler_params)
        self.debug = bool(debug)
        self.spec = CallSpec(
            body=kernel,
            name=name,
            grid=grid,
            out_types=tuple(checks.array_type(o, f"out_shape {k}") for k, o in enumerate(outs)),
            in_specs=None if in_specs is None else checks.block_specs(in_specs),
            out_specs=(None,) * len(outs)
            if out_specs is None
            else checks.out_block_specs(out_specs, len(outs)),
            scratch_types=tuple(checks.scratch_type(s, k) for k, s in enumerate(scratch_shapes)),
            dimension_semantics=checks.semantics(
                kernel_params.semantics_from(self.compiler_params, dimension_semantics), len(grid)
            ),
            num_scalar_prefetch=num_scalar_prefetch,
            grid_names=grid_names,
            input_output_aliases=normalize_aliases(input_output_aliases),
            debug=self.debug,
            passes=passes,
            optimize=optimize,
            cost_estimate=cost_estimate,
            metadata=metadata,
            fuse_transposed_lhs=bool(
                getattr(self.compiler_params, "fuse_transposed_lhs_in_matmul", False)
            ),
            vmem_limit_bytes=getattr(self.compiler_params, "vmem_limit_bytes", None),
        )
        self._programs: dict[tuple, Function] = {}
        self._compiled: dict[tuple, Compiled] = {}  # ((shape, numpy dtype) per input) -> Compiled

    def __getattr__(self, name: str) -> Any:
        """The spec's fields read through the call (``call.grid``, ``call.dimension_semantics``;
        ``call.kernel`` is the body), as they were before the spec held them."""
        if name in ("spec", "__setstate__"):  # not set yet (copying): no spec to read
            raise AttributeError(name)
        return getattr(self.spec, "body" if name == "kernel" else name)

    @property
    def collective_axes(self) -> tuple[str, ...] | None:
        """The grid names when every program runs together (``collectives="simulate"``)."""
        return self.spec.grid_names if self.collectives == "simulate" else None

    # ----- tracing -----

    def trace(self, *args: Any, memory_space: MemorySpace = DEFAULT_MEMORY_SPACE) -> Kernel:
        """The ``Kernel`` for inputs like ``args`` (arrays or ``ArrayType``s); blocks whose spec
        names no memory space live in ``memory_space``."""
        return self.spec.trace(self.spec.input_types(args), memory_space)

    def program(self, *args: Any) -> Function:
        """The CPU program: ``(inputs...) -> outputs``, independent grid points batched and the
        rest as loops: what the "stablehlo" target's prepare step makes of the kernel
        (``programs.choose.cpu_program``)."""
        types = self.spec.input_types(args)
        if types not in self._programs:
            self._programs[types] = lowering.target("stablehlo").prepared(
                self.trace(*types),
                match_upstream=self.match_upstream,
                collective_axes=self.collective_axes,
            )
        return self._programs[types]

    # ----- running and lowering -----

    def __call__(self, *arrays: Any) -> Any:
        """Runs the kernel over its grid on the CPU (XLA); returns numpy arrays. Given a JAX
        array or tracer (under ``jax.jit``, ``vmap``, ``grad``), or with a traced grid size,
        it runs as JAX ops instead, fused with the code around it, and returns JAX values
        (``platforms/jax_values.py``); so it does under a JAX trace with no inputs at all."""
        if self.collectives == "simulate":
            return self.simulate(*arrays)
        if self.grid_bounds or checks.has_jax_value(arrays) or checks.jax_tracing():
            from minipallas.platforms.jax_values import call_jax

            return call_jax(self, arrays)
        values = [np.asarray(a) for a in arrays]
        compiled = self.compiled(*values)
        outs = compiled(*values)
        if self.out_structure is None:
            return outs[0]
        return self.out_structure(outs)

    def compiled(self, *arrays: np.ndarray) -> Compiled:
        """The XLA:CPU executable that runs the kernel on numpy arrays of these shapes and
        dtypes: compiled on the first call with them, then looked up by them."""
        key = tuple((a.shape, a.dtype) for a in arrays)  # cheaper to build than ArrayTypes
        compiled = self._compiled.get(key)
        if compiled is None:
            from minipallas.lowering.runtime.compiled import compile

            for k, a in enumerate(arrays):
                checks.array_type(a, f"input {k}")
            compiled = compile(self.program(*self.spec.input_types(arrays)))
            self._compiled[key] = compiled
        return compiled

    def simulate(self, *arrays: Any, schedule: str | int = "lockstep") -> Any:
        """Every program of the grid together (``kernels/collective/simulate.py``), numpy
        arrays in and out: what calling a ``collectives="simulate"`` call does; ``schedule`` is
        "lockstep" or a seed for random interleavings."""
        if self.grid_names is None:
            raise checks.error("simulate needs the grid axes named",
                               fix="pallas_call(..., grid_names=('x', ...))")  # fmt: skip
        if checks.has_jax_value(arrays):
            raise checks.error(
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
        verify: bool | None = None,
        **options: Any,
    ) -> Lowered:
        """The kernel emitted for ``target`` (a row of ``minipallas.lowering.TARGETS``:
        "stablehlo" is the CPU program, "tpu", "gpu", "ptx" the kernel); ``options`` go to the
        emitter (e.g. ``promote_scratch=True`` for "tpu"; ``optimize``, the call's unless
        given, to the target), ``after_each`` and ``verify`` to the
        pipeline (``minipallas.lower``). Blocks whose spec names no memory space are in the
        target's (VMEM for "tpu", as Pallas TPU)."""
        kernel = self.trace(*args, memory_space=lowering.target(target).memory_space)
        options.setdefault("optimize", self.spec.optimize)
        return lower_for_target(
            kernel,
            target,
            match_upstream=self.match_upstream,
            collective_axes=self.collective_axes,
            compiler_params=self.compiler_params,
            debug=self.debug,
            after_each=after_each,
            verify=verify,
            **options,
        )

    def __repr__(self) -> str:
        name = self.spec.name or getattr(self.spec.body, "__name__", "?")
        return f"<pallas_call {name} grid={self.spec.grid}>"
