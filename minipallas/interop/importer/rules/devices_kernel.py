"""A ``pallas_call`` in the program of a device (``devices``), and what a kernel that spans
devices uses to reach another device: ``device_indices``, ``target_row``, the barrier semaphore.

Upstream runs the kernel on every device at once; a remote copy or signal lands in the
*target's* copy of a buffer (the same buffer on another chip). So every buffer the kernel sees
has a row per device, made by one ``run_scoped`` collective over every mesh axis around the
kernel's body:

1. an input that is a shard_map operand is the ``mesh_call``'s own ref (it has its rows
   already; a kernel that writes it writes the operand, as on the chip, where an input is the
   caller's buffer); any other input (made by ops before the kernel) is a fresh buffer into
   whose own row each device stores its value. An output that is a result of the shard_map
   is written straight into the ``mesh_call``'s result; any other into a fresh buffer whose
   own row is read back after the kernel. An aliased output (``input_output_aliases``)
   starts as its input;
2. scratch (``scratch_shapes``, nested as upstream's pytree) and the kernel's own
   ``pl.run_scoped`` allocations get a row per device too (``mesh.allocation_type``); the barrier
   semaphore is its ``collective_id``'s (``devices``: one per id for the whole body);
3. every op reads and writes its device's own row (``mesh.own_row``); ``lax.axis_index`` of a
   mesh axis is the device's position; a remote copy writes the *target's* row of its
   destination and signals the target's row of its receive semaphore, a remote signal signals
   the target's row (``target_row``). A ``device_id`` is read as upstream reads it: with
   ``DeviceIdType.MESH`` one index per mesh axis (a tuple, or a dict naming some axes, a key
   of several axes by their row-major number: the others keep the device's own position);
   with ``LOGICAL`` the device's row-major number.

A kernel over whole shards (no grid, every block its whole operand) imports into the
program directly; one with a grid, blocks or scalar prefetch runs its grid as a loop
(``devices_grid``).
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.interop.importer.avals import type_of
from minipallas.interop.importer.devices_threading import thread
from minipallas.interop.importer.engine import ImportScope, rule
from minipallas.interop.importer.rules import mesh as mesh_rules
from minipallas.interop.importer.rules.devices_grid import check_blocks, is_whole, run_grid
from minipallas.interop.importer.rules.kernel_call import _candidates, _check_supported
from minipallas.ir.core import Value
from minipallas.ir.indexing import full
from minipallas.ir.types import ANY, RefType
from minipallas.lowering.compat.jax_private import core as jax_core

_FIX = (
    "write the kernel over whole shards: no grid, BlockSpec(memory_space=...) for each "
    "operand, and copy blocks yourself (make_async_copy)"
)


def collective_id(eqn: jax_core.JaxprEqn) -> int | None:
    """The ``collective_id`` of a ``pallas_call``'s Mosaic compiler params, or None."""
    for params in _candidates(eqn.params.get("compiler_params") or {}):
        cid = getattr(params, "collective_id", None)
        if cid is not None:
            return int(cid)
    return None


def own(scope: ImportScope, ref: Value) -> Value:
    """The device's own row of ``ref`` (a ref with a row per device)."""
    names = scope.importer.devices.mesh[0]
    return mesh_rules._row(scope, ref, [mesh_rules._axis_index(scope, a) for a in names])


def read_own(scope: ImportScope, ref: Value) -> Value:
    row = own(scope, ref)
    return scope.emit("get", [row], indexer=full(row.type.shape))


def write_own(scope: ImportScope, ref: Value, value: Value) -> None:
    row = own(scope, ref)
    scope.emit("swap", [row, value], indexer=full(row.type.shape))


