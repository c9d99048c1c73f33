"""Import rules for kernels that span devices: a ``shard_map`` over several devices whose body
is one ``pallas_call`` with remote copies and signals (issue 47).

Upstream's guide "Distributed Computing in Pallas for TPUs" runs a kernel on every device of a
mesh inside ``jax.shard_map``; the kernels talk through ``pltpu.make_async_remote_copy(...,
device_id=..., device_id_type=...)``, ``pltpu.semaphore_signal(..., device_id=...)`` and the
barrier semaphore of their ``collective_id`` (``pltpu.get_barrier_semaphore()``). That is the
model minipallas already has for the cores of a mesh kernel (``mesh.py``), with the mesh's
devices as its programs, so such a ``shard_map`` imports as one ``mesh_call`` over the
shard_map's mesh:

1. each operand becomes an array with a *row per device* (the mesh's dims in front, then the
   shard: ``stacked``), the shard_map's ``in_specs`` read as upstream shards (a dimension split
   along the axes it names, replicated along the others); each result is put back together
   from its rows as ``out_specs`` say;
2. the ``mesh_call``'s body is the kernel's body over those rows, its scratch allocated by one
   ``run_scoped`` collective over every mesh axis with a row per device (so are the kernel's
   own ``pl.run_scoped`` allocations), and one more semaphore for the barrier semaphore;
3. every op reads and writes its device's own row (``mesh.own_row``); ``lax.axis_index`` of a
   mesh axis is the device's position; a remote copy writes the *target's* row of its
   destination and signals the target's row of its receive semaphore, a remote signal signals
   the target's row (``target_row``). A ``device_id`` is read as upstream reads it: with
   ``DeviceIdType.MESH`` one index per mesh axis (a tuple, or a dict naming some axes: the
   others keep the device's own position); with ``LOGICAL`` the device's row-major number in
   the mesh.

So ``collectives="simulate"`` runs the devices together (``ir/interpret/programs.py``) with
its races and deadlocks named, as for cores. The send side of a remote copy is kept as a
second copy of the source onto itself on the send semaphore, so ``wait_send`` takes back what
the start gave and the source counts as busy until then. Refused, with a reason: a body
that is anything but one whole-array ``pallas_call`` (a grid, blocks, scalar prefetch, ops
around it), mesh axes left automatic, and a result not split along every mesh axis.
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.interop.importer import mesh as mesh_rules
from minipallas.interop.importer.avals import type_of
from minipallas.interop.importer.engine import ImportScope, closed_parts, rule
from minipallas.interop.importer.kernel_call import _check_supported
from minipallas.ir.core import Function, Value
from minipallas.ir.types import SEMAPHORE, RefType
from minipallas.lowering.jax_private import core as jax_core
from minipallas.lowering.jax_private import pallas_core

_FIX = (
    "write the shard_map's body as one pallas_call over whole shards (no grid, no ops around "
    "it), every mesh axis manual"
)


def device_shard_map(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    """A ``shard_map`` over several devices as a ``mesh_call`` (module doc)."""
    names, sizes = mesh_rules.mesh_axes(scope, eqn.params["mesh"])
    manual = eqn.params.get("manual_axes", names)
    auto = [a for a in names if a not in {str(m) for m in manual}]
    if auto:
        raise scope.error(f"a shard_map over several devices with automatic axes {auto} "
                          "cannot be imported", fix=_FIX)  # fmt: skip
    jaxpr, consts = closed_parts(eqn.params["jaxpr"])
    call = _the_kernel(scope, jaxpr)
    mesh = (names, sizes)
    stacked = [
        _split(scope, scope.read(a), spec, v.aval.shape, mesh)
        for a, spec, v in zip(eqn.invars, eqn.params["in_specs"], jaxpr.invars, strict=True)
    ]
    position = {v: k for k, v in enumerate(jaxpr.invars)}
    ins = [stacked[position[_through_pvary(jaxpr, a)]] for a in call.invars]
    gm = call.params["grid_mapping"]
    n_out = gm.num_outputs
    name = scope.importer.unique_name(str(call.params.get("name") or "kernel") + "_device")
    body = _body(scope, name, call, [v.type for v in ins], mesh)
    aliases = tuple(sorted((int(i), int(o)) for i, o in call.params["input_output_aliases"]))
    op = scope.emit_op("mesh_call", ins, callee=body, axes=names, shape=sizes, aliases=aliases)
    results = dict(zip(call.outvars, op.results[:n_out], strict=True))
    outs = []
    for v, spec in zip(jaxpr.outvars, eqn.params["out_specs"], strict=True):
        if v not in results:
            raise scope.error("a shard_map result that is not the pallas_call's", fix=_FIX)
        outs.append(_join(scope, results[v], spec, mesh))
    return outs


def _the_kernel(scope: ImportScope, jaxpr: jax_core.Jaxpr) -> jax_core.JaxprEqn:
    """The body's one ``pallas_call`` (``pvary``s around it are type facts)."""
    calls = [e for e in jaxpr.eqns if e.primitive.name == "pallas_call"]
    others = {e.primitive.name for e in jaxpr.eqns} - {"pallas_call", "pvary"}
    if len(calls) != 1 or others or jaxpr.constvars:
        raise scope.error(
            f"minipallas imports a shard_map over several devices whose body is one "
            f"pallas_call; this one holds {sorted(e.primitive.name for e in jaxpr.eqns)}",
            fix=_FIX,
        )
    call = calls[0]
    _check_supported(call)  # its parameters, held to the pallas_call rule's declaration
    gm = call.params["grid_mapping"]
    if any(int(n) != 1 for n in gm.grid) or gm.num_index_operands or gm.num_dynamic_grid_bounds:
        raise scope.error("a kernel that spans devices imports without a grid or scalar "
                          f"prefetch, got grid {tuple(gm.grid)}", fix=_FIX)  # fmt: skip
    for bm in gm.block_mappings[: gm.num_inputs + gm.num_outputs]:
        whole = all(
            isinstance(d, pallas_core.Blocked) and int(d.block_size) == n
            for d, n in zip(bm.block_shape, bm.array_aval.shape, strict=True)
        )
        if not whole:
            raise scope.error(
                f"a kernel that spans devices imports over whole shards, got block "
                f"{bm.block_shape} of {bm.array_aval.shape}",
                fix=_FIX,
            )
    return call


