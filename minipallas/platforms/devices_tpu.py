"""Kernels that span devices on the chip (issue 47): a ``pallas_call`` in a ``jax.shard_map``
with remote copies, remote signals or the barrier semaphore, run by ``on_tpu`` as minipallas's
own Mosaic module on every device, the shard_map kept around it.

Where the device's kernel comes from: the importer's ``mesh_call`` of a shard_map
(``interop/importer/rules/devices.py``, ``devices_kernel.py``), the program every device runs over
buffers with a row per device, which the simulator runs too; not the ``pallas_call`` imported
as a kernel of its own (``kernel_from_eqn``): minipallas's IR has no remote copy, and the
importer reads one as a write into the target's row. The Mosaic rules for one device
(``lowering/tpu/rules/remote.py``) read those rows back into upstream's remote ops. So:

1. ``device_kernel(call, mesh)`` imports a ``pallas_call`` of the body, alone in a shard_map
   over the mesh, as that ``mesh_call``, and makes the ``Kernel`` of one device: the call's
   grid, Mosaic's to run (``_grid_step`` undoes the loop the import makes of it); its operands
   the shards, a blocked one as its block's window, a whole one in the memory space the
   pallas_call gives it (VMEM when it names none, as upstream), a semaphore passed from
   another kernel in semaphore memory (``_semaphores_as_scratch``); its scratch the kernel's
   ``scratch_shapes``; its body the kernel's part of the ``mesh_call``'s body, over
   row-per-device refs, with the barrier semaphore last; upstream's ``mesh_axes`` metadata
   (the mesh axes the kernel names);
2. ``shard_map_rules(eqn, rules)``: the rules ``on_tpu`` runs a shard_map's body with: a
   ``pallas_call`` that spans devices (``spans_devices``) as that kernel's module, made once
   (``device_module``), in the custom call of its compiler params (``collective_id``
   among them), any other by ``rules``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import jax
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P

from minipallas.interop.importer.avals import type_of
from minipallas.interop.importer.engine import Importer, ImportScope, location
from minipallas.interop.importer.rules.devices import device_shard_map
from minipallas.interop.importer.rules.devices_cores import equations
from minipallas.interop.importer.rules.devices_kernel import collective_id
from minipallas.interop.importer.rules.kernel_call import _spec
from minipallas.ir.core import Block, Function, Op, Value
from minipallas.ir.errors import MiniPallasError
from minipallas.ir.kernel_spec import Kernel, TracedBlockSpec
from minipallas.ir.types import TPU_SMEM, TPU_VMEM, ArrayType, MemorySpace, RefType
from minipallas.kernels.spec.tracing import trace_index_map, whole_array_map
from minipallas.lowering.compat.jax_private import core as jax_core
from minipallas.lowering.compat.jax_private import tpu_custom_call
from minipallas.lowering.lowered import Lowered
from minipallas.lowering.tpu.device_context import Mesh
from minipallas.lowering.tpu.devices import lower_device_kernel
from minipallas.platforms.mosaic import run_module

__all__ = ["device_kernel", "device_module", "equations", "shard_map_rules", "spans_devices"]

# what makes a kernel's body reach other devices (a copy's or signal's device_id, too)
_DEVICE_PRIMITIVES = ("get_barrier_semaphore", "axis_index")
_I32 = ArrayType((), "int32")


def spans_devices(call: jax_core.JaxprEqn) -> bool:
    """Whether a ``pallas_call`` equation's kernel reaches other devices: a remote copy or
    signal (a ``device_id``), the barrier semaphore, or a mesh axis's index."""
    for eqn in equations(call.params["jaxpr"]):
        name = eqn.primitive.name
        if name in _DEVICE_PRIMITIVES:
            return True
        if name in ("dma_start", "dma_wait", "semaphore_signal"):
            tree = eqn.params.get("tree", eqn.params.get("args_tree"))
            leaves = tree.unflatten(eqn.invars)
            if leaves[-1 if name != "semaphore_signal" else 3] is not None:
                return True
    return False