def device_kernel(scope: ImportScope, eqn: jax_core.JaxprEqn) -> list[Value]:
    """``eqn`` (a ``pallas_call`` in a device's program) as a ``run_scoped`` over its buffers'
    rows holding its body (module doc); returns the values of its outputs."""
    devices = scope.importer.devices
    _check_supported(eqn)  # its parameters, held to the pallas_call rule's declaration
    gm = eqn.params["grid_mapping"]
    check_blocks(scope, gm)
    jaxpr, sizes = eqn.params["jaxpr"], devices.mesh[1]
    n_in = len(eqn.invars)
    outer: list[Value] = []  # what the region takes from the device's program

    def passed(v: Value) -> int:
        if not any(v is o for o in outer):
            outer.append(v)
        return next(k for k, o in enumerate(outer) if o is v)

    allocs: list[RefType] = []
    slots = []  # per operand: ("ref", outer k) or ("buffer", alloc k, outer k of its value)
    mappings = [None] * gm.num_index_operands + list(gm.block_mappings)
    for k, var in enumerate(jaxpr.invars[: n_in + len(eqn.outvars)]):
        atom = eqn.invars[k] if k < n_in else eqn.outvars[k - n_in]
        ref = devices.ref_of(atom) if k < n_in else devices.result_ref(atom)
        if ref is not None:
            slots.append(("ref", passed(ref), None))
            continue
        t = type_of(atom.aval, f"operand {k}")  # the whole array, in a whole block's space
        whole = mappings[k] is None or is_whole(mappings[k])
        space = type_of(var.aval).memory_space if whole else ANY
        allocs.append(RefType((*sizes, *t.shape), t.dtype, space))
        value = passed(devices.value(scope, atom)) if k < n_in else None
        slots.append(("buffer", len(allocs) - 1, value))
    n_io = len(slots)
    for k, var in enumerate(jaxpr.invars[n_io:]):
        t = type_of(var.aval, f"scratch {k}")
        allocs.append(RefType((*sizes, *t.shape), t.dtype, t.memory_space))
    n_scratch = len(jaxpr.invars) - n_io
    cid = collective_id(eqn)
    barrier = passed(devices.barriers[cid]) if cid in devices.barriers else None

    params = [Value(v.type) for v in outer]
    made = [Value(t) for t in allocs]
    inner = scope.child()
    refs = [params[a] if kind == "ref" else made[a] for kind, a, _ in slots]
    for (kind, _, value), ref in zip(slots[:n_in], refs[:n_in], strict=True):
        if kind == "buffer":
            write_own(inner, ref, params[value])
    for i, o in eqn.params["input_output_aliases"]:
        source = refs[int(i)]
        write_own(inner, refs[n_in + int(o)], read_own(inner, source))
    enclosing = devices.kernel, devices.barrier, scope.importer.signals_cores
    devices.kernel, devices.barrier = True, None if barrier is None else params[barrier]
    scope.importer.signals_cores = True
    scratch = made[len(made) - n_scratch :]
    try:
        if gm.grid or not all(m is not None and is_whole(m) for m in mappings):
            run_grid(inner, eqn, refs, scratch, devices.barrier)
        else:
            inner.run(jaxpr, [*refs, *scratch])
    finally:
        devices.kernel, devices.barrier, scope.importer.signals_cores = enclosing
    buffered = [k for k, s in enumerate(slots[n_in:]) if s[0] == "buffer"]
    results = [read_own(inner, refs[n_in + k]) for k in buffered]
    block = inner.builder.block([*made, *params], results)
    if barrier is not None:  # into the regions that ask for it (pl.when, loops, run_scoped)
        block = thread(block, [params[barrier]])
    op = scope.emit_op("run_scoped", outer, [block], collective_axes=devices.mesh[0])
    outs: list[Value | None] = [None] * len(eqn.outvars)
    for k, value in zip(buffered, op.results, strict=True):
        outs[k] = value
    for k, (kind, a, _) in enumerate(slots[n_in:]):
        if kind == "ref":
            devices.wrote(eqn.outvars[k], outer[a])
    return outs  # None: an output held in the mesh_call's result (``Devices.wrote``)


# --- what a device's kernel uses -------------------------------------------------------------


