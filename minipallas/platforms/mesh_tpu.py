"""Mesh kernels (upstream's ``pl.kernel`` over ``pltpu.create_tensorcore_mesh``) on a TPU whose
mesh has one core: the kernel Mosaic runs, and a way to run it under ``jax.jit`` on the chip.

A TPU v5e has one TensorCore, so a mesh of one core is its real case, and there the collective
machinery is nothing at all (``mosaic_kernel``):

- a collective ``run_scoped`` over axes of size 1 is a plain scoped allocation: the one core is
  the whole group. Its ``collective_axes`` go, and a ``tpu.vmem_shared`` allocation (memory
  every core sees) becomes ``tpu.vmem`` (the core's own: the only core sees it);
- a ``barrier`` among one core waits for no one, and goes;
- ``program_id`` of a mesh axis of size 1 (the core's position: ``lax.axis_index``) is the
  constant 0, so a per-core row of a collective VMEM/SMEM/semaphore allocation
  (``interop/importer/rules/mesh.py``) is row 0 (the rows stay, of one row each, and the ops act on
  ``ref.at[0]``), and a window at ``pl.ds(c * 8, 8)`` is a static one. Mosaic needs that: it
  refuses a dynamic offset into a 1-D ``int32`` array it cannot prove word-aligned, which
  ``c * 8`` is not (upstream's module for such a kernel is refused so);
- the blocks stay the whole operands in ``ANY`` (HBM), as upstream's mesh kernels take them,
  and the body copies them with DMAs.

The body is rebuilt, never edited: every op is made anew over the rebuilt operands and its
result types inferred again (``ir.builder.infer_result_types``), so a ``tpu.vmem_shared`` view
(``ref.at``, a loop's ref parameter) becomes a ``tpu.vmem`` one wherever it flows; callees are
rebuilt once each (``ir.rewrite.Callees``).

A mesh of more than one core whose cores share memory (a collective ``run_scoped`` over an axis
longer than 1) is refused for Mosaic with upstream's error (``ir.collectives``, the ``mosaic``
path: "run_scoped lowering does not support collective axes"), with a note that such a kernel
needs a chip with that many TensorCores. A mesh of several cores that share nothing lowers as
upstream lowers it: its grid is the mesh, ``parallel`` (one core takes the points in turn).

``on_tpu(f)`` runs ``f``'s jaxpr with every ``mpmd_map`` equation as minipallas's Mosaic module
in the ``tpu_custom_call`` upstream's lowering emits for it (``run_mesh_eqn``: its compiler
params, its aliases), and every ``pallas_call`` equation likewise (``run_pallas_call_eqn``), so
``jax.jit(on_tpu(f))(x)`` runs on the chip; the difftest's TPU ways
(``difftest.tpu.evaluate``) run mesh kernels the same way. It looks inside a ``shard_map``
(kept around its body's kernels; a kernel that spans devices runs as one device's program,
``devices_tpu``) and inside the jaxprs other equations carry (a ``cond``'s branches).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from minipallas.interop.importer.avals import type_of
from minipallas.interop.importer.engine import Importer, ImportScope, closed_parts
from minipallas.interop.importer.rules.kernel_call import kernel_from_eqn
from minipallas.interop.importer.rules.mesh import mpmd_map
from minipallas.ir.builder import infer_result_types
from minipallas.ir.collectives import check_collective_axes
from minipallas.ir.core import Block, Function, Op, Value
from minipallas.ir.errors import MiniPallasError
from minipallas.ir.kernel_spec import Kernel
from minipallas.ir.literal import Literal
from minipallas.ir.rewrite import Callees
from minipallas.ir.types import TPU_VMEM, TPU_VMEM_SHARED, RefType, Type
from minipallas.kernels.collective.mesh import mesh_kernel
from minipallas.lowering.compat.jax_private import core as jax_core
from minipallas.platforms.devices_tpu import equations, shard_map_rules
from minipallas.platforms.mosaic import run_module

KernelRule = Callable[[jax_core.JaxprEqn, Sequence[Any]], Sequence[Any]]
_INLINED = ("pjit", "jit", "closed_call", "custom_vjp_call", "custom_jvp_call")
_SHARD_MAP_PARAMS = {"jaxpr", "mesh", "in_specs", "out_specs", "check_vma", "newly_manual_axes",
                     "manual_axes"}  # fmt: skip

__all__ = [
    "MULTI_CORE_NOTE",
    "kernel_from_mesh_eqn",
    "mosaic_kernel",
    "on_tpu",
    "one_core_body",
    "evaluate_kernels",
    "run_mesh_eqn",
]

MULTI_CORE_NOTE = (
    "A mesh of {cores} cores whose cores share memory needs a chip with {cores} TensorCores "
    "(a megacore chip: TPU v4, v5p, v7x) and a Mosaic lowering of collective allocations, "
    "which upstream does not have; a TPU v5e has one TensorCore. Build the mesh with "
    "num_cores=1 to run it there (minipallas lowers a one-core mesh kernel for Mosaic: its "
    "collective allocations are plain ones and its barriers vanish), or run it on the CPU "
    "under collectives='simulate'."
)


def mosaic_kernel(source: Kernel | Op | jax_core.JaxprEqn) -> Kernel:
    """The ``Kernel`` minipallas's Mosaic lowering takes for a mesh kernel: ``source`` is the
    mesh kernel (``kernels.collective.mesh.mesh_kernel``), its ``mesh_call`` op, or upstream's
    ``mpmd_map`` equation. The body as the module doc says; a mesh of several cores that
    share memory raises upstream's ``CollectiveAxesUnsupported`` (a ``NotImplementedError``)."""
    kernel = _mesh_kernel(source)
    names = _axis_names(source, kernel)
    sizes = dict(zip(names, kernel.grid, strict=True))
    body = one_core_body(kernel.body, sizes, kernel.grid)
    return dataclasses.replace(kernel, body=body)