def device_kernel(call: jax_core.JaxprEqn, mesh: Any) -> tuple[Kernel, Mesh]:
    """The ``Kernel`` each device of ``mesh`` (a ``jax.sharding`` mesh) runs for ``call``, a
    ``pallas_call`` equation of a ``shard_map``'s body (module doc, 1), and the mesh's axis
    names and sizes. The kernel is imported alone, in a ``shard_map`` of its own over ``mesh``
    whose operands and results are its own, split along every axis (a scalar replicated): the
    ops around it in the body need no import."""
    axes = tuple(mesh.axis_names)
    n = int(np.prod([mesh.shape[a] for a in axes]))
    _check_chip(call)

    params, sems = _semaphores_as_scratch(call)
    invars = [v for k, v in enumerate(call.invars) if k not in sems]
    outvars = [v for k, v in enumerate(call.outvars) if k + len(call.invars) not in sems]

    def alone(*shards: Any) -> Any:
        return call.primitive.bind(*shards, **params)

    def spec(v: jax_core.Var) -> P:
        return P(axes) if v.aval.shape else P()

    whole = [jax.ShapeDtypeStruct((v.aval.shape[0] * n, *v.aval.shape[1:]) if v.aval.shape
                                  else (), v.aval.dtype) for v in invars]  # fmt: skip
    ins, outs = tuple(spec(v) for v in invars), [spec(v) for v in outvars]
    f = jax.shard_map(alone, mesh=mesh, in_specs=ins, out_specs=outs, check_vma=False)
    (eqn,) = [e for e in jax.make_jaxpr(f)(*whole).jaxpr.eqns if e.primitive.name == "shard_map"]
    scope = ImportScope(Importer())
    for k, v in enumerate(eqn.invars):
        scope.bind(v, Value(type_of(v.aval, f"operand {k}")))
    with scope.located(call):
        device_shard_map(scope, eqn)
    (op,) = [op for op in scope.builder.ops if op.name == "mesh_call"]
    names = (tuple(op.attrs["axes"]), tuple(op.attrs["shape"]))
    (inner,) = [e for e in equations(eqn.params["jaxpr"]) if e.primitive.name == "pallas_call"]
    return _one_device(op, inner, names, sems, call.params["grid_mapping"].num_inputs), names


def _semaphores_as_scratch(call: jax_core.JaxprEqn) -> tuple[dict, list[int]]:
    """``call``'s params with its semaphore operands and results (a semaphore passed between
    kernels) made its first scratch, as the import takes them (a row per device, signalled by
    the kernel's remote signals); and their places among its operands and results, where
    ``_one_device`` puts them back (on the chip each is the device's int32 word in semaphore
    memory, as upstream's custom call passes it)."""
    gm, jaxpr = call.params["grid_mapping"], call.params["jaxpr"]
    atoms = [*call.invars, *call.outvars]
    sems = [k for k, v in enumerate(atoms) if _is_semaphore(v.aval)]
    if not sems:
        return call.params, []
    if call.params["input_output_aliases"]:
        raise MiniPallasError(
            "on_tpu runs a kernel that takes or returns a semaphore without input_output_aliases",
            op="pallas_call",
            loc=location(call),
            fix="write the result into an output of its own",
        )
    n_io, n_pre, n_in = len(atoms), gm.num_index_operands, len(call.invars)
    keep = [k for k in range(n_io) if k not in sems]
    order = [*keep, *sems, *range(n_io, len(jaxpr.invars))]
    grid = dataclasses.replace(
        gm,
        block_mappings=tuple(gm.block_mappings[k - n_pre] for k in keep if k >= n_pre),
        num_inputs=sum(n_pre <= k < n_in for k in keep),
        num_outputs=sum(k >= n_in for k in keep),
        scratch_avals=(*(jaxpr.invars[k].aval for k in sems), *gm.scratch_avals),
    )
    outs = [a for k, a in enumerate(call.params["out_avals"]) if k + n_in in keep]
    return {
        **call.params,
        "jaxpr": jaxpr.replace(invars=[jaxpr.invars[k] for k in order]),
        "grid_mapping": grid,
        "out_avals": tuple(outs),
    }, sems


def device_module(call: jax_core.JaxprEqn, mesh: Any) -> tuple[Kernel, Lowered]:
    """``device_kernel(call, mesh)``'s kernel and its Mosaic module (``lower_device_kernel``),
    told the user lines where ``call``'s kernel signals another device."""
    kernel, names = device_kernel(call, mesh)
    signals = frozenset(
        location(e)
        for e in equations(call.params["jaxpr"])
        if e.primitive.name == "semaphore_signal"
        and e.params["args_tree"].unflatten(e.invars)[3] is not None
    )
    return kernel, lower_device_kernel(kernel, names, signals)


