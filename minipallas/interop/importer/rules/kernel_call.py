"""Import rule for upstream ``pallas_call``: the kernel, its grid and block specs as a ``Kernel``.

An upstream ``pallas_call`` equation carries everything minipallas's kernel model holds:

- ``grid_mapping.grid`` is the grid (a ``DynamicGridDim`` is a dynamic size, ``None``); each
  ``block_mappings[k]`` gives an operand's array, its block shape (``Blocked(n)`` sizes,
  ``Squeezed()`` dimensions) and its index map as a jaxpr from one ``i32[]`` per grid axis
  (then the scalar-prefetch refs) to block indices, imported as a Function;
- ``grid_mapping.num_index_operands`` are the scalar-prefetch operands
  (``PrefetchScalarGridSpec``): the call's first operands after the dynamic grid sizes, SMEM
  refs of the body and of every index map;
- ``jaxpr`` is the body over refs ``[*scalar_prefetch, *inputs, *outputs, *scratch]``,
  imported with each operand's block ref in its spec's memory space (a default one becomes
  ``memory_space``);
- ``compiler_params.dimension_semantics`` (Pallas TPU) carries over, and so do
  ``input_output_aliases`` (an aliased output starts as its input: ``kernels/spec/aliases.py``;
  upstream counts the scalar-prefetch operands among the inputs, the ``Kernel`` does not);
- each block mapping's ``pipeline_mode`` (``pl.Buffered``) becomes its spec's, and the
  equation's ``cost_estimate`` and ``metadata`` the kernel's (``kernels/spec/params.py``
  converts them): the TPU lowering emits or refuses the mode as upstream's does, and the
  ``tpu_custom_call`` carries the other two; the CPU program ignores all three, as upstream's
  interpret mode does.

``kernel_from_eqn`` builds that ``Kernel`` (then runs ``passes`` on it: the importer's
``kernel_passes``, as ``pallas_call(..., passes=...)``); the rule then emits a ``call`` of the
kernel's CPU program (``minipallas.kernels.programs.grid``), so ``from_jaxpr`` of a program
using Pallas computes what upstream's interpret mode computes. ``kernel_from_jaxpr`` finds the
one ``pallas_call`` of a jaxpr, so a kernel written with ``jax.experimental.pallas`` can be
lowered by minipallas:

    kernel = kernel_from_jaxpr(jax.make_jaxpr(call)(*args), memory_space=minipallas.tpu.VMEM)
    minipallas.kernels.pallas_call.lower_for_target(kernel, "tpu")

The rule's ``call`` passes the equation's operands as they are: the dynamic grid sizes, the
scalar-prefetch arrays, then the inputs, as the CPU program takes them. ``Element`` block
dimensions carry their padding. A vmapped call (upstream's batching rule: batch axes
``vmapped_dims`` in the grid, their squeezed block dimensions already in the block mappings)
imports with its body's grid queries moved past the batch axes, as minipallas's own batching
does (``kernels/batching.py``). Meshes and bounded/indirect block dimensions are
refused with a ``JaxprImportError`` naming what is unsupported.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence

from minipallas.interop.importer.avals import JaxprImportError, dtype_of, type_of
from minipallas.interop.importer.engine import (
    RULES,
    Importer,
    ImportScope,
    closed_parts,
    location,
    rule,
)
from minipallas.interop.importer.params import KERNEL_HINTS, READ, check
from minipallas.ir.core import Function, Value
from minipallas.ir.kernel_spec import Kernel, TracedBlockSpec
from minipallas.ir.location import user_location
from minipallas.ir.types import ANY, ArrayType, MemorySpace, RefType
from minipallas.kernels.batching import regrid_queries
from minipallas.kernels.programs.grid import grid_program
from minipallas.kernels.spec import params as kernel_params
from minipallas.kernels.spec.checks import DIMENSION_SEMANTICS
from minipallas.kernels.spec.tracing import check_grid_axes
from minipallas.lowering.compat.jax_private import core as jax_core
from minipallas.lowering.compat.jax_private import pallas_core
from minipallas.passes.pipeline import run


@rule(
    "pallas_call",
    params={
        **KERNEL_HINTS,
        "jaxpr": READ,
        "grid_mapping": READ,
        "mesh": READ,
        "compiler_params": READ,
        "input_output_aliases": READ,
        "out_avals": READ,  # as the equation's outvars
        "name": READ,
        "cost_estimate": READ,
        "metadata": READ,
    },
)
def pallas_call(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    kernel = kernel_from_eqn(eqn, importer=scope.importer, passes=scope.importer.kernel_passes)
    name = scope.importer.unique_name(f"{kernel.name}_grid")
    program = grid_program(kernel, name=name, loc=scope.loc)
    args = [scope.read(a) for a in eqn.invars]
    return list(scope.emit_op("call", args, callee=program).results)


def kernel_from_jaxpr(
    jaxpr: jax_core.ClosedJaxpr | jax_core.Jaxpr, *, memory_space: MemorySpace = ANY
) -> Kernel:
    """The ``Kernel`` of the one ``pallas_call`` in ``jaxpr`` (looking into ``jit`` calls)."""
    found = list(_pallas_calls(closed_parts(jaxpr)[0]))
    if len(found) != 1:
        raise JaxprImportError(
            f"expected one pallas_call in the jaxpr, found {len(found)}",
            fix="pass the jaxpr of a function that makes exactly one pallas_call",
        )
    return kernel_from_eqn(found[0], memory_space=memory_space)


def _pallas_calls(jaxpr: jax_core.Jaxpr) -> list[jax_core.JaxprEqn]:
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "pallas_call":
            found.append(eqn)
        elif eqn.primitive.name in ("jit", "pjit", "closed_call", "core_call"):
            found.extend(_pallas_calls(closed_parts(eqn.params["jaxpr"])[0]))
    return found


def kernel_from_eqn(
    eqn: jax_core.JaxprEqn,
    *,
    memory_space: MemorySpace = ANY,
    importer: Importer | None = None,
    passes: str = "",
) -> Kernel:
    """The ``Kernel`` of one upstream ``pallas_call`` equation (see the module doc), after the
    pipeline ``passes``."""
    params = eqn.params
    gm = params["grid_mapping"]
    name = str(params.get("name") or _function_name(params["jaxpr"]))
    _check_supported(eqn)
    importer = importer or Importer()
    grid = tuple(None if pallas_core.is_dynamic_dim(n) else int(n) for n in gm.grid)
    n_specs, n_pre = gm.num_inputs + gm.num_outputs, gm.num_index_operands
    body_jaxpr = params["jaxpr"]
    prefetch = [_prefetch_type(v.aval, k) for k, v in enumerate(body_jaxpr.invars[:n_pre])]
    specs = [
        _spec(importer, bm, memory_space, f"{name}_{_what(k, gm.num_inputs)}", prefetch)
        for k, bm in enumerate(gm.block_mappings[:n_specs])
    ]
    scratch_vars = body_jaxpr.invars[n_pre + n_specs :]
    scratch = [type_of(v.aval, f"scratch {k}") for k, v in enumerate(scratch_vars)]
    names = tuple(str(a) for a in gm.grid_names) if gm.grid_names else None
    enclosing, importer.grid_names = importer.grid_names, names  # lax.axis_index of grid axes
    try:
        body = _body(
            importer, name, body_jaxpr, [*prefetch, *(s.ref_type for s in specs), *scratch]
        )
    finally:
        importer.grid_names = enclosing
    vmapped = frozenset(int(d) for d in gm.vmapped_dims)
    if vmapped:
        body = _unbatched_axes(body, len(grid), vmapped)
    kernel = Kernel(
        name=name,  # upstream's, which names the custom call (the body's is IR-safe)
        body=body,
        grid=grid,
        in_specs=tuple(specs[: gm.num_inputs]),
        out_specs=tuple(specs[gm.num_inputs :]),
        scratch_types=tuple(t for t in scratch if isinstance(t, RefType)),
        dimension_semantics=_semantics(params.get("compiler_params"), len(grid), vmapped),
        input_output_aliases=_aliases(params.get("input_output_aliases", ()), n_pre),
        scalar_prefetch=tuple(prefetch),
        cost_estimate=kernel_params.cost_estimate(params.get("cost_estimate")),
        metadata=kernel_params.metadata(params.get("metadata")),
        fuse_transposed_lhs=_fuse_transposed_lhs(params.get("compiler_params")),
        vmem_limit_bytes=_vmem_limit(params.get("compiler_params")),
    )
    return run(kernel, passes) if passes else kernel


def _prefetch_type(aval: object, k: int) -> RefType:
    t = type_of(aval, f"scalar prefetch {k}")
    if not isinstance(t, RefType):
        raise JaxprImportError(f"scalar prefetch operand {k} of the kernel is not a ref: {aval}")
    return t


def _aliases(pairs: Sequence[tuple[int, int]], n_prefetch: int) -> tuple[tuple[int, int], ...]:
    """Upstream's aliases with the input indices counted among the kernel's inputs."""
    if any(i < n_prefetch for i, _ in pairs):
        raise JaxprImportError("minipallas cannot import an alias of a scalar-prefetch operand")
    return tuple(sorted((i - n_prefetch, o) for i, o in pairs))


def _what(k: int, n_inputs: int) -> str:
    return f"input{k}" if k < n_inputs else f"output{k - n_inputs}"


def _check_supported(eqn: jax_core.JaxprEqn) -> None:
    """The equation held to the rule's declaration of its parameters (also when a kernel is
    taken from it directly, by ``kernel_from_jaxpr`` or ``on_tpu``), and no mesh."""

    def error(message: str, fix: str | None = None) -> JaxprImportError:
        where = location(eqn) or user_location()  # as the importer's: else the caller's line
        return JaxprImportError(message, op="pallas_call", loc=where, fix=fix)

    check("pallas_call", RULES.params.get("pallas_call"), eqn.params, error)
    if eqn.params.get("mesh"):
        raise error("minipallas cannot import a pallas_call with a mesh")


def _spec(
    importer: Importer,
    bm: object,
    memory_space: MemorySpace,
    name: str,
    prefetch: Sequence[RefType] = (),
) -> TracedBlockSpec:
    array = ArrayType(bm.array_aval.shape, dtype_of(bm.array_aval.dtype, name))
    block: list[int | None] = []
    element_dims: set[int] = set()
    padding = [_padding(dim) for dim in bm.block_shape]
    for d, dim in enumerate(bm.block_shape):
        if isinstance(dim, pallas_core.Squeezed):
            block.append(None)
        elif isinstance(dim, pallas_core.Blocked):
            block.append(int(dim.block_size))
        elif isinstance(dim, pallas_core.Element) and padding[d] is not None:
            block.append(int(dim.block_size))
            element_dims.add(d)
        else:
            raise JaxprImportError(
                f"{name}: minipallas imports Blocked, Squeezed and Element block dimensions "
                f"(padded by non-negative ints), got {dim}"
            )
    if getattr(bm, "transforms", ()):
        raise JaxprImportError(f"{name}: block transforms are not supported")
    aval = bm.transformed_block_aval
    space = _space(aval, memory_space, name)
    ref = RefType(tuple(b for b in block if b is not None), array.dtype, space)
    jaxpr, consts = closed_parts(bm.index_map_jaxpr)
    i32 = ArrayType((), "int32")
    n_grid = len(jaxpr.invars) - len(prefetch)
    if n_grid < 0:
        raise JaxprImportError(f"{name}: the index map takes fewer operands than the prefetch")
    index_map = importer.function(
        f"{name}_index_map", jaxpr, consts, types=[*[i32] * n_grid, *prefetch], nonnegative=n_grid
    )
    if any(t != i32 for t in index_map.result_types):
        raise JaxprImportError(
            f"{name}: the index map must map i32[] grid indices (and the scalar-prefetch "
            "refs) to i32[]"
        )
    pads = tuple(padding) if any(p != (0, 0) for p in padding) else ()
    mode = kernel_params.pipeline_mode(getattr(bm, "pipeline_mode", None))
    return TracedBlockSpec(
        array, tuple(block), index_map, ref, frozenset(element_dims), pads, pipeline_mode=mode
    )


def _padding(dim: object) -> tuple[int, int] | None:
    """An ``Element``'s ``(low, high)`` padding as ints ((0, 0) for any other block dimension);
    None unless both are ints >= 0."""
    pad = dim.padding if isinstance(dim, pallas_core.Element) else (0, 0)
    try:
        low, high = (operator.index(p) for p in pad)
    except (TypeError, ValueError):
        return None
    return (low, high) if low >= 0 and high >= 0 else None


def _space(aval: object, default: MemorySpace, name: str) -> MemorySpace:
    """The block's memory space; Pallas's "default" (no space given) becomes ``default``."""
    space = getattr(aval, "memory_space", None)
    if space is None or str(getattr(space, "value", space)).lower() == "default":
        return default
    t = type_of(aval, name)
    return t.memory_space if isinstance(t, RefType) else default


def _body(
    importer: Importer, name: str, jaxpr: jax_core.Jaxpr, types: Sequence[RefType]
) -> Function:
    """The kernel body imported over refs of ``types`` (the blocks, then the scratch)."""
    if jaxpr.constvars:
        raise JaxprImportError(f"the body of pallas_call {name} closes over constants")
    params = [Value(t) for t in types]
    scope = ImportScope(importer)
    results = scope.run(jaxpr, params)
    if results:
        raise JaxprImportError(f"the body of pallas_call {name} returns values")
    return Function(importer.unique_name(name), scope.builder.block(params, results))


def _unbatched_axes(body: Function, n_axes: int, vmapped: frozenset[int]) -> Function:
    """The body with its grid queries on the full grid: upstream's batching rule keeps the
    body, whose ``program_id(k)`` counts the axes that are not ``vmapped_dims``."""
    axes = [a for a in range(n_axes) if a not in vmapped]
    check_grid_axes(body, len(axes))
    return regrid_queries(body, axes)


def _semantics(
    compiler_params: object, n_axes: int, vmapped: frozenset[int]
) -> tuple[str, ...] | None:
    """``dimension_semantics`` of Pallas TPU's compiler params, as strings (given for the axes
    that are not vmapped; a vmapped axis is ``parallel``, as upstream's Mosaic lowering makes
    it); None if absent."""
    for params in _candidates(compiler_params):
        values = getattr(params, "dimension_semantics", None)
        if values is None:
            continue
        given = iter(str(getattr(v, "value", v)).lower() for v in values)
        if len(values) != n_axes - len(vmapped):
            raise JaxprImportError(f"dimension_semantics {values} do not fit the grid")
        names = tuple("parallel" if a in vmapped else next(given) for a in range(n_axes))
        if any(n not in DIMENSION_SEMANTICS for n in names):
            raise JaxprImportError(f"dimension_semantics {values} do not fit the grid")
        return names
    return None


def _fuse_transposed_lhs(compiler_params: object) -> bool:
    """Pallas TPU's ``fuse_transposed_lhs_in_matmul`` (``Kernel.fuse_transposed_lhs``)."""
    fused = (
        getattr(p, "fuse_transposed_lhs_in_matmul", False) for p in _candidates(compiler_params)
    )
    return any(bool(f) for f in fused)


def _vmem_limit(compiler_params: object) -> int | None:
    """Pallas TPU's ``vmem_limit_bytes`` (``Kernel.vmem_limit_bytes``): fusion stays within it."""
    given = [getattr(p, "vmem_limit_bytes", None) for p in _candidates(compiler_params)]
    return next((int(n) for n in given if n is not None), None)


def _candidates(compiler_params: object) -> list[object]:
    """The compiler params an equation carries: the object itself, or each of a mapping's
    (``{"mosaic_tpu": ...}``)."""
    if isinstance(compiler_params, Mapping):
        return list(compiler_params.values())
    return [compiler_params]


def _function_name(jaxpr: object) -> str:
    """The kernel function's name, as upstream names its custom call when ``name=`` is not
    given (``debug_info.func_name``)."""
    debug = getattr(jaxpr, "debug_info", None)
    return str(getattr(debug, "func_name", "") or "kernel")
