"""Import rules for upstream's mesh kernels: ``mpmd_map`` (``pl.kernel``, ``pl.core_map``) as a
``mesh_call`` (``ir/opset/mesh.py``), and what their bodies use (issue 38).

A mesh kernel runs its body once per core of a mesh (``pltpu.create_tensorcore_mesh("core",
num_cores=2)``); the body sees the whole operands and its core's position
(``lax.axis_index("core")``). That is a kernel whose grid is the mesh and whose axes are named,
so it imports onto minipallas's one model of programs that run together
(docs/guides/collectives.md):

- ``mpmd_map`` over one mesh becomes ``mesh_call @body(inputs), mesh (names) (sizes)``;
  ``scratch_types`` become ``run_scoped`` allocations around the body: ``VMEM_SHARED`` ones
  collective over every mesh axis (one buffer the cores share), the others each core's own;
  ``input_output_aliases`` carry over; ``compiler_params`` are a Mosaic matter and are kept
  by ``kernel_from_mesh_eqn`` for the TPU;
- ``axis_index`` / ``axis_size`` of mesh axes become ``program_id`` of that grid axis /
  constants (the front end's ``axis_index`` is the same op once its kernel is bound);
- memory of which each core has its own (VMEM, SMEM, semaphores) allocated by a collective
  ``run_scoped`` gets a *row per core*: the allocation's type gains the mesh's dims in front,
  and each op on it acts on its core's row, found from ``program_id``. That is how a
  semaphore signal to another core (``semaphore_signal(sem, 1, core_index=k)``) is written in
  the shared model: it signals row ``k``. ``VMEM_SHARED`` (and HBM) allocations are shared;
- ``pltpu.core_barrier(sem, core_axis_name=...)`` (the equations it traces in its
  ``"sync_cores"`` scope: a signal to every other core, then a wait for ``cores - 1``) becomes a
  ``barrier`` over the axis, which is what it does: its signals and its wait cancel on every
  core. So the simulator names the core that skips it, and the pure program cuts there.

Refs a kernel is given (``jax.new_ref``) are outputs too, aliased to their contents and written
back. Refused, each naming the primitive: several meshes (MPMD bodies), meshes of other JAX
functions (``external_meshes``), remote copies and signals to other devices, and whatever
primitive a GPU mesh's body uses that minipallas has no rule for.
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.interop.importer.avals import JaxprImportError, type_of
from minipallas.interop.importer.engine import (
    NAMED_SCOPES,
    Importer,
    ImportScope,
    closed_parts,
    rule,
)
from minipallas.interop.importer.params import KERNEL_HINTS, READ, NoEffect
from minipallas.ir.core import Function, Value
from minipallas.ir.indexing import Dyn, Int, Slice, full
from minipallas.ir.types import (
    DMA_SEMAPHORE,
    SEMAPHORE,
    TPU_SMEM,
    TPU_VMEM,
    TPU_VMEM_SHARED,
    RefType,
    Type,
)
from minipallas.kernels.collective import mesh as _discharge_rule  # noqa: F401  (mesh_call's)
from minipallas.lowering.compat.jax_private import core as jax_core
from minipallas.lowering.compat.jax_private import state_types, tree_util

# memory spaces of which each core has its own: a collective allocation gets a row per core
PER_CORE = (TPU_VMEM, TPU_SMEM, SEMAPHORE, DMA_SEMAPHORE)


@rule(
    "mpmd_map",
    params={
        "meshes": READ,
        "jaxprs": READ,
        "input_output_aliases": READ,
        "external_meshes": READ,
        "out_avals": READ,  # as the equation's outvars
        "name": READ,
        "compiler_params": READ,  # Mosaic's: kernel_from_mesh_eqn keeps them for the TPU
        **KERNEL_HINTS,
    },
)
def mpmd_map(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    params = eqn.params
    if len(params["meshes"]) != 1:
        raise scope.error(
            f"a kernel over {len(params['meshes'])} meshes (pl.kernel(body=[...], mesh=[...])) "
            "cannot be imported",
            fix="write one body over one mesh",
        )
    if params.get("external_meshes"):
        raise scope.error("a kernel over the meshes of other JAX functions cannot be imported")
    args = [scope.read(a) for a in eqn.invars]
    refs = [k for k, a in enumerate(args) if _is_ref(a)]  # read and written: outputs too
    n_out = len(eqn.outvars)
    mesh = mesh_axes(scope, params["meshes"][0])
    name = scope.importer.unique_name(str(params.get("name") or "kernel") + "_core")
    body = _body(scope.importer, name, params["jaxprs"][0], len(args), n_out, mesh,
                 ref_outputs=refs)  # fmt: skip
    aliases = [(int(i), int(o)) for i, o in params["input_output_aliases"].items()]
    aliases += [(k, n_out + j) for j, k in enumerate(refs)]
    values = [scope.emit("get", [a], indexer=full(a.type.shape)) if _is_ref(a) else a
              for a in args]  # fmt: skip
    op = scope.emit_op("mesh_call", values, callee=body, axes=mesh[0], shape=mesh[1],
                       aliases=tuple(sorted(aliases)))  # fmt: skip
    for k, result in zip(refs, op.results[n_out:], strict=True):
        scope.emit("swap", [args[k], result], indexer=full(args[k].type.shape))
    return list(op.results[:n_out])


@rule(
    "core_map",
    params={
        "jaxpr": READ,
        "mesh": READ,
        "name": READ,
        "compiler_params": READ,  # Mosaic's: kernel_from_mesh_eqn keeps them for the TPU
        "debug_info": NoEffect("where the body was traced, for jax's messages"),
        **KERNEL_HINTS,
    },
)
def core_map(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    """``pl.core_map(mesh)(f)``: ``f`` on every core over the refs it closes over (the
    equation's operands). Imported as a ``mesh_call`` over their contents, each an output that
    starts as its input (an alias), whose results are written back into the refs; the arrays
    it closes over are inputs too, each read whole where the body starts."""
    jaxpr, operands = eqn.params["jaxpr"], [scope.read(a) for a in eqn.invars]
    ref_vars = [v for v, x in zip(jaxpr.constvars, operands, strict=True) if _is_ref(x)]
    array_vars = [v for v, x in zip(jaxpr.constvars, operands, strict=True) if not _is_ref(x)]
    refs, arrays = [x for x in operands if _is_ref(x)], [x for x in operands if not _is_ref(x)]
    mesh = mesh_axes(scope, eqn.params["mesh"])
    name = scope.importer.unique_name(str(eqn.params.get("name") or "core_map") + "_core")
    n_in = len(arrays) + len(refs)
    body = _body(scope.importer, name, jaxpr, n_in, 0, mesh, [*array_vars, *ref_vars],
                 ref_outputs=range(len(arrays), n_in))  # fmt: skip
    values = [scope.emit("get", [r], indexer=full(r.type.shape)) for r in refs]
    aliases = tuple((len(arrays) + k, k) for k in range(len(refs)))
    op = scope.emit_op("mesh_call", [*arrays, *values], callee=body, axes=mesh[0],
                       shape=mesh[1], aliases=aliases)  # fmt: skip
    for r, v in zip(refs, op.results, strict=True):
        scope.emit("swap", [r, v], indexer=full(r.type.shape))
    return []


def mesh_axes(scope: ImportScope, mesh: object) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """A mesh's axis names and sizes (``mesh.shape``: name -> size, in order)."""
    shape = getattr(mesh, "shape", None)
    if not hasattr(shape, "items"):
        raise scope.error(f"the mesh {mesh!r} gives no axis sizes; minipallas cannot import it")
    names = tuple(str(a) for a in shape)
    return names, tuple(int(n) for n in shape.values())


def _body(
    importer: Importer,
    name: str,
    closed: object,
    n_in: int,
    n_out: int,
    mesh: tuple[tuple[str, ...], tuple[int, ...]],
    io_vars: list | None = None,
    ref_outputs: Sequence[int] = (),
) -> Function:
    """``@name(*in_refs, *out_refs)``: the body, its scratch allocated around it. The body's
    operands are the jaxpr's first ``n_in + n_out`` invars, or ``io_vars`` (a ``core_map``'s
    constvars). ``ref_outputs``: inputs that are refs (``jax.new_ref``, or what a ``core_map``
    closes over), which the body reads and writes: each is bound to an extra output (the
    mesh_call aliases it), its input left unread."""
    jaxpr, consts = closed_parts(closed)
    if io_vars is None:
        io_vars, scratch_vars = jaxpr.invars[: n_in + n_out], jaxpr.invars[n_in + n_out :]
    else:
        scratch_vars, consts = jaxpr.invars, ()
        jaxpr = jaxpr.replace(constvars=[], invars=[*io_vars, *jaxpr.invars])
    scope = ImportScope(importer)
    with scope.located():
        io = [Value(_as_ref(type_of(v.aval, f"operand {k}"))) for k, v in enumerate(io_vars)]
        scratch = [type_of(v.aval, f"scratch {k}") for k, v in enumerate(scratch_vars)]
    values = [  # an array operand (a core_map's captured array) comes in a ref, read whole
        p if isinstance(v.aval, state_types.AbstractRef) else scope.emit("get", [p],
                                                                          indexer=full(p.type.shape))
        for v, p in zip(io_vars, io, strict=True)
    ]  # fmt: skip
    shared = [k for k, t in enumerate(scratch) if t.memory_space == TPU_VMEM_SHARED]
    own = [k for k, t in enumerate(scratch) if k not in shared]
    levels = [(ks, axes) for ks, axes in ((shared, mesh[0]), (own, ())) if ks]
    enclosing = importer.mesh, importer.signals_cores
    importer.mesh, importer.signals_cores = mesh, _signals_cores(jaxpr)
    try:
        _allocate(scope, jaxpr, consts, values, scratch, levels, [])
    finally:
        importer.mesh, importer.signals_cores = enclosing
    ins, outs = list(io[:n_in]), io[n_in:]
    moved = [ins[k] for k in ref_outputs]
    for k in ref_outputs:
        ins[k] = Value(RefType(ins[k].type.shape, ins[k].type.dtype))
    return Function(name, scope.builder.block([*ins, *outs, *moved], []))


def _is_ref(value: Value) -> bool:
    return isinstance(value.type, RefType)


def _as_ref(t: Type) -> RefType:
    return t if isinstance(t, RefType) else RefType(t.shape, t.dtype)


def _allocate(
    scope: ImportScope,
    jaxpr: jax_core.Jaxpr,
    consts: Sequence[object],
    values: list[Value],
    scratch: list[Type],
    levels: list[tuple[list[int], tuple[str, ...]]],
    made: list[int],
) -> None:
    """Imports ``jaxpr`` over ``values`` (the operands' refs, then the scratch in ``made``
    order), inside one ``run_scoped`` per level of scratch still to allocate."""
    if not levels:
        order = {k: v for k, v in zip(made, values[len(values) - len(made) :], strict=True)}
        io = values[: len(values) - len(made)]
        scope.bind_consts(jaxpr.constvars, consts)
        scope.run(jaxpr, [*io, *(order[k] for k in range(len(scratch)))])
        return
    (ks, axes), rest = levels[0], levels[1:]
    allocs = [Value(scratch[k]) for k in ks]
    params = [Value(v.type) for v in values]
    inner = scope.child()
    _allocate(inner, jaxpr, consts, [*params, *allocs], scratch, rest, [*made, *ks])
    block = inner.builder.block([*allocs, *params], [])
    scope.emit_op("run_scoped", values, [block], collective_axes=axes)


# --- what a core's body uses -----------------------------------------------------------------


def _signals_cores(jaxpr: jax_core.Jaxpr) -> bool:
    """Whether a body signals another core's semaphore (``core_index``, or a ``device_id``
    dict of mesh axes) anywhere, its sub-jaxprs included."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "semaphore_signal":
            *_, device_id, core_index = tree_util.tree_unflatten(
                eqn.params["args_tree"], eqn.invars
            )
            if core_index is not None or isinstance(device_id, dict):
                return True
        for sub in jax_core.jaxprs_in_params(eqn.params):
            if _signals_cores(sub):
                return True
    return False


def collective_axes(scope: ImportScope, axes: tuple[str, ...], types: Sequence[Type]) -> tuple:
    """A ``run_scoped``'s collective axes: its own, or, in a mesh kernel that signals other
    cores, every mesh axis for one that allocates regular semaphores. Upstream allocates every
    semaphore at the same place on every core, so another core can signal it; here that is a
    row per core of an allocation the cores share."""
    mesh = scope.importer.mesh
    if mesh is not None and in_device_kernel(scope):
        return mesh[0]  # a device's memory: every allocation has a row per device
    if axes or mesh is None or not scope.importer.signals_cores:
        return axes
    regular = any(isinstance(t, RefType) and t.memory_space == SEMAPHORE for t in types)
    return mesh[0] if regular else axes


def allocation_type(scope: ImportScope, t: Type, collective: bool) -> Type:
    """The type of a ``run_scoped`` allocation: in a mesh kernel, a collective one in memory
    each core has its own of gets a row per core (the mesh's dims in front); in a kernel that
    spans devices, any other a row per device (``devices_cores``: its cores share it)."""
    mesh = scope.importer.mesh
    if mesh is None or not collective or not isinstance(t, RefType):
        return t
    if t.memory_space in PER_CORE:
        return RefType((*mesh[1], *t.shape), t.dtype, t.memory_space)
    if not in_device_kernel(scope):
        return t
    devices = scope.importer.devices.mesh[1]  # the device's memory, shared by its cores
    return RefType((*devices, *t.shape), t.dtype, t.memory_space)


def in_device_kernel(scope: ImportScope) -> bool:
    """Whether ``scope`` imports the body of a kernel that spans devices (``devices_kernel``)."""
    devices = scope.importer.devices
    return devices is not None and devices.kernel


def row_axes(scope: ImportScope, atom: object, value: Value) -> tuple[str, ...] | None:
    """The mesh axes along which ``value`` (what ``atom`` is bound to) holds a row of what
    ``atom`` is: every axis of the mesh (a row per core), the devices' axes only (a device's
    memory, shared by its cores: ``devices_cores``), or None."""
    mesh = scope.importer.mesh
    shape = getattr(getattr(atom, "aval", None), "shape", None)
    if mesh is None or shape is None or not isinstance(value.type, RefType):
        return None
    devices = scope.importer.devices
    for names, sizes in (mesh, devices.mesh if devices is not None else mesh):
        if value.type.shape == (*sizes, *shape):
            return names
    return None


def has_rows(scope: ImportScope, atom: object, value: Value) -> bool:
    return row_axes(scope, atom, value) is not None


def own_row(scope: ImportScope, atom: jax_core.Atom) -> Value:
    """The ref ``atom`` names as an op acting on it sees it: on a mesh's core, its own row of
    an allocation every core (or every device) has a row of; else the ref itself."""
    value = scope.read(atom)
    axes = row_axes(scope, atom, value)
    if axes is None:
        return value
    return _row(scope, value, [_axis_index(scope, a) for a in axes])


def _core_names(scope: ImportScope) -> tuple[str, ...]:
    """The mesh's axes of cores: all of them, or in a kernel that spans devices those after
    the devices' axes (``devices_cores``)."""
    mesh, devices = scope.importer.mesh, scope.importer.devices
    names = mesh[0] if mesh else ()
    return names[len(devices.mesh[0]) :] if devices is not None else names


def core_row(scope: ImportScope, atom: jax_core.Atom, core: jax_core.Atom) -> Value:
    """Core ``core``'s row of the per-core allocation ``atom`` (a signal to another core of
    the same device)."""
    value = scope.read(atom)
    names, cores = scope.importer.mesh[0] if scope.importer.mesh else (), _core_names(scope)
    if row_axes(scope, atom, value) != names or len(cores) != 1:
        raise scope.error(
            "a signal to another core (core_index) needs a semaphore allocated by "
            "run_scoped(..., collective_axes=...) in a kernel over a one-axis core mesh",
            fix="allocate the semaphore with pl.run_scoped(..., collective_axes='core')",
        )
    device = [_axis_index(scope, a) for a in names[: len(names) - 1]]
    return _row(scope, value, [*device, scope.read(core)])


def core_axis(scope: ImportScope, device_id: dict) -> str | None:
    """The mesh axis a ``device_id={axis: i}`` names, when it names only the one axis of the
    kernel's core mesh: a signal to core ``i`` (as ``core_index=i``)."""
    cores = _core_names(scope)
    if len(cores) != 1 or set(map(str, device_id)) != {cores[0]}:
        return None
    return next(iter(device_id))


def _row(scope: ImportScope, value: Value, indices: list[Value]) -> Value:
    dims = value.type.shape[len(indices) :]
    indexer = (*(Int(Dyn(k)) for k in range(len(indices))), *(Slice(0, d, 1) for d in dims))
    return scope.emit("ref.at", [value, *indices], indexer=indexer)


def _axis_index(scope: ImportScope, name: str) -> Value:
    key = ("axis_index", name)
    if key not in scope.memo:
        names = scope.importer.mesh[0] if scope.importer.mesh else scope.importer.grid_names
        out = scope.emit("program_id", [], axis=names.index(name))
        scope.nonnegative.add(out)
        scope.memo[key] = out
    return scope.memo[key]


def _names(scope: ImportScope, axis_name: object) -> tuple[str, ...]:
    names = tuple(str(a) for a in (axis_name if isinstance(axis_name, tuple) else (axis_name,)))
    mesh = scope.importer.mesh
    if mesh is None and scope.importer.grid_names is not None:  # a pallas_call's named grid
        mesh = (scope.importer.grid_names, ())
    if mesh is None:
        raise scope.error(
            f"axis {names} is not an axis of a kernel's mesh",
            fix="use lax.axis_index inside pl.kernel / pl.core_map over a mesh with that axis",
        )
    unknown = [a for a in names if a not in mesh[0]]
    if unknown:
        raise scope.error(f"axes {unknown} are not axes of the mesh {mesh[0]}")
    return names


@rule("axis_index", params={"axis_name": READ})
def axis_index(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    """A core's position along mesh axes (several: row-major, as upstream linearizes them)."""
    names = _names(scope, eqn.params["axis_name"])
    out = _axis_index(scope, names[0])
    for a in names[1:]:
        scaled = scope.emit("mul", [out, _axis_size(scope, a)])
        out = scope.emit("add", [scaled, _axis_index(scope, a)])
    return [out]


def _axis_size(scope: ImportScope, name: str) -> Value:
    """A mesh axis's size, or a named grid axis's (``num_programs``: it may be dynamic)."""
    mesh = scope.importer.mesh
    if mesh is not None:
        return scope.constant(dict(zip(*mesh, strict=True))[name], "int32")
    return scope.emit("num_programs", [], axis=scope.importer.grid_names.index(name))


def core_barrier(scope: ImportScope, eqns: Sequence[jax_core.JaxprEqn]) -> bool:
    """``pltpu.core_barrier``'s ``"sync_cores"`` equations as one ``barrier`` (module doc):
    when they end in a wait for ``cores - 1`` in a kernel over a one-axis mesh of cores (in a
    kernel that spans devices, a barrier of each device's cores)."""
    cores, last = _core_names(scope), eqns[-1]
    if len(cores) != 1 or last.primitive.name != "semaphore_wait":
        return False
    value = scope.static(last.invars[-2])
    if value is None or int(value) != dict(zip(*scope.importer.mesh, strict=True))[cores[0]] - 1:
        return False
    scope.emit_op("barrier", [], axes=cores)
    return True


NAMED_SCOPES["sync_cores"] = core_barrier

__all__ = [
    "JaxprImportError",
    "allocation_type",
    "core_row",
    "mesh_axes",
    "own_row",
    "row_axes",
]
