"""A kernel with a grid in the program of a device (``devices_kernel``): its grid as a loop.

Upstream runs a ``pallas_call``'s grid on each device one step after another; at each step,
each operand's index map (given the grid indices and the scalar-prefetch refs) picks the block
the body sees. So in a device's program:

1. the body becomes a function of its refs whose ``program_id``s are parameters
   (``bind_grid`` over the mesh's axes then the grid's: the device's position first, as the
   body's ``lax.axis_index`` asks for it, then the grid point; ``pl.program_id(i)`` imports as
   axis ``len(mesh) + i`` in a kernel that spans devices, ``pallas.grid_query``);
2. one ``for`` loop runs the grid points in row-major order; at each, every blocked operand is
   the view of its block in the device's own row (``index * block`` along a ``Blocked``
   dimension, ``index`` along a ``Squeezed`` one), and the body is called on the views;
3. an operand whose one block is the whole array (``memory_space=ANY`` or a whole-array
   ``BlockSpec``), the scalar-prefetch refs and the scratch are passed with their rows, so
   remote copies and signals reach other devices' rows; scratch persists across grid points.

Views alias their rows, so an output block written at one step is there for the next (the
accumulator pattern), as upstream's interpret mode copies blocks back after each step.
Refused: ``Element`` (or other) block dimensions and dynamic grid sizes.
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.interop.importer.avals import type_of
from minipallas.interop.importer.devices_threading import thread
from minipallas.interop.importer.engine import ImportScope, closed_parts
from minipallas.interop.importer.rules import mesh as mesh_rules
from minipallas.ir.core import Function, Value
from minipallas.ir.indexing import Dyn, Int, Slice
from minipallas.ir.types import ArrayType
from minipallas.lowering.compat.jax_private import core as jax_core
from minipallas.lowering.compat.jax_private import pallas_core
from minipallas.passes.kernel.bind_grid import bind_grid

I32 = ArrayType((), "int32")
_FIX = "use Blocked block dimensions (pl.BlockSpec((8, 128), index_map)) and a static grid"


def check_blocks(scope: ImportScope, gm: object) -> None:
    """Refuses what a device's grid loop does not import (module doc)."""
    if gm.num_dynamic_grid_bounds:
        raise scope.error("a kernel that spans devices imports with a static grid", fix=_FIX)
    for bm in gm.block_mappings[: gm.num_inputs + gm.num_outputs]:
        for d in bm.block_shape:
            if not isinstance(d, pallas_core.Blocked | pallas_core.Squeezed):
                raise scope.error(
                    f"a kernel that spans devices imports Blocked and Squeezed block "
                    f"dimensions, got {d}",
                    fix=_FIX,
                )


def is_whole(bm: object) -> bool:
    """Whether ``bm``'s one block is its whole array (passed with its rows)."""
    return all(
        isinstance(d, pallas_core.Blocked) and int(d.block_size) == n
        for d, n in zip(bm.block_shape, bm.array_aval.shape, strict=True)
    )


def run_grid(
    scope: ImportScope,
    eqn: jax_core.JaxprEqn,
    refs: Sequence[Value],
    scratch: Sequence[Value],
    barrier: Value | None,
) -> None:
    """The kernel ``eqn`` over its grid in ``scope`` (module doc): ``refs`` has a ref with a
    row per device for each scalar-prefetch operand, input and output, then ``scratch``."""
    devices = scope.importer.devices
    names, sizes = devices.mesh
    gm, jaxpr = eqn.params["grid_mapping"], eqn.params["jaxpr"]
    grid = tuple(int(n) for n in gm.grid)
    n_pre = gm.num_index_operands
    mappings = [None] * n_pre + list(gm.block_mappings[: gm.num_inputs + gm.num_outputs])
    whole = [bm is None or is_whole(bm) for bm in mappings]
    types = [
        r.type if k >= len(refs) or whole[k] else type_of(v.aval, f"operand {k}")
        for k, (v, r) in enumerate(zip(jaxpr.invars, [*refs, *scratch], strict=True))
    ]
    body = _body(scope, jaxpr, types, barrier)
    bound = bind_grid(body, (*sizes, *grid))
    maps = {k: _index_map(scope, bm, len(grid), refs[:n_pre]) for k, bm in enumerate(mappings)
            if not whole[k]}  # fmt: skip

    consts = [*refs, *scratch, *([barrier] if barrier is not None else [])]
    i, params = Value(I32), [Value(c.type) for c in consts]
    step = scope.child()
    idx = []
    for k, n in enumerate(grid):
        stride = 1
        for m in grid[k + 1 :]:
            stride *= m
        at = step.emit("div", [i, step.constant(stride, "int32")]) if stride != 1 else i
        idx.append(step.emit("rem", [at, step.constant(n, "int32")]))
        step.nonnegative.add(idx[-1])
    dev = [mesh_rules._axis_index(step, a) for a in names]
    args = list(params)
    for k, fn in maps.items():
        blocks = step.emit_op("call", [*idx, *params[:n_pre]], callee=fn).results
        args[k] = _block(step, params[k], dev, blocks, mappings[k].block_shape)
    step.emit_op("call", [*dev, *idx, *args], callee=bound)
    loop = step.builder.block([i, *params], [])
    bounds = [scope.constant(0, "int32"), scope.constant(_product(grid), "int32")]
    scope.emit_op("for", [*bounds, *consts], [loop], num_consts=len(consts))


def _product(ns: Sequence[int]) -> int:
    out = 1
    for n in ns:
        out *= n
    return out


def _body(
    scope: ImportScope, jaxpr: jax_core.Jaxpr, types: list, barrier: Value | None
) -> Function:
    """The kernel's body as a function of its refs (then its barrier semaphore)."""
    importer, devices = scope.importer, scope.importer.devices
    inner = ImportScope(importer)
    params = [Value(t) for t in types]
    extra = [] if barrier is None else [Value(barrier.type)]
    devices.barrier = extra[0] if extra else None  # the caller restores it
    inner.run(jaxpr, params)
    name = importer.unique_name(str(jaxpr.debug_info.func_name if jaxpr.debug_info else "body"))
    return Function(name, thread(inner.builder.block([*params, *extra], []), extra))


def _index_map(scope: ImportScope, bm: object, n_grid: int, prefetch: Sequence[Value]) -> Function:
    jaxpr, consts = closed_parts(bm.index_map_jaxpr)
    types = [*[I32] * n_grid, *(p.type for p in prefetch)]
    return scope.importer.function("index_map", jaxpr, consts, types=types, nonnegative=n_grid)


def _block(
    scope: ImportScope, rows: Value, dev: list[Value], blocks: Sequence[Value], shape: tuple
) -> Value:
    """The device's own view of the block ``blocks`` of ``rows`` (module doc, 2)."""
    dyn = [*dev]
    entries: list = [Int(Dyn(k)) for k in range(len(dev))]
    for b, d in zip(blocks, shape, strict=True):
        if isinstance(d, pallas_core.Squeezed):
            dyn.append(b)
            entries.append(Int(Dyn(len(dyn) - 1)))
            continue
        size = int(d.block_size)
        dyn.append(scope.emit("mul", [b, scope.constant(size, "int32")]))
        entries.append(Slice(Dyn(len(dyn) - 1), size, 1))
    return scope.emit("ref.at", [rows, *dyn], indexer=tuple(entries))