def device_indices(
    scope: ImportScope, device_id: object, id_type: object, what: str
) -> list[Value]:
    """The target device's position along each mesh axis, from an op's ``device_id`` as
    upstream reads it under ``device_id_type`` (module doc, 3); then, where a dict names an
    axis of the body's mesh kernel, the target core's along each core axis (``target_row``)."""
    names, sizes = scope.importer.devices.mesh
    logical = "LOGICAL" in str(id_type).upper()
    if isinstance(device_id, dict):
        if logical:
            raise scope.error(f"{what}: a dict device_id with DeviceIdType.LOGICAL",
                              fix="give a LOGICAL device id as one int")  # fmt: skip
        every = scope.importer.mesh[0]
        size, given = dict(zip(*scope.importer.mesh, strict=True)), {}
        for key, index in device_id.items():
            axes = tuple(map(str, key)) if isinstance(key, tuple) else (str(key),)
            unknown = [a for a in axes if a not in size]
            if unknown:
                raise scope.error(f"{what}: device_id names axes {unknown}, not axes of the "
                                  f"mesh {every}", fix=f"name axes of {every}")  # fmt: skip
            positions = _unflatten(scope, scope.read(index), [size[a] for a in axes])
            given.update(zip(axes, positions, strict=True))
        axes = every if any(a not in names for a in given) else names
        return [given[a] if a in given else mesh_rules._axis_index(scope, a) for a in axes]
    ids = list(device_id) if isinstance(device_id, tuple | list) else [device_id]
    if logical:
        if len(ids) != 1:
            raise scope.error(f"{what}: a LOGICAL device_id is one int, got {len(ids)}",
                              fix="use DeviceIdType.MESH for one index per mesh axis")  # fmt: skip
        return _unflatten(scope, scope.read(ids[0]), sizes)
    if len(ids) != len(names):
        raise scope.error(
            f"{what}: a MESH device_id gives one index per mesh axis {names}, got {len(ids)}",
            fix="pass a tuple with one index per mesh axis, or a dict naming the axes",
        )
    return [scope.read(i) for i in ids]


def _unflatten(scope: ImportScope, linear: Value, sizes: Sequence[int]) -> list[Value]:
    """The position along each of several axes of the row-major number ``linear`` (upstream's
    LOGICAL id, or a dict key naming several axes)."""
    out = []
    for k, n in enumerate(sizes):
        stride = 1
        for m in sizes[k + 1 :]:
            stride *= m
        pos = linear
        if stride != 1:
            pos = scope.emit("div", [linear, scope.constant(stride, "int32")])
        out.append(pos if k == 0 else scope.emit("rem", [pos, scope.constant(n, "int32")]))
    return out


def target_row(scope: ImportScope, atom: jax_core.Atom, indices: list[Value], what: str) -> Value:
    """The target device's row of the per-device allocation or operand ``atom``; of memory
    each core has its own of (a mesh kernel's, ``devices_cores``), the row of the core
    ``indices`` name after the device's (a ``device_id`` dict naming a core axis), else of the
    same core."""
    value = scope.read(atom)
    axes = mesh_rules.row_axes(scope, atom, value)
    if axes is None:
        raise scope.error(
            f"{what} targets a ref with no row per device",
            fix="copy into the kernel's operands or scratch (scratch_shapes, run_scoped)",
        )
    n = len(scope.importer.devices.mesh[0])
    core = indices[n:] or [mesh_rules._axis_index(scope, a) for a in axes[n:]]
    return mesh_rules._row(scope, value, [*indices[:n], *core][: len(axes)])


@rule("get_barrier_semaphore", params={})
def get_barrier_semaphore(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    """The kernel's barrier semaphore (its ``collective_id``'s): a row per device."""
    devices = scope.importer.devices
    if not mesh_rules.in_device_kernel(scope):
        raise scope.error(
            "get_barrier_semaphore is imported in a kernel that spans devices only",
            fix="call the pallas_call inside jax.shard_map over a mesh of several devices, "
            "with pltpu.CompilerParams(collective_id=...)",
        )
    if devices.barrier is None:
        raise scope.error(
            "get_barrier_semaphore in a kernel with no collective_id",
            fix="pass compiler_params=pltpu.CompilerParams(collective_id=0) to the pallas_call",
        )
    return [devices.barrier]
