"""Mesh kernels of cores (``pl.kernel`` over ``pltpu.create_tensorcore_mesh``, ``pl.core_map``)
in the body of a ``shard_map`` over several devices (``devices``).

Upstream runs such a kernel on every core of every device: the cores of one device share its
memory (HBM, ``VMEM_SHARED``) and meet at core barriers, each core has its own VMEM, SMEM and
semaphores, and a remote copy still targets a device. So the programs are indexed by *(device...,
core...)*: the device program's ``mesh_call`` runs over the shard_map's mesh extended by the
core mesh's axes (``core_axes``), and memory gets rows as it is shared:

1. the device's memory (the kernel's operands and outputs, ``run_state``'s refs, ``VMEM_SHARED``
   scratch) has a row per device, shared by its cores; memory of which each core has its own
   a row per (device, core) (``mesh.allocation_type``). A remote copy or signal lands in the
   target device's row, and, for per-core memory, its row of the same core, or of the core a
   ``device_id`` dict names along the core axis, as upstream's lowering reads it
   (``devices_kernel.target_row``); ``core_index`` names a core of the same device;
2. the body's ops outside kernels are run by every core of a device: pure ops compute the same
   values on each, lax collectives exchange among the devices' same-numbered cores (their
   barriers group the programs that differ along device axes only), so they need nothing more.
   What writes the device's shared memory outside a kernel (a kernel's operands stored into
   its buffers, ``run_state``'s initial values, the shard_map's results) is written by the
   device's first core only (``first_core``: a ``cond`` on the core's position), and a barrier
   over the core axes orders it before the kernel; another after the kernel orders the
   kernel's writes before every core reads its results. A ``pallas_call`` beside mesh kernels
   runs on the first core only (``first_core_kernel``), as it runs without cores.

Why not a nested ``mesh_call`` of cores in each device's program: the simulator would run a
device's cores to their end before another device moves, so a copy waiting for a neighbour's
copy would never be satisfied; programs over (device, core) run together, as the chip's cores do.
Refused, with a fix: two different core meshes in one body, and a barrier semaphore
(``collective_id``) in a mesh kernel.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from minipallas.interop.importer.avals import type_of
from minipallas.interop.importer.engine import ImportScope, closed_parts
from minipallas.interop.importer.rules import mesh as mesh_rules
from minipallas.interop.importer.rules.devices_kernel import collective_id, own, read_own
from minipallas.ir.core import Value
from minipallas.ir.indexing import full
from minipallas.ir.types import RefType
from minipallas.lowering.compat.jax_private import core as jax_core

MESH_KERNELS = ("mpmd_map", "core_map")
ValueOf = Callable[[jax_core.Atom], Value]  # an atom's value on this device
_FIX = "call every mesh kernel of the body over one pltpu.create_tensorcore_mesh"


def equations(jaxpr: jax_core.Jaxpr | jax_core.ClosedJaxpr) -> Iterator[jax_core.JaxprEqn]:
    """The equations of ``jaxpr`` (open or closed) and of every jaxpr in their parameters."""
    for e in getattr(jaxpr, "jaxpr", jaxpr).eqns:
        yield e
        for sub in jax_core.jaxprs_in_params(e.params):
            yield from equations(sub)


def _kernel_mesh(eqn: jax_core.JaxprEqn) -> object:
    """The core mesh a mesh kernel's equation runs over."""
    if eqn.primitive.name == "core_map":
        return eqn.params["mesh"]
    return eqn.params["meshes"][0]


