"""Import rules for kernels that span devices: a ``shard_map`` over several devices whose body
holds ``pallas_call``s with remote copies and signals, and the ops and lax collectives around
them (issue 47).

Upstream's guide "Distributed Computing in Pallas for TPUs" runs a kernel on every device of a
mesh inside ``jax.shard_map``; the kernels talk through ``pltpu.make_async_remote_copy(...,
device_id=..., device_id_type=...)``, ``pltpu.semaphore_signal(..., device_id=...)`` and the
barrier semaphore of their ``collective_id``. That is the model minipallas already has for the
cores of a mesh kernel (``mesh.py``) with the mesh's devices as its programs, so the whole
``shard_map`` imports as one ``mesh_call`` over its mesh whose body is *the program of one
device*: its body, run by every device at once.

1. Each operand becomes an array with a *row per device* (the mesh's dims in front, then the
   shard: ``_split``), the ``in_specs`` read as upstream shards (a dimension split along the
   axes it names, replicated along the others). Each result is put back from its rows as
   ``out_specs`` say (``_join``); a mesh axis they leave unnamed (``P()``, ``P(None, "y")``)
   takes the row of the device at position 0 along it, as upstream does (with
   ``check_vma=False`` the devices may disagree; jax's result is the first one's).
2. The program reads its own row of each operand, runs the body's equations on its shards,
   and writes its results into its own row of each result. Pure ops need nothing more: each
   device computes on its own values. A ``pallas_call`` becomes the kernel over buffers with a
   row per device (``devices_kernel``); a lax collective (``psum``, ``ppermute``,
   ``all_gather``...) an exchange through such a buffer between barriers
   (``devices_collectives``); ``jit`` calls are inlined, so the kernels in them are found.
   Why one program per device rather than ops over the stacked arrays: remote copies and
   semaphores are already that model (programs that run together, each on its row), the
   simulator orders a kernel against the ops around it, and pure ops need no batching rule.
3. A kernel's operand that is a shard_map operand, or its result that is a shard_map result,
   is the ``mesh_call``'s own ref (``Devices.ref_of``, ``result_ref``): nothing is copied.
4. Barrier semaphores: one per ``collective_id`` for the whole body, a row per device,
   allocated around the program, so two kernels with the same id share it and kernels with
   different ids do not (the chip's barrier semaphore belongs to its collective id; upstream's
   TPU interpret mode keeps one semaphore per id, and clears all its memory after each kernel,
   with a barrier over every device: a kernel whose handshake leaves the count at 0 sees no
   difference). A semaphore a kernel returns (``out_shape=pltpu.SemaphoreType.REGULAR(())``,
   upstream's ``test_no_barrier_semaphore``) is allocated there too, a row per device, and is
   the ref a later kernel that takes it signals and waits on: its count lives across kernels.

A body with mesh kernels (``pl.kernel``, ``core_map``: cores within each device) runs on every
core of every device: the ``mesh_call``'s axes are the mesh's then the cores'
(``devices_cores``).

So ``collectives="simulate"`` runs the devices together (``ir/interpret/programs.py``) with
races and deadlocks named, as for cores. Refused, with a fix: mesh axes left automatic, a
shard_map inside the body, and a kernel inside a loop, a branch or a custom-derivative call
of the body unless it talks to no other device (no ``collective_id``, remote copy, remote
signal or barrier semaphore) nor reads its position (``_local``), when it is the device's own
kernel, imported as one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from minipallas.interop.importer.avals import type_of
from minipallas.interop.importer.engine import RULES, ImportScope, closed_parts
from minipallas.interop.importer.rules import devices_cores
from minipallas.interop.importer.rules import mesh as mesh_rules
from minipallas.interop.importer.rules.devices_cores import equations
from minipallas.interop.importer.rules.devices_kernel import (
    collective_id,
    device_kernel,
    read_own,
)
from minipallas.ir.core import Function, Value
from minipallas.ir.indexing import Int, Slice
from minipallas.ir.types import SEMAPHORE, RefType, is_semaphore
from minipallas.lowering.compat.jax_private import core as jax_core

KERNELS = ("pallas_call", *devices_cores.MESH_KERNELS)  # what a body may run on devices
_CALLS = ("jit", "pjit", "closed_call")


@dataclass
class Devices:
    """What importing one device's program needs (module doc): the mesh, the refs holding a
    variable's value on every device (a row each), the results not yet written, the barrier
    semaphores per ``collective_id``; while a kernel's body imports, ``kernel`` and its
    ``barrier``."""

    mesh: tuple[tuple[str, ...], tuple[int, ...]]
    refs: dict = field(default_factory=dict)  # jaxpr var -> a ref with a row per device
    results: dict = field(default_factory=dict)  # body outvar -> the mesh_call's result ref
    barriers: dict[int, Value] = field(default_factory=dict)
    cores: tuple = ((), ())  # the core mesh of the body's mesh kernels (``devices_cores``)
    kernel: bool = False
    barrier: Value | None = None

    def ref_of(self, atom: jax_core.Atom) -> Value | None:
        return self.refs.get(atom) if isinstance(atom, jax_core.Var) else None

    def result_ref(self, var: jax_core.Var) -> Value | None:
        """The result ref ``var`` is written into, when nothing has written it yet."""
        ref = self.results.get(var)
        return ref if ref is not None and self.refs.get(var) is not ref else None

    def wrote(self, var: jax_core.Var, ref: Value) -> None:
        self.refs[var] = ref

    def value(self, scope: ImportScope, atom: jax_core.Atom) -> Value:
        """``atom``'s value on this device (its own row, read once, where a ref holds it)."""
        ref = self.ref_of(atom)
        if ref is not None and atom not in scope.env:
            scope.bind(atom, read_own(scope, ref))
        return scope.read(atom)