def _check_chip(call: jax_core.JaxprEqn) -> None:
    """On the chip, a kernel that spans devices names a collective_id only when it uses the
    barrier semaphore (or allows it without)."""
    params = _mosaic_params(call.params.get("compiler_params"))
    uses = {e.primitive.name for e in equations(call.params["jaxpr"])}
    if (
        collective_id(call) is not None
        and "get_barrier_semaphore" not in uses
        and not getattr(params, "allow_collective_id_without_custom_barrier", False)
    ):
        raise MiniPallasError(
            "collective_id has to be unspecified or None when not using a custom barrier (jax's "
            "tpu_custom_call says so of upstream's lowering of this kernel too)",
            op="pallas_call",
            loc=location(call),
            fix="drop collective_id from the compiler params, or use the barrier semaphore "
            "(pltpu.get_barrier_semaphore())",
        )


def _one_device(op: Op, call: jax_core.JaxprEqn, mesh: tuple, sems: list[int], n_in: int) -> Kernel:
    """The kernel of one device for ``call``, imported alone as ``op`` (a ``mesh_call`` whose
    operands and results are the kernel's): the body of the collective ``run_scoped`` that holds
    the kernel (``_Slots``), over the operands' rows, then the scratch's, then the barrier
    semaphore's. ``call``'s first scratch are the semaphores passed between kernels, put back
    at their places ``sems`` among its operands (scalar prefetch, the ``n_in`` inputs) and
    results."""
    gm = call.params["grid_mapping"]
    name = call.params["jaxpr"].debug_info.func_name or "kernel"
    slots = _Slots(op, call)
    rows, grid = len(mesh[1]), tuple(int(n) for n in gm.grid)
    params, ops, blocked = _grid_step(slots, len(grid), rows) if grid else (
        slots.params, slots.ops, frozenset())  # fmt: skip
    n_pre, importer = gm.num_index_operands, Importer()
    pre = tuple(_shard(p.type, rows, TPU_SMEM) for p in slots.io[:n_pre])  # scalar prefetch
    whole = partial(_whole, rows=rows, n_grid=len(grid), prefetch=pre)
    specs = [
        _spec(importer, bm, TPU_VMEM, f"{name}_operand{k}", pre)
        if k + n_pre in blocked
        else whole(p.type, _space(bm.transformed_block_aval), f"{name} operand {k}")
        for k, (p, bm) in enumerate(zip(slots.io[n_pre:], gm.block_mappings, strict=True))
    ]
    n_io, moved = len(slots.io), len(sems)
    scratch = slots.scratch[moved:]
    passed = [whole(p.type, p.type.memory_space, f"{name} semaphore")
              for p in slots.scratch[:moved]]  # fmt: skip
    specs = _put_back(specs, passed, [k - n_pre for k in sems])
    io = _put_back(params[:n_io], params[n_io : n_io + moved], sems)
    body = Function(name, Block((*io, *params[n_io + moved :]), ops, ()))
    effects = call.params["jaxpr"].effects  # upstream reads the kernel's (its axis_index)
    axes = sorted({str(e.name) for e in effects if isinstance(e, jax_core.NamedAxisEffect)}
                  & set(mesh[0]))  # fmt: skip
    return Kernel(
        name=name,
        body=body,
        grid=grid,
        dimension_semantics=_semantics(call),
        in_specs=tuple(specs[:n_in]),
        out_specs=tuple(specs[n_in:]),
        scratch_types=tuple(_shard(p.type, rows) for p in scratch),
        scalar_prefetch=pre,
        input_output_aliases=tuple(sorted((i - n_pre, o) for i, o in slots.aliases)),
        metadata=(("mesh_axes", json.dumps(axes)),) if axes else (),
    )


def _put_back(items: Sequence[Any], moved: Sequence[Any], places: Sequence[int]) -> list:
    """``items`` with each of ``moved`` inserted at its place among them (places ascending)."""
    out = list(items)
    for place, item in zip(places, moved, strict=True):
        out.insert(place, item)
    return out


def _grid_step(
    slots: _Slots, n_grid: int, n_mesh: int
) -> tuple[tuple[Value, ...], tuple[Op, ...], frozenset[int]]:
    """The body of one grid step, as Mosaic runs the grid and moves the blocks (upstream's
    pipeline): the import's loop over grid points goes, and its step's call of the kernel's
    body takes the device's position from ``program_id`` of axes ``n_grid`` on, the grid
    point from axes ``0..n_grid-1``, and each blocked operand from a parameter of its block's
    type (the window Mosaic gives it; its view of the row goes with the loop). Returns the
    parameters, the ops, and which operands are blocked."""
    (loop,) = [o for o in slots.ops if o.name == "for"]
    step = loop.regions[0]
    call = [o for o in step.ops if o.name == "call"][-1]
    outer = dict(zip(loop.param_group("consts"), loop.group("consts"), strict=True))
    ids = [Op("program_id", results=(Value(_I32),), attrs={"axis": a}, loc=call.loc)
           for a in (*range(n_grid, n_grid + n_mesh), *range(n_grid))]  # fmt: skip
    params, args, blocked = list(slots.params), [], set()
    for k, a in enumerate(call.operands[n_mesh + n_grid :]):
        if a in outer:
            args.append(params[k] if k < len(slots.io) else outer[a])
            continue
        params[k] = Value(a.type)  # a block's view in the device's row
        args.append(params[k])
        blocked.add(k)
    shifted = [o.replace(attrs={"axis": o.attrs["axis"] + n_grid}) if o.name == "program_id"
               else o for o in slots.ops if o is not loop]  # fmt: skip
    calls = Op("call", (*(i.results[0] for i in ids), *args), attrs=call.attrs, loc=call.loc)
    return tuple(params), (*shifted, *ids, calls), frozenset(blocked)