def one_core_body(
    fn: Function, sizes: dict[str, int], grid: Sequence[int | None] | None = None
) -> Function:
    """``fn`` (a mesh kernel's body over the mesh axes ``sizes``: name -> size, in grid order
    unless ``grid`` gives the sizes) with its collective allocations, barriers and core
    positions over axes of size 1 made plain (module doc)."""
    grid = tuple(sizes.values()) if grid is None else tuple(grid)
    for op in (op for g in (fn, *fn.callees()) for op in g.walk()):
        axes = tuple(op.attrs.get("collective_axes", ())) if op.name == "run_scoped" else ()
        if any(sizes.get(a, 1) != 1 for a in axes):
            _refuse(fn, axes, sizes)
    return _OneCore(sizes, grid).function(fn)


def _refuse(fn: Function, axes: tuple[str, ...], sizes: dict[str, int]) -> None:
    cores = int(np.prod([sizes.get(a, 1) for a in axes]))
    try:
        check_collective_axes(fn, "mosaic")
    except MiniPallasError as e:
        e.add_note(MULTI_CORE_NOTE.format(cores=cores))
        raise
    raise AssertionError("the collective-axes check let a collective run_scoped through")


class _OneCore:
    """The rebuild: an environment of old values to new ones, each function once."""

    def __init__(self, sizes: dict[str, int], grid: tuple[int | None, ...]) -> None:
        self.sizes = sizes
        self.grid = grid
        self.env: dict[Value, Value] = {}
        self.function = Callees(lambda fn: Function(fn.name, self.block(fn.body)))

    def one(self, axes: Sequence[str]) -> bool:
        """Whether ``axes`` name only axes of size 1 (or none)."""
        return all(self.sizes.get(a, 1) == 1 for a in axes)

    def block(self, block: Block) -> Block:
        params = tuple(Value(_plain(p.type)) for p in block.params)
        self.env.update(zip(block.params, params, strict=True))
        ops: list[Op] = []
        for op in block.ops:
            new = self.op(op)
            if new is not None:
                ops.append(new)
        return Block(params, tuple(ops), tuple(self.env[v] for v in block.results))

    def op(self, op: Op) -> Op | None:
        if op.name == "barrier" and self.one(_axes(op.attrs.get("axes", ()))):
            return None  # a barrier among one core waits for no one
        axis = op.attrs.get("axis") if op.name == "program_id" else None
        if axis is not None and axis < len(self.grid) and self.grid[axis] == 1:
            zero = {"value": Literal.of(0, "int32")}  # the one core's position
            return self.made(op, Op("constant", (), (Value(op.result.type),), zero, (), op.loc))
        attrs = {k: _plain(v) if isinstance(v, RefType) else v for k, v in op.attrs.items()}
        if op.name == "run_scoped" and self.one(attrs.get("collective_axes", ())):
            attrs["collective_axes"] = ()
        if isinstance(attrs.get("callee"), Function):
            attrs["callee"] = self.function(attrs["callee"])
        operands = tuple(self.env[v] for v in op.operands)
        regions = tuple(self.block(r) for r in op.regions)
        types = infer_result_types(op.name, [v.type for v in operands], attrs, regions, op.loc)
        new = Op(op.name, operands, tuple(Value(t) for t in types), attrs, regions, op.loc)
        return self.made(op, new)

    def made(self, old: Op, new: Op) -> Op:
        self.env.update(zip(old.results, new.results, strict=True))
        return new