def device_shard_map(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    """A ``shard_map`` over several devices as a ``mesh_call`` (module doc)."""
    if scope.importer.devices is not None:
        raise scope.error(
            "a shard_map inside the body of a shard_map over several devices cannot be imported",
            fix="make the outer shard_map's mesh axes manual in one shard_map",
        )
    names, sizes = mesh_rules.mesh_axes(scope, eqn.params["mesh"])
    manual = eqn.params.get("newly_manual_axes", eqn.params.get("manual_axes", names))
    auto = [a for a, n in zip(names, sizes, strict=True) if a not in {str(m) for m in manual}
            and n != 1]  # fmt: skip
    if auto:
        raise scope.error(
            f"a shard_map over several devices with automatic axes {auto} cannot be imported",
            fix="make every mesh axis manual (leave axis_names unset)",
        )
    jaxpr, consts = closed_parts(eqn.params["jaxpr"])
    mesh = (names, sizes)
    cores = devices_cores.core_axes(scope, list(equations(jaxpr)), mesh)
    stacked = [
        _split(scope, scope.read(a), spec, v.aval.shape, mesh)
        for a, spec, v in zip(eqn.invars, eqn.params["in_specs"], jaxpr.invars, strict=True)
    ]
    outs = []
    for k, v in enumerate(jaxpr.outvars):
        t = type_of(v.aval, f"result {k}")
        outs.append(RefType((*sizes, *t.shape), t.dtype))
    name = scope.importer.unique_name(_name(jaxpr) + "_device")
    body = _program(scope, name, jaxpr, consts, [v.type for v in stacked], outs, mesh, cores)
    op = scope.emit_op("mesh_call", stacked, callee=body, axes=(*names, *cores[0]),
                       shape=(*sizes, *cores[1]), aliases=())  # fmt: skip
    return [_join(scope, r, s, mesh) for r, s in zip(op.results, eqn.params["out_specs"],
                                                      strict=True)]  # fmt: skip


def _name(jaxpr: jax_core.Jaxpr) -> str:
    """The first kernel's name, else ``shard_map``."""
    for e in equations(jaxpr):
        if e.primitive.name == "pallas_call":
            debug = getattr(e.params["jaxpr"], "debug_info", None)
            return str(e.params.get("name") or getattr(debug, "func_name", "") or "kernel")
    return "shard_map"


def _program(
    scope: ImportScope,
    name: str,
    jaxpr: jax_core.Jaxpr,
    consts: Sequence[object],
    in_types: list,
    out_types: list,
    mesh: tuple,
    cores: tuple,
) -> Function:
    """``@name(*in_rows, *out_rows)``: the body as one device's program (module doc, 2), run
    by each of its cores when the body holds mesh kernels (``devices_cores``)."""
    importer = scope.importer
    io = [Value(RefType(t.shape, t.dtype)) for t in (*in_types, *out_types)]
    ids = sorted({c for e in equations(jaxpr) if e.primitive.name == "pallas_call"
                  for c in [collective_id(e)] if c is not None})  # fmt: skip
    made = _semaphore_results(jaxpr)
    devices = Devices(mesh, cores=cores)
    outer = ImportScope(importer)
    enclosing = importer.mesh, importer.devices
    importer.mesh, importer.devices = (mesh[0] + cores[0], mesh[1] + cores[1]), devices
    try:
        if not ids and not made:
            _run(outer, devices, jaxpr, consts, io, len(in_types))
        else:  # barrier semaphores and kernels' semaphores, around the program (module doc, 4)
            allocs = [Value(RefType(tuple(mesh[1]), "int32", SEMAPHORE)) for _ in ids]
            results = [Value(RefType((*mesh[1], *t.shape), t.dtype, t.memory_space))
                       for t in made.values()]  # fmt: skip
            params = [Value(v.type) for v in io]
            inner = outer.child()
            devices.barriers = dict(zip(ids, allocs, strict=True))
            devices.results.update(zip(made, results, strict=True))
            allocs += results
            _run(inner, devices, jaxpr, consts, params, len(in_types))
            block = inner.builder.block([*allocs, *params], [])
            outer.emit_op("run_scoped", io, [block], collective_axes=mesh[0])
    finally:
        importer.mesh, importer.devices = enclosing
    return Function(name, outer.builder.block(io, []))


def _semaphore_results(jaxpr: jax_core.Jaxpr) -> dict[jax_core.Var, RefType]:
    """The body's ``pallas_call`` results that are semaphores, with the kernel's type of each
    (a kernel that makes one for the next: module doc, 4)."""
    found = {}
    for e in equations(jaxpr):
        if e.primitive.name != "pallas_call":
            continue
        refs = e.params["jaxpr"].invars[len(e.invars) :]
        for var, ref in zip(e.outvars, refs, strict=False):
            t = type_of(ref.aval, "a kernel's result")
            if isinstance(t, RefType) and is_semaphore(t):
                found[var] = t
    return found


def _run(
    scope: ImportScope,
    devices: Devices,
    jaxpr: jax_core.Jaxpr,
    consts: Sequence[object],
    refs: list[Value],
    n_in: int,
) -> None:
    """The program: each result's own row written with its value on this device."""
    for var, ref in zip(jaxpr.invars, refs[:n_in], strict=True):
        devices.refs[var] = ref
    for var, ref in zip(jaxpr.outvars, refs[n_in:], strict=True):
        if isinstance(var, jax_core.Var):
            devices.results.setdefault(var, ref)
    scope.bind_consts(jaxpr.constvars, consts)
    _walk(scope, devices, jaxpr)
    for var, ref in zip(jaxpr.outvars, refs[n_in:], strict=True):
        if devices.ref_of(var) is not ref:
            devices_cores.store_own(scope, ref, devices.value(scope, var))


def _walk(scope: ImportScope, devices: Devices, jaxpr: jax_core.Jaxpr) -> None:
    """Import ``jaxpr``'s equations into the program (its invars bound already)."""
    is_var = jax_core.Var.__instancecheck__
    scope.used.update(v for e in jaxpr.eqns for v in e.invars if is_var(v))
    scope.used.update(v for v in jaxpr.outvars if is_var(v))
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "pvary":  # a type fact: the values themselves, and their rows
            for a, v in zip(eqn.invars, eqn.outvars, strict=True):
                _alias(scope, devices, a, v)
        elif name == "pallas_call":
            with scope.located(eqn):
                if devices.cores[0]:  # beside mesh kernels: the first core's
                    outs = devices_cores.first_core_kernel(scope, eqn, device_kernel)
                else:
                    outs = device_kernel(scope, eqn)
                for var, value in zip(eqn.outvars, outs, strict=True):
                    if value is not None:
                        scope.bind(var, value)
        elif name in _CALLS:
            with scope.located(eqn):
                scope.check_params(eqn, RULES)
            sub, consts = closed_parts(eqn.params.get("jaxpr", eqn.params.get("call_jaxpr")))
            for a, v in zip(eqn.invars, sub.invars, strict=True):
                _alias(scope, devices, a, v)
            scope.bind_consts(sub.constvars, consts)
            _walk(scope, devices, sub)
            for a, v in zip(sub.outvars, eqn.outvars, strict=True):
                _alias(scope, devices, a, v)
        elif name in devices_cores.MESH_KERNELS or _holds_mesh_kernel(eqn, "run_state"):
            with scope.located(eqn):  # the cores of every device (``devices_cores``)
                scope.check_params(eqn, RULES)
                outs = _mesh_kernel(scope, devices, eqn)
            for var, value in zip(eqn.outvars, outs, strict=True):
                scope.bind(var, value)
        else:
            _refuse_nested_kernel(scope, eqn)
            for a in eqn.invars:
                devices.value(scope, a)
            scope.run_eqns([eqn], [])


def _alias(scope: ImportScope, devices: Devices, atom: jax_core.Atom, var: jax_core.Var) -> None:
    """``var`` stands for ``atom``: its value and the ref holding it, whichever are known."""
    ref = devices.ref_of(atom)
    if ref is not None:
        devices.refs[var] = ref
    if not isinstance(atom, jax_core.Var) or atom in scope.env:
        scope.bind(var, scope.read(atom))


def _holds_mesh_kernel(eqn: jax_core.JaxprEqn, name: str) -> bool:
    subs = jax_core.jaxprs_in_params(eqn.params)
    kernels = devices_cores.MESH_KERNELS
    return eqn.primitive.name == name and any(
        e.primitive.name in kernels for sub in subs for e in equations(sub)
    )


def _mesh_kernel(scope: ImportScope, devices: Devices, eqn: jax_core.JaxprEqn) -> list[Value]:
    """A mesh kernel, or a ``run_state`` around one, run by the cores of every device."""

    def value(atom: jax_core.Atom) -> Value:
        return devices.value(scope, atom)

    if eqn.primitive.name == "mpmd_map":
        return devices_cores.device_mesh_kernel(scope, eqn, value)
    if eqn.primitive.name == "core_map":
        devices_cores.device_core_map(scope, eqn)
        return []
    return devices_cores.device_run_state(
        scope, eqn, value, lambda inner, jaxpr: _walk(inner, devices, jaxpr)
    )


def _refuse_nested_kernel(scope: ImportScope, eqn: jax_core.JaxprEqn) -> None:
    """A kernel in a loop or branch of the body may run on some devices only: refused unless it
    talks to no other device (``_local``), when it is a kernel of the device's own."""
    for sub in jax_core.jaxprs_in_params(eqn.params):
        inner = next((e for e in equations(sub) if e.primitive.name in KERNELS and not
                      _local(e)), None)  # fmt: skip
        if inner is not None:
            with scope.located(eqn):
                raise scope.error(
                    f"a {inner.primitive.name} inside {eqn.primitive.name} in a shard_map body "
                    "over several devices cannot be imported",
                    fix="call the kernel at the top of the shard_map's body (or in a jax.jit "
                    "function it calls); put loops inside the kernel",
                )


_TALKS = ("get_barrier_semaphore", "dma_start", "dma_wait", "semaphore_signal")


def _local(eqn: jax_core.JaxprEqn) -> bool:
    """Whether ``eqn`` is a ``pallas_call`` that reaches no other device (no ``collective_id``,
    remote copy or signal, barrier semaphore) and reads no device position (``axis_index``:
    imported as a kernel of its own, a mesh axis would read its grid's position)."""
    if eqn.primitive.name != "pallas_call" or collective_id(eqn) is not None:
        return False
    for e in equations(eqn.params["jaxpr"]):
        name = e.primitive.name
        if name in ("axis_index", "get_barrier_semaphore"):
            return False
        if name in _TALKS and _device_id(e) is not None:
            return False
    return True


def _device_id(eqn: jax_core.JaxprEqn) -> object:
    """The ``device_id`` a copy or signal names, or None (a local one)."""
    if eqn.primitive.name in ("dma_start", "dma_wait"):
        return eqn.params["tree"].unflatten(eqn.invars)[-1]
    *_, device_id, _ = eqn.params["args_tree"].unflatten(eqn.invars)
    return device_id


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
    """The array ``out_specs`` makes of a result's rows (inverse of ``_split``; module doc, 1)."""
    names, sizes = mesh
    shard = x.type.shape[len(names) :]
    entries = [*tuple(spec), *[None] * (len(shard) - len(tuple(spec)))]
    named = [a for e in entries for a in _axes_of(e)]
    if len(named) != len(names):  # device 0's row along each axis the spec leaves unnamed
        indexer = (
            *(Slice(0, n, 1) if a in named else Int(0) for a, n in zip(names, sizes, strict=True)),
            *(Slice(0, n, 1) for n in shard),
        )
        x = scope.emit("slice", [x], indexer=indexer)
        sizes = tuple(n for a, n in zip(names, sizes, strict=True) if a in named)
        names = tuple(a for a in names if a in named)
    perm: list[int] = []
    shape: list[int] = []
    for d, entry in enumerate(entries):
        perm += [names.index(a) for a in _axes_of(entry)]
        perm.append(len(names) + d)
        n = shard[d]
        for a in _axes_of(entry):
            n *= sizes[names.index(a)]
        shape.append(n)
    if tuple(perm) != tuple(range(len(perm))):
        x = scope.emit("transpose", [x], permutation=tuple(perm))
    if tuple(shape) != x.type.shape:
        x = scope.emit("reshape", [x], shape=tuple(shape))
    return x