def core_axes(scope: ImportScope, eqns: Sequence[jax_core.JaxprEqn], devices: tuple) -> tuple:
    """The core mesh's ``(names, sizes)`` of the mesh kernels among ``eqns`` (``((), ())`` for
    none), refused when they differ or reuse a device axis's name."""
    found: set = set()
    for eqn in eqns:
        if eqn.primitive.name in MESH_KERNELS:
            with scope.located(eqn):
                if eqn.primitive.name == "mpmd_map" and len(eqn.params["meshes"]) != 1:
                    raise scope.error("a kernel over several meshes cannot be imported",
                                      fix="write one body over one mesh")  # fmt: skip
                found.add(mesh_rules.mesh_axes(scope, _kernel_mesh(eqn)))
    if len(found) > 1:
        raise scope.error(f"mesh kernels over different core meshes {sorted(found)} in a "
                          "shard_map body over several devices", fix=_FIX)  # fmt: skip
    cores = found.pop() if found else ((), ())
    clash = [a for a in cores[0] if a in devices[0]]
    if clash:
        raise scope.error(f"the core mesh's axes {clash} are axes of the shard_map's mesh",
                          fix="give the core mesh's axis another name")  # fmt: skip
    return cores


def first_core(scope: ImportScope, operands: Sequence[Value],
               body: Callable[[ImportScope, list[Value]], None]) -> None:  # fmt: skip
    """``body`` run by the device's first core only (module doc, 2): a ``cond`` whose index is
    the sum of the core's positions (0 on the first core; ``cond`` clamps the others to 1)."""
    params, skipped = [Value(v.type) for v in operands], [Value(v.type) for v in operands]
    inner = scope.child()
    body(inner, params)
    branches = [inner.builder.block(params, []), scope.child().builder.block(skipped, [])]
    scope.emit_op("cond", [_first_core_index(scope), *operands], branches)


def _first_core_index(scope: ImportScope) -> Value:
    """The sum of the core's positions: 0 on a device's first core only."""
    names = scope.importer.devices.cores[0]
    index = mesh_rules._axis_index(scope, names[0])
    for a in names[1:]:
        index = scope.emit("add", [index, mesh_rules._axis_index(scope, a)])
    return index


def store_own(scope: ImportScope, ref: Value, value: Value) -> None:
    """``value`` into the device's own row of ``ref``, by its first core when it has cores."""

    def store(inner: ImportScope, params: list[Value]) -> None:
        row = own(inner, params[0])
        inner.emit("swap", [row, params[1]], indexer=full(row.type.shape))

    if scope.importer.devices.cores[0]:
        first_core(scope, [ref, value], store)
    else:
        store(scope, [ref, value])


def sync_cores(scope: ImportScope) -> None:
    scope.emit_op("barrier", [], axes=scope.importer.devices.cores[0])


def _device_rows(scope: ImportScope, var: jax_core.Var, what: str) -> RefType:
    """The type of a buffer of the device's memory holding ``var``: a row per device."""
    t = type_of(var.aval, what)
    space = t.memory_space if isinstance(t, RefType) else None
    return RefType((*scope.importer.devices.mesh[1], *t.shape), t.dtype, space)


def _shared(
    scope: ImportScope,
    operands: list[Value],
    stored: list[tuple[int, int]],
    allocs: list[RefType],
    body: Callable[[ImportScope, list, list], list],
) -> list:
    """A ``run_scoped`` shared by every program over ``allocs`` (rows per device or per core):
    each ``(alloc k, operand j)`` of ``stored`` written into the device's row by its first
    core, a core barrier, then ``body(inner, made, params)``'s results (it ends with a core
    barrier before it reads what the kernel wrote)."""
    params, made = [Value(v.type) for v in operands], [Value(t) for t in allocs]
    inner = scope.child()
    for k, j in stored:
        store_own(inner, made[k], params[j])
    sync_cores(inner)
    results = body(inner, made, params)
    block = inner.builder.block([*made, *params], results)
    axes = scope.importer.mesh[0]
    return list(scope.emit_op("run_scoped", operands, [block], collective_axes=axes).results)