def _axes(value: object) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def _plain(t: Type) -> Type:
    """``t`` with memory the cores share (``tpu.vmem_shared``) made the one core's own."""
    if isinstance(t, RefType) and t.memory_space == TPU_VMEM_SHARED:
        return RefType(t.shape, t.dtype, TPU_VMEM)
    return t


# -- where the mesh kernel comes from ---------------------------------------------------------


def _mesh_kernel(source: Kernel | Op | jax_core.JaxprEqn) -> Kernel:
    if isinstance(source, Kernel):
        return source
    if isinstance(source, Op):
        if source.name != "mesh_call":
            raise MiniPallasError(
                f"mosaic_kernel takes a mesh_call op, got '{source.name}'", op=source.name
            )
        return mesh_kernel(source)
    return mesh_kernel(mesh_call_of(source))


def _axis_names(source: Kernel | Op | jax_core.JaxprEqn, kernel: Kernel) -> tuple[str, ...]:
    """The mesh's axis names: the op's, the equation's mesh's, or (a ``Kernel``, which keeps
    none) the names the body's run_scopeds and barriers use, against the grid's sizes."""
    if isinstance(source, Op):
        return tuple(source.attrs["axes"])
    if not isinstance(source, Kernel):
        return tuple(str(a) for a in source.params["meshes"][0].shape)
    used: list[str] = []
    for op in kernel.body.walk():
        names = op.attrs.get("collective_axes", ()) if op.name == "run_scoped" else ()
        names = _axes(op.attrs.get("axes", ())) if op.name == "barrier" else names
        used += [a for a in names if a not in used]
    if len(kernel.grid) == 1 and len(used) <= 1:
        return tuple(used) or ("core",)
    raise MiniPallasError(
        f"the mesh kernel '{kernel.name}' keeps no axis names for its grid {kernel.grid}",
        fix="pass its mesh_call op (or upstream's mpmd_map equation) instead of the Kernel",
    )