def _through_pvary(jaxpr: jax_core.Jaxpr, atom: jax_core.Atom) -> jax_core.Atom:
    for e in jaxpr.eqns:
        if e.primitive.name == "pvary" and atom in e.outvars:
            return _through_pvary(jaxpr, e.invars[e.outvars.index(atom)])
    return atom


def _axes_of(entry: object) -> tuple[str, ...]:
    if entry is None:
        return ()
    return tuple(str(a) for a in (entry if isinstance(entry, tuple) else (entry,)))


def _split(scope: ImportScope, x: Value, spec: object, shard: tuple, mesh: tuple) -> Value:
    """``x`` as an array with a row per device: ``(*mesh sizes, *shard)`` (module doc, 1)."""
    names, sizes = mesh
    size = dict(zip(names, sizes, strict=True))
    entries = [*tuple(spec), *[None] * (len(shard) - len(tuple(spec)))]
    shape, where = [], {}  # the split shape; each named axis's dim in it
    local = []
    for entry, n in zip(entries, shard, strict=True):
        for a in _axes_of(entry):
            where[a] = len(shape)
            shape.append(size[a])
        local.append(len(shape))
        shape.append(n)
    if tuple(shape) != x.type.shape:
        x = scope.emit("reshape", [x], shape=tuple(shape))
    named = [a for a in names if a in where]
    perm = (*(where[a] for a in named), *local)
    if perm != tuple(range(len(perm))):
        x = scope.emit("transpose", [x], permutation=perm)
    full = (*sizes, *shard)
    if len(named) != len(names):  # replicated along the axes the spec does not name
        dims = (*(names.index(a) for a in named), *range(len(names), len(full)))
        x = scope.emit("broadcast_in_dim", [x], shape=full, dims=dims)
    return x


def _join(scope: ImportScope, x: Value, spec: object, mesh: tuple) -> Value:
    """The array ``out_specs`` makes of a result's rows (inverse of ``_split``)."""
    names, sizes = mesh
    shard = x.type.shape[len(names) :]
    entries = [*tuple(spec), *[None] * (len(shard) - len(tuple(spec)))]
    order = [a for e in entries for a in _axes_of(e)]
    if sorted(order) != sorted(names):
        raise scope.error(
            f"a shard_map result over several devices must be split along every mesh axis "
            f"{names}, got {spec}",
            fix="name every mesh axis in the out_specs (a replicated result is not built yet)",
        )
    perm: list[int] = []
    shape: list[int] = []
    for d, entry in enumerate(entries):
        perm += [names.index(a) for a in _axes_of(entry)]
        perm.append(len(names) + d)
        shape.append(shard[d] * _product(sizes[names.index(a)] for a in _axes_of(entry)))
    if tuple(perm) != tuple(range(len(perm))):
        x = scope.emit("transpose", [x], permutation=tuple(perm))
    return scope.emit("reshape", [x], shape=tuple(shape))


def _product(ns: object) -> int:
    out = 1
    for n in ns:
        out *= n
    return out


