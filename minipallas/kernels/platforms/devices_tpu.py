"""Kernels that span devices on the chip (issue 47): a ``pallas_call`` in a ``jax.shard_map``
with remote copies, remote signals or the barrier semaphore, run by ``on_tpu`` as minipallas's
own Mosaic module on every device, the shard_map kept around it.

Where the device's kernel comes from: the importer's ``mesh_call`` of a shard_map
(``interop/importer/devices.py``, ``devices_kernel.py``), the program every device runs over
buffers with a row per device, which the simulator runs too; not the ``pallas_call`` imported
as a kernel of its own (``kernel_from_eqn``): minipallas's IR has no remote copy, and the
importer reads one as a write into the target's row. The Mosaic rules for one device
(``lowering/tpu/rules/remote.py``) read those rows back into upstream's remote ops. So:

1. ``device_kernel(call, mesh)`` imports a ``pallas_call`` of the body, alone in a shard_map
   over the mesh, as that ``mesh_call``, and makes the ``Kernel`` of one device: no grid (a
   grid over whole blocks is the loop the import makes of it); its operands the shards, whole
   blocks in the memory space the pallas_call gives them (VMEM when it names none, as
   upstream); its scratch the kernel's ``scratch_shapes``; its body the kernel's part of the
   ``mesh_call``'s body, over row-per-device refs, with the barrier semaphore last; upstream's
   ``mesh_axes`` metadata (the mesh axes the kernel names);
2. ``shard_map_rules(eqn, rules)``: the rules ``on_tpu`` runs a shard_map's body with: a
   ``pallas_call`` that spans devices (``spans_devices``) as that kernel's module, made once
   (``device_module``), in the custom call of its compiler params (``collective_id``
   among them), any other by ``rules``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import PartitionSpec as P

from minipallas.interop.importer.avals import type_of
from minipallas.interop.importer.devices import device_shard_map
from minipallas.interop.importer.devices_cores import equations
from minipallas.interop.importer.devices_grid import is_whole
from minipallas.interop.importer.devices_kernel import collective_id
from minipallas.interop.importer.engine import Importer, ImportScope, location
from minipallas.ir.core import Block, Function, Op, Value
from minipallas.ir.errors import MiniPallasError
from minipallas.ir.kernel_spec import Kernel, TracedBlockSpec
from minipallas.ir.types import TPU_VMEM, MemorySpace, RefType
from minipallas.kernels.platforms.mosaic import run_module
from minipallas.kernels.spec.tracing import trace_index_map, whole_array_map
from minipallas.lowering.jax_private import core as jax_core
from minipallas.lowering.lowered import Lowered
from minipallas.lowering.tpu.device_context import Mesh
from minipallas.lowering.tpu.devices import lower_device_kernel

__all__ = ["device_kernel", "device_module", "equations", "shard_map_rules", "spans_devices"]

# what makes a kernel's body reach other devices (a copy's or signal's device_id, too)
_DEVICE_PRIMITIVES = ("get_barrier_semaphore", "axis_index")


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

    def alone(*shards: Any) -> Any:
        return call.primitive.bind(*shards, **call.params)

    def spec(v: jax_core.Var) -> P:
        return P(axes) if v.aval.shape else P()

    whole = [jax.ShapeDtypeStruct((v.aval.shape[0] * n, *v.aval.shape[1:]) if v.aval.shape
                                  else (), v.aval.dtype) for v in call.invars]  # fmt: skip
    ins, outs = tuple(spec(v) for v in call.invars), [spec(v) for v in call.outvars]
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
    return _one_device(op, inner, names), names


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
    """On the chip, a kernel that spans devices runs over whole shards of arrays (its device's
    program is one Mosaic kernel without windows; a grid over whole blocks is the loop the
    import makes of it), and names a collective_id only when it uses the barrier semaphore (or
    allows it without)."""
    gm = call.params["grid_mapping"]
    blocks = gm.block_mappings[: gm.num_inputs + gm.num_outputs]
    for v in (*call.invars, *call.outvars):
        if getattr(v.aval.dtype, "kind", "") not in tuple("biuf"):
            raise MiniPallasError(
                "on_tpu runs a kernel that spans devices over arrays, got an operand or result "
                f"{v.aval.str_short()}",
                op="pallas_call",
                fix="allocate semaphores in the kernel (scratch_shapes); a semaphore passed "
                "from one kernel to the next runs in the simulator (collectives='simulate')",
            )
    if gm.num_index_operands or not all(is_whole(bm) for bm in blocks):
        raise MiniPallasError(
            "on_tpu runs a kernel that spans devices over whole shards (each block its whole "
            f"operand) without scalar prefetch, got grid {tuple(gm.grid)} with blocks "
            f"{[tuple(bm.block_shape) for bm in blocks]}",
            op="pallas_call",
            fix="give the kernel whole-shard blocks (BlockSpec(memory_space=...)) and copy "
            "windows with make_async_copy; the simulator runs the blocked kernel "
            "(collectives='simulate')",
        )
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
            fix="drop collective_id from the compiler params, or use the barrier semaphore "
            "(pltpu.get_barrier_semaphore())",
        )


def _one_device(op: Op, call: jax_core.JaxprEqn, mesh: tuple) -> Kernel:
    """The kernel of one device for ``call``, imported alone as ``op`` (a ``mesh_call`` whose
    operands and results are the kernel's): the body of the collective ``run_scoped`` that holds
    the kernel (``_Slots``), over the operands' rows, then the scratch's, then the barrier
    semaphore's."""
    gm = call.params["grid_mapping"]
    name = call.params["jaxpr"].debug_info.func_name or "kernel"
    if call.params["input_output_aliases"]:
        raise MiniPallasError(
            "on_tpu runs a kernel that spans devices without input_output_aliases",
            op="pallas_call",
            fix="write the result into an output of its own",
        )
    slots = _Slots(op, call)
    body = Function(name, Block(slots.params, slots.ops, ()))
    rows = len(mesh[1])
    specs = [
        _whole(p.type, rows, _space(bm.transformed_block_aval), f"{name} operand {k}")
        for k, (p, bm) in enumerate(zip(slots.io, gm.block_mappings, strict=True))
    ]
    effects = call.params["jaxpr"].effects  # upstream reads the kernel's (its axis_index)
    axes = sorted({str(e.name) for e in effects if isinstance(e, jax_core.NamedAxisEffect)}
                  & set(mesh[0]))  # fmt: skip
    return Kernel(
        name=name,
        body=body,
        grid=(),
        in_specs=tuple(specs[: gm.num_inputs]),
        out_specs=tuple(specs[gm.num_inputs :]),
        scratch_types=tuple(_shard(p.type, rows) for p in slots.scratch),
        metadata=(("mesh_axes", json.dumps(axes)),) if axes else (),
    )


class _Slots:
    """Where the imported kernel keeps each of its operands (``devices_kernel.device_kernel``):
    the ``mesh_call``'s own ref, passed into the kernel's ``run_scoped``, or a buffer that
    ``run_scoped`` allocates, an input copied into it first and an output read back after. On
    the chip the operand is the buffer: those copies go (``ops``), and ``params`` are the
    kernel's operands, scratch and barrier semaphore as the region holds them."""

    def __init__(self, op: Op, call: jax_core.JaxprEqn) -> None:
        gm = call.params["grid_mapping"]
        n_io = gm.num_inputs + gm.num_outputs
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
        if sorted(slot) != list(range(n_io)):
            raise MiniPallasError(
                "on_tpu cannot tell where the imported kernel keeps its operands",
                op="pallas_call",
                fix="this is a bug in minipallas; please report it with the kernel",
            )
        n_scratch = len(call.params["jaxpr"].invars) - n_io - gm.num_index_operands
        self.io = [slot[k] for k in range(n_io)]
        self.scratch = list(made[len(made) - n_scratch :])
        self.params = (*self.io, *self.scratch, *self.barrier)
        self.ops = tuple(o for o in region.ops if o not in dropped)


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


def _whole(t: RefType, rows: int, space: MemorySpace, what: str) -> TracedBlockSpec:
    shard = _shard(t, rows, space)
    return TracedBlockSpec(
        array=shard.value_type,
        block_shape=shard.shape,
        index_map=trace_index_map(whole_array_map(shard.ndim), 0, shard.ndim, what),
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
        dtypes = [v.aval.dtype for v in call.outvars]
        return run_module(kernel, params, ins, dtypes, lowered.module)

    return {**rules, "pallas_call": run}


def _bound(call: jax_core.JaxprEqn, ins: Sequence[Any]) -> list[Any]:
    """A ``pallas_call`` bound as it is (rules that run none of their own)."""
    return list(call.primitive.bind(*ins, **call.params))


def _mosaic_params(params: Any) -> Any:
    """A pallas_call's TPU compiler params: the object, or a mapping's ``mosaic_tpu`` entry."""
    return params.get("mosaic_tpu") if isinstance(params, Mapping) else params