def _semantics(call: jax_core.JaxprEqn) -> tuple[str, ...] | None:
    """The grid's dimension semantics the compiler params give, or None (``arbitrary``,
    upstream's default: ``lower_device_kernel``)."""
    given = getattr(_mosaic_params(call.params.get("compiler_params")), "dimension_semantics",
                    None)  # fmt: skip
    return None if given is None else tuple(str(getattr(v, "value", v)).lower() for v in given)


class _Slots:
    """Where the imported kernel keeps each of its operands (``devices_kernel.device_kernel``):
    the ``mesh_call``'s own ref, passed into the kernel's ``run_scoped``, or a buffer that
    ``run_scoped`` allocates, an input copied into it first and an output read back after. On
    the chip the operand is the buffer: those copies go (``ops``), and ``params`` are the
    kernel's operands, scratch and barrier semaphore as the region holds them."""

    def __init__(self, op: Op, call: jax_core.JaxprEqn) -> None:
        gm = call.params["grid_mapping"]
        n_io = gm.num_index_operands + gm.num_inputs + gm.num_outputs
        callee: Function = op.attrs["callee"]
        block, held = callee.body, {p: k for k, p in enumerate(callee.body.params)}
        barrier = None
        if collective_id(call) is not None:  # the barrier's scope, around the program
            outer = _only_scope(block)
            region = outer.regions[0]
            barrier = region.params[0]
            held = {region.params[1 + j]: held[o] for j, o in enumerate(outer.operands)}
            block = region
        scoped = _only_scope(block)
        region = scoped.regions[0]
        made = scoped.param_group("allocs")  # the scratch and semaphores the scope makes
        slot: dict[int, Value] = {}
        incoming: dict[Value, int] = {}  # a region parameter holding an input's value
        reads = _own_reads(block, held)
        self.barrier: list[Value] = []
        for p, o in zip(scoped.param_group("args"), scoped.operands, strict=True):
            if o in held:
                slot[held[o]] = p
            elif o in reads:
                incoming[p] = reads[o]
            elif o is barrier:
                self.barrier = [p]
        dropped: set[Op] = set()
        views = {v.results[0]: v.operands[0] for v in region.ops if v.name == "ref.at"}
        for o in region.ops:  # an input's copy into its buffer
            if o.name == "swap" and o.operands[-1] in incoming:
                slot[incoming[o.operands[-1]]] = views[o.operands[0]]
                dropped.add(o)
        defs = {r: o for o in region.ops for r in o.results}
        for r, result in zip(region.results, scoped.results, strict=True):  # an output's read
            write = next(o for o in block.ops if o.name == "swap" and o.operands[-1] is result)
            read = defs[r]
            slot[held[_viewed(block, write.operands[0])]] = views[read.operands[0]]
            dropped.add(read)
        self.aliases = tuple(call.params["input_output_aliases"])
        # an aliased output starts as its input: the copy goes, the two are one buffer here
        copies = [_copy_in(region, views, defs, slot.get(i), slot.get(len(call.invars) + o))
                  for i, o in self.aliases]  # fmt: skip
        dropped.update(op for pair in copies for op in pair)
        if sorted(slot) != list(range(n_io)) or not all(copies):
            raise MiniPallasError(
                "on_tpu cannot tell where the imported kernel keeps its operands (or starts "
                "an aliased output as its input)",
                op="pallas_call",
                loc=location(call),
                fix="this is a bug in minipallas; please report it with the kernel",
            )
        n_scratch = len(call.params["jaxpr"].invars) - n_io
        self.io = [slot[k] for k in range(n_io)]
        self.scratch = list(made[len(made) - n_scratch :])
        self.params = (*self.io, *self.scratch, *self.barrier)
        self.ops = tuple(o for o in region.ops if o not in dropped)