def _kernel_body(scope: ImportScope, eqn: jax_core.JaxprEqn, jaxpr: jax_core.Jaxpr,
                 refs: list[Value], scratch: Sequence[jax_core.Var]) -> None:  # fmt: skip
    """The kernel's body on the cores of the device, its scratch allocated around it."""
    devices = scope.importer.devices
    if collective_id(eqn) is not None or any(
        e.primitive.name == "get_barrier_semaphore" for e in equations(jaxpr)
    ):
        raise scope.error(
            f"a barrier semaphore (collective_id) in a mesh kernel ({eqn.primitive.name}) in a "
            "shard_map body over several devices cannot be imported",
            fix="signal the other devices' semaphores of a pl.run_scoped allocation "
            "(semaphore_signal(sem, device_id=...)), or write the kernel as a pallas_call",
        )
    enclosing = devices.kernel, scope.importer.signals_cores
    devices.kernel, scope.importer.signals_cores = True, True
    try:
        types = [mesh_rules.allocation_type(scope, type_of(v.aval, f"scratch {k}"), True)
                 for k, v in enumerate(scratch)]  # fmt: skip
        if not types:
            scope.run(jaxpr, refs)
            return
        made, params = [Value(t) for t in types], [Value(v.type) for v in refs]
        inner = scope.child()
        inner.run(jaxpr, [*params, *made])
        block = inner.builder.block([*made, *params], [])
        scope.emit_op("run_scoped", refs, [block], collective_axes=scope.importer.mesh[0])
    finally:
        devices.kernel, scope.importer.signals_cores = enclosing


def _is_ref(value: Value) -> bool:
    return isinstance(value.type, RefType)


def device_mesh_kernel(scope: ImportScope, eqn: jax_core.JaxprEqn, value: ValueOf) -> list[Value]:
    """``pl.kernel`` (``mpmd_map``) in a device's program: its operands and outputs buffers of
    the device's memory, the body run by the device's cores (module doc); the outputs' values.
    ``value(atom)`` is an operand's value on this device."""
    params = eqn.params
    if params.get("external_meshes"):
        raise scope.error("a kernel over the meshes of other JAX functions cannot be imported")
    jaxpr, consts = closed_parts(params["jaxprs"][0])
    if consts:
        raise scope.error("a mesh kernel whose body has constants cannot be imported here",
                          fix="pass the constants to the kernel as operands")  # fmt: skip
    n_in, n_out = len(eqn.invars), len(eqn.outvars)
    operands = [value(a) for a in eqn.invars]
    if any(_is_ref(v) for v in operands):
        raise scope.error("a ref (jax.new_ref) given to a mesh kernel in a shard_map body over "
                          "several devices cannot be imported", fix="pass arrays")  # fmt: skip
    allocs = [_device_rows(scope, v, f"operand {k}") for k, v in
              enumerate(jaxpr.invars[: n_in + n_out])]  # fmt: skip
    stored = [(k, k) for k in range(n_in)]
    stored += [(n_in + int(o), int(i)) for i, o in params["input_output_aliases"].items()]

    def body(inner: ImportScope, made: list, _: list) -> list:
        _kernel_body(inner, eqn, jaxpr, made, jaxpr.invars[n_in + n_out :])
        sync_cores(inner)
        return [read_own(inner, r) for r in made[n_in:]]

    return _shared(scope, operands, stored, allocs, body)


def device_core_map(scope: ImportScope, eqn: jax_core.JaxprEqn) -> None:
    """``pl.core_map`` in a device's program (inside a ``run_state``, ``device_run_state``):
    the refs it closes over are buffers of the device's memory already, stored before a core
    barrier; the body runs on the device's cores, a core barrier after it."""
    jaxpr = eqn.params["jaxpr"]
    refs = [scope.read(a) for a in eqn.invars]
    rows = [mesh_rules.has_rows(scope, a, r) for a, r in zip(eqn.invars, refs, strict=True)]
    if not all(rows):
        raise scope.error(
            "a core_map in a shard_map body over several devices closes over a value that is "
            "not a ref of a run_state",
            fix="close over the refs of pl.run_state (as upstream's shard_map_of_core_map)",
        )
    closed = jaxpr.replace(constvars=[], invars=[*jaxpr.constvars, *jaxpr.invars])
    _kernel_body(scope, eqn, closed, refs, jaxpr.invars)
    sync_cores(scope)