def _body(
    scope: ImportScope, name: str, call: jax_core.JaxprEqn, in_types: list, mesh: tuple
) -> Function:
    """``@name(*in_rows, *out_rows)``: the kernel body over each device's rows (module doc, 2)."""
    importer, (names, sizes) = scope.importer, mesh
    jaxpr, gm = call.params["jaxpr"], call.params["grid_mapping"]
    n_io = gm.num_inputs + gm.num_outputs
    io_types = [*in_types]
    for k, v in enumerate(call.outvars):
        t = type_of(v.aval, f"output {k}")
        io_types.append(RefType((*sizes, *t.shape), t.dtype))
    io = [Value(RefType(t.shape, t.dtype)) for t in io_types]
    scratch = []
    for k, v in enumerate(jaxpr.invars[n_io:]):
        t = type_of(v.aval, f"scratch {k}")
        scratch.append(RefType((*sizes, *t.shape), t.dtype, t.memory_space))
    barrier = RefType(tuple(sizes), "int32", SEMAPHORE)  # the collective_id's
    inner = ImportScope(importer)
    with inner.located():
        allocs = [Value(t) for t in (*scratch, barrier)]
        params = [Value(v.type) for v in io]
        region = inner.child()
        enclosing = importer.mesh, importer.signals_cores, importer.device_barrier
        importer.mesh, importer.signals_cores, importer.device_barrier = mesh, True, allocs[-1]
        try:
            region.run(jaxpr, [*params, *allocs[:-1]])
        finally:
            importer.mesh, importer.signals_cores, importer.device_barrier = enclosing
        block = region.builder.block([*allocs, *params], [])
        inner.emit_op("run_scoped", io, [block], collective_axes=names)
    return Function(name, inner.builder.block(io, []))


# --- what a device's kernel uses -------------------------------------------------------------


def device_indices(
    scope: ImportScope, device_id: object, id_type: object, what: str
) -> list[Value]:
    """The target device's position along each mesh axis, from an op's ``device_id`` as
    upstream reads it under ``device_id_type`` (module doc, 3)."""
    names, sizes = scope.importer.mesh
    logical = "LOGICAL" in str(id_type).upper()
    if isinstance(device_id, dict):
        if logical:
            raise scope.error(f"{what}: a dict device_id with DeviceIdType.LOGICAL",
                              fix="give a LOGICAL device id as one int")  # fmt: skip
        given = {str(a): i for a, i in device_id.items()}
        unknown = sorted(set(given) - set(names))
        if unknown:
            raise scope.error(f"{what}: device_id names axes {unknown}, not axes of the mesh "
                              f"{names}", fix=f"name axes of {names}")  # fmt: skip
        return [
            scope.read(given[a]) if a in given else mesh_rules._axis_index(scope, a) for a in names
        ]
    ids = list(device_id) if isinstance(device_id, tuple | list) else [device_id]
    if logical:
        if len(ids) != 1:
            raise scope.error(f"{what}: a LOGICAL device_id is one int, got {len(ids)}",
                              fix="use DeviceIdType.MESH for one index per mesh axis")  # fmt: skip
        linear, out = scope.read(ids[0]), []
        for k in range(len(names)):
            stride = scope.constant(_product(sizes[k + 1 :]), "int32")
            pos = scope.emit("div", [linear, stride]) if k + 1 < len(names) else linear
            out.append(scope.emit("rem", [pos, scope.constant(sizes[k], "int32")]))
        return out
    if len(ids) != len(names):
        raise scope.error(
            f"{what}: a MESH device_id gives one index per mesh axis {names}, got {len(ids)}",
            fix="pass a tuple with one index per mesh axis, or a dict naming the axes",
        )
    return [scope.read(i) for i in ids]


def target_row(scope: ImportScope, atom: jax_core.Atom, indices: list[Value], what: str) -> Value:
    """The target device's row of the per-device allocation or operand ``atom``."""
    value = scope.read(atom)
    if not mesh_rules.has_rows(scope, atom, value):
        raise scope.error(
            f"{what} targets a ref with no row per device",
            fix="copy into the kernel's operands or scratch (scratch_shapes, run_scoped)",
        )
    return mesh_rules._row(scope, value, indices)


@rule("get_barrier_semaphore", params={})
def get_barrier_semaphore(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    """The kernel's barrier semaphore (its ``collective_id``'s): a row per device."""
    barrier = scope.importer.device_barrier
    if barrier is None:
        raise scope.error(
            "get_barrier_semaphore is imported in a kernel that spans devices only",
            fix="call the pallas_call inside jax.shard_map over a mesh of several devices, "
            "with pltpu.CompilerParams(collective_id=...)",
        )
    return [barrier]