def _copy_in(region: Block, views: dict, defs: dict, src: Value, dst: Value) -> list[Op]:
    """The read of ``src``'s row and its write into ``dst``'s that start an aliased output as
    its input (``devices_kernel``; none found: []); on the chip the two are one buffer (XLA
    aliases them)."""
    for o in region.ops:
        read = defs.get(o.operands[-1]) if o.name == "swap" else None
        if read is not None and read.name == "get" and views.get(o.operands[0]) is dst:
            if views.get(read.operands[0]) is src:
                return [read, o]
    return []


def _only_scope(block: Block) -> Op:
    (scoped,) = [o for o in block.ops if o.name == "run_scoped"]
    return scoped


def _own_reads(block: Block, held: dict[Value, int]) -> dict[Value, int]:
    """The values in ``block`` read from a device's row of a held ref: which operand each is."""
    out = {}
    for o in block.ops:
        if o.name == "get" and _viewed(block, o.operands[0]) in held:
            out[o.results[0]] = held[_viewed(block, o.operands[0])]
    return out


def _viewed(block: Block, ref: Value) -> Value:
    """The ref a ``ref.at`` of ``block`` views (``ref`` itself when none made it)."""
    made = next((o for o in block.ops if o.name == "ref.at" and o.results[0] is ref), None)
    return ref if made is None else made.operands[0]


def _shard(t: RefType, rows: int, space: MemorySpace | None = None) -> RefType:
    return RefType(t.shape[rows:], t.dtype, t.memory_space if space is None else space)


def _whole(
    t: RefType, space: MemorySpace, what: str, *, rows: int, n_grid: int, prefetch: tuple
) -> TracedBlockSpec:
    shard = _shard(t, rows, space)
    index_map = whole_array_map(shard.ndim)
    return TracedBlockSpec(
        array=shard.value_type,
        block_shape=shard.shape,
        index_map=trace_index_map(index_map, n_grid, shard.ndim, what, scalar_prefetch=prefetch),
        ref_type=shard,
    )


def _space(aval: object) -> MemorySpace:
    """A block's memory space: the one it names, VMEM when it names none (upstream's)."""
    space = getattr(aval, "memory_space", None)
    if space is None or str(getattr(space, "value", space)).lower() == "default":
        return TPU_VMEM
    t = type_of(aval, "a block")
    return t.memory_space if isinstance(t, RefType) else TPU_VMEM


def shard_map_rules(eqn: jax_core.JaxprEqn, rules: dict[str, Any]) -> dict[str, Any]:
    """The kernel rules a ``shard_map`` equation's body runs with (module doc, 2); its kernels
    that span devices are imported and lowered here, before the body is traced (a shard_map
    of one's own cannot be traced inside another over the same mesh)."""
    modules = {
        id(call): device_module(call, eqn.params["mesh"])
        for call in equations(eqn.params["jaxpr"])
        if call.primitive.name == "pallas_call" and spans_devices(call)
    }
    if not modules:
        return rules
    other = rules.get("pallas_call", _bound)

    def run(call: jax_core.JaxprEqn, ins: Sequence[Any]) -> list[Any]:
        if id(call) not in modules:
            return other(call, ins)
        kernel, lowered = modules[id(call)]
        params = _mosaic_params(call.params.get("compiler_params"))
        sems = [_is_semaphore(v.aval) for v in call.outvars]
        dtypes = [np.int32 if s else v.aval.dtype for v, s in zip(call.outvars, sems, strict=True)]
        semaphore = tpu_custom_call.MemorySpace.SEMAPHORE_MEM
        spaces = tuple(semaphore if s else None for s in sems) if any(sems) else None
        return run_module(kernel, params, ins, dtypes, lowered, spaces)

    return {**rules, "pallas_call": run}


def _is_semaphore(aval: Any) -> bool:
    """Whether ``aval`` is a semaphore (array) a kernel passes to another: on the chip an int32
    word in semaphore memory, as upstream's custom call has it."""
    return jax.dtypes.issubdtype(aval.dtype, pl.semaphore) or jax.dtypes.issubdtype(
        aval.dtype, pltpu.dma_semaphore
    )


def _bound(call: jax_core.JaxprEqn, ins: Sequence[Any]) -> list[Any]:
    """A ``pallas_call`` bound as it is (rules that run none of their own)."""
    return list(call.primitive.bind(*ins, **call.params))


def _mosaic_params(params: Any) -> Any:
    """A pallas_call's TPU compiler params: the object, or a mapping's ``mosaic_tpu`` entry."""
    return params.get("mosaic_tpu") if isinstance(params, Mapping) else params