def mesh_eqn(jaxpr: jax_core.Jaxpr) -> jax_core.JaxprEqn | None:
    """The first ``mpmd_map`` equation of a jaxpr, looking into ``jit`` calls."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "mpmd_map":
            return eqn
        inner = eqn.params.get("jaxpr")
        found = None if inner is None else mesh_eqn(getattr(inner, "jaxpr", inner))
        if found is not None:
            return found
    return None


def mesh_call_of(eqn: jax_core.JaxprEqn, rule: Callable[..., Any] = mpmd_map) -> Op:
    """The ``mesh_call`` op upstream's equation imports to by its import ``rule``: ``mpmd_map``
    (``interop/importer/rules/mesh.py``), or a ``shard_map`` over kernels that span devices."""
    scope = ImportScope(Importer())
    for k, v in enumerate(eqn.invars):
        if isinstance(v, jax_core.Var):
            scope.bind(v, Value(type_of(v.aval, f"operand {k}")))
    with scope.located(eqn):
        rule(scope, eqn)
    (op,) = [op for op in scope.builder.ops if op.name == "mesh_call"]
    return op


def kernel_from_mesh_eqn(eqn: jax_core.JaxprEqn) -> tuple[Kernel, Any]:
    """The Mosaic ``Kernel`` of upstream's ``mpmd_map`` equation and its ``compiler_params``
    (upstream's ``pltpu.CompilerParams``, or None)."""
    return mosaic_kernel(eqn), eqn.params.get("compiler_params")


# -- running it on the chip -------------------------------------------------------------------


def run_mesh_eqn(eqn: jax_core.JaxprEqn, ins: Sequence[Any]) -> list[Any]:
    """An ``mpmd_map`` equation run as minipallas's Mosaic module, in the ``tpu_custom_call``
    upstream's lowering emits for it (its compiler params; aliases; bools as int32)."""
    kernel, params = kernel_from_mesh_eqn(eqn)
    return run_module(kernel, params, ins, [v.aval.dtype for v in eqn.outvars])


def run_pallas_call_eqn(eqn: jax_core.JaxprEqn, ins: Sequence[Any], passes: str = "") -> list[Any]:
    """A ``pallas_call`` equation run as minipallas's Mosaic module (its kernel imported with
    blocks in VMEM, then ``passes`` run on it) in the same custom call. Its compiler params are
    the ``pltpu.CompilerParams`` itself in jax 0.10.2's equations (flash attention's), or a
    ``{"mosaic_tpu": ...}`` mapping."""
    params = eqn.params.get("compiler_params")
    if isinstance(params, Mapping):
        params = params.get("mosaic_tpu")
    kernel = kernel_from_eqn(eqn, memory_space=TPU_VMEM, passes=passes)
    return run_module(kernel, params, ins, [v.aval.dtype for v in eqn.outvars])


def on_tpu(f: Callable[..., Any]) -> Callable[..., Any]:
    """``f`` with each kernel it makes (``pl.kernel``: an ``mpmd_map`` equation, and each
    ``pallas_call``, inside ``jit`` and custom-derivative calls, ``shard_map`` bodies and the
    jaxprs other equations carry too) run as minipallas's Mosaic module (``run_mesh_eqn``,
    ``run_pallas_call_eqn``; one that spans devices as one device's program,
    ``devices_tpu``), the rest of its jaxpr as it is: ``jax.jit(on_tpu(f))(x)`` runs on the
    chip, and gives what ``f`` gives (forward only)."""

    def run(*args: Any) -> Any:
        closed, shapes = jax.make_jaxpr(f, return_shape=True)(*args)
        leaves = jax.tree.leaves(args)
        rules = {"mpmd_map": run_mesh_eqn, "pallas_call": run_pallas_call_eqn}
        outs = evaluate_kernels(closed.jaxpr, closed.consts, leaves, rules)
        return jax.tree.unflatten(jax.tree.structure(shapes), outs)

    return run


def evaluate_kernels(
    jaxpr: jax_core.Jaxpr,
    consts: Sequence[Any],
    args: Sequence[Any],
    rules: dict[str, KernelRule],
) -> list[Any]:
    """``jaxpr`` on ``args`` (under a trace), each equation whose primitive ``rules`` names
    run by its rule, ``jit`` calls and custom-derivative calls inlined so the kernels inside
    them are found too (flash attention's ``pallas_call`` is inside a ``custom_vjp``, whose
    equation cannot be bound again from its params: ``KeyError: 'subfuns'``; inlined, its
    primal runs, forward only), a ``shard_map`` kept around its body's kernels
    (``in_shard_map``: one that spans devices runs as one device's program,
    ``devices_tpu.shard_map_rules``), every other equation bound as it is, the jaxprs it carries
    with kernels in them traced again (``_bind``) (``difftest.tpu.evaluate`` is this over its
    kernel rule)."""
    env: dict[jax_core.Var, Any] = {}

    def read(v: Any) -> Any:
        return v.val if isinstance(v, jax_core.Literal) else env[v]

    env.update(zip(jaxpr.constvars, consts, strict=True))
    env.update(zip(jaxpr.invars, args, strict=True))
    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        rule = rules.get(eqn.primitive.name)
        if rule is not None:
            outs = rule(eqn, ins)
        elif eqn.primitive.name in _INLINED:
            inner = eqn.params.get("jaxpr") or eqn.params["call_jaxpr"]
            outs = evaluate_kernels(inner.jaxpr, inner.consts, ins, rules)
        elif eqn.primitive.name == "shard_map":
            outs = in_shard_map(eqn, ins, shard_map_rules(eqn, rules))
        else:
            outs = _bind(eqn, ins, rules)
        env.update(zip(eqn.outvars, outs, strict=True))
    return [read(v) for v in jaxpr.outvars]


def in_shard_map(eqn: jax_core.JaxprEqn, ins: Sequence[Any], rules: dict[str, KernelRule]) -> list:
    """A ``shard_map`` equation run with its body's kernels by ``rules``: ``jax.shard_map`` of
    the body over the equation's mesh, specs and manual axes, ``check_vma`` as it says."""
    jaxpr, consts = closed_parts(eqn.params["jaxpr"])
    params = eqn.params
    unknown = sorted(set(params) - _SHARD_MAP_PARAMS)
    if unknown:
        raise MiniPallasError(
            f"on_tpu cannot run a shard_map with parameters {unknown}",
            op="shard_map",
            fix=f"this jax's shard_map has parameters on_tpu does not know; it takes "
            f"{sorted(_SHARD_MAP_PARAMS)}",
        )
    manual = params.get("manual_axes", params.get("newly_manual_axes"))

    def body(*shards: Any) -> list[Any]:
        return evaluate_kernels(jaxpr, consts, shards, rules)

    run = jax.shard_map(
        body,
        mesh=params["mesh"],
        in_specs=tuple(params["in_specs"]),
        out_specs=list(params["out_specs"]),
        check_vma=params["check_vma"],
        axis_names=frozenset(manual),
    )
    return list(run(*ins))


def _bind(eqn: jax_core.JaxprEqn, ins: Sequence[Any], rules: dict[str, KernelRule]) -> list:
    """``eqn`` bound as it is, each jaxpr it carries with kernels in it traced again with them
    run by ``rules`` (a ``cond``'s branches, a loop's body), so they run on the chip too; the
    bind takes the primitive's own parameters (``get_bind_params``: a higher-order
    primitive's sub-functions)."""
    params = {k: _with_kernels(v, rules) for k, v in eqn.params.items()}
    outs = eqn.primitive.bind(*ins, **eqn.primitive.get_bind_params(params))
    return list(outs) if eqn.primitive.multiple_results else [outs]


def _with_kernels(value: Any, rules: dict[str, KernelRule]) -> Any:
    """A parameter of an equation: a ``ClosedJaxpr`` whose equations name a primitive of
    ``rules`` traced again over ``evaluate_kernels`` (a tuple of them, each)."""
    if isinstance(value, tuple):
        return tuple(_with_kernels(v, rules) for v in value)
    if not isinstance(value, jax_core.ClosedJaxpr) or not _has_kernels(value.jaxpr, rules):
        return value
    avals = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in value.jaxpr.invars]
    return jax.make_jaxpr(lambda *xs: evaluate_kernels(value.jaxpr, value.consts, xs, rules))(
        *avals
    )


def _has_kernels(jaxpr: jax_core.Jaxpr, rules: dict[str, KernelRule]) -> bool:
    return any(e.primitive.name in rules for e in equations(jaxpr))