def device_run_state(
    scope: ImportScope,
    eqn: jax_core.JaxprEqn,
    value: ValueOf,
    walk: Callable[[ImportScope, jax_core.Jaxpr], None],
) -> list[Value]:
    """``pl.run_state(f)(init)`` around a mesh kernel in a device's program: each ref a buffer
    of the device's memory, its initial value stored by the first core; ``f`` imported by
    ``walk(scope, jaxpr)``; every ref's final value read by every core."""
    jaxpr = eqn.params["jaxpr"]
    initialized = eqn.params["is_initialized"]
    operands = [value(a) for a in eqn.invars]
    if jaxpr.constvars or not all(initialized) or any(_is_ref(v) for v in operands):
        raise scope.error(
            "a run_state around a mesh kernel imports with every ref initialized from an array",
            fix="pass initial arrays: run_state(f)((x, jnp.zeros_like(x)))",
        )
    allocs = [_device_rows(scope, v, f"state variable {v}") for v in jaxpr.invars]
    allocs = [RefType(t.shape, t.dtype) for t in allocs]  # the device's memory (HBM)

    def body(inner: ImportScope, made: list, _: list) -> list:
        for var, ref in zip(jaxpr.invars, made, strict=True):
            inner.bind(var, ref)
        walk(inner, jaxpr)
        sync_cores(inner)
        return [read_own(inner, r) for r in made]

    return _shared(scope, operands, [(k, k) for k in range(len(operands))], allocs, body)


def first_core_kernel(
    scope: ImportScope,
    eqn: jax_core.JaxprEqn,
    kernel: Callable[[ImportScope, jax_core.JaxprEqn], list],
) -> list:
    """A ``pallas_call`` beside mesh kernels: ``kernel(scope, eqn)`` (``devices_kernel``) run by
    each device's first core only, one program per device as in a body without cores (its
    allocations grouped along the device axes; a chip runs a ``pallas_call`` with no parallel
    grid on one core), between core barriers. The other cores take zeros for its values:
    nothing they compute from them reaches memory (module doc, 2: what the body writes is the
    first core's), and what it writes to the device's memory they read after the barrier."""
    importer, devices = scope.importer, scope.importer.devices
    outer: list[Value] = []
    bound = {}  # atom -> outer value the branch takes as a parameter
    for atom in eqn.invars:
        if isinstance(atom, jax_core.Var) and devices.ref_of(atom) is None:
            bound[atom] = devices.value(scope, atom)
    held = [devices.ref_of(a) for a in eqn.invars] + [devices.result_ref(v) for v in eqn.outvars]
    for v in [*bound.values(), *(r for r in held if r is not None), *devices.barriers.values()]:
        if not any(v is o for o in outer):
            outer.append(v)
    params = [Value(v.type) for v in outer]
    into = {id(o): p for o, p in zip(outer, params, strict=True)}
    back = {id(p): o for o, p in zip(outer, params, strict=True)}
    saved = devices.refs, devices.results, devices.barriers, importer.mesh
    devices.refs = {k: into.get(id(v), v) for k, v in saved[0].items()}
    devices.results = {k: into.get(id(v), v) for k, v in saved[1].items()}
    devices.barriers = {k: into[id(v)] for k, v in saved[2].items()}
    importer.mesh = devices.mesh
    inner = scope.child()
    for atom, value in bound.items():
        inner.bind(atom, into[id(value)])
    try:
        outs = kernel(inner, eqn)
    finally:
        wrote = devices.refs
        devices.refs, devices.results, devices.barriers, importer.mesh = saved
    for k, v in wrote.items():
        if k not in devices.refs and id(v) in back:  # an output held in the shard_map's result
            devices.refs[k] = back[id(v)]
    values = [v for v in outs if v is not None]
    skip = scope.child()
    zeros = [skip.constant(0, v.type.dtype, v.type.shape) for v in values]
    branches = [inner.builder.block(params, values), skip.builder.block(
        [Value(v.type) for v in outer], zeros)]  # fmt: skip
    sync_cores(scope)  # what the other cores read before it is read; what it writes, after
    op = scope.emit_op("cond", [_first_core_index(scope), *outer], branches)
    sync_cores(scope)
    results = iter(op.results)
    return [None if v is None else next(results) for v in outs]
