"""Mosaic rules for one device's program of a kernel that spans devices (issue 47): the body the
importer makes of a ``pallas_call`` in a ``jax.shard_map`` (``interop/importer/rules/devices.py``),
emitted as upstream's lowering emits the kernel on each device.

The imported body gives every operand, scratch buffer and the barrier semaphore a *row per
device*, and a remote copy or signal acts on the target's row. On the chip a device holds only
its own row, at the same address on every device, so (``DeviceContext``):

1. a row-per-device ref is bound to the device's memref (the shard); ``ref.at %r[%i, ..., :]``
   selecting a row is that memref, a ``DeviceRef`` that knows the row's device: its logical id
   ``sum(index * stride)`` (upstream's ``device_id_to_logical`` of a MESH id; a LOGICAL id
   imports as its mesh indices, so the sum gives it back), and whether the indices are the
   device's own position (``program_id`` of each mesh axis, in order);
2. ``program_id`` of mesh axis ``k`` is the device's position, ``(tpu.device_id / stride) %
   size``, as upstream lowers ``lax.axis_index`` of a mesh axis; a kernel with a grid takes
   its grid point from axes ``0..len(grid)-1`` and the mesh's after them (Mosaic runs the
   grid and moves the blocks, as upstream's pipeline: ``devices_tpu._grid_step``);
3. the barrier semaphore is ``tpu.sem_barrier``, emitted at the top when the body uses it;
4. a remote copy is its start followed by the send side the importer keeps (a copy of the
   source onto itself on the send semaphore): one ``tpu.enqueue_dma`` with the
   ``source_semaphore`` and the target's ``device_id``, emitted at the send side;
5. a wait of a buffer onto itself is a remote copy's wait: on a send semaphore ``wait_send``,
   ``tpu.wait_dma2`` with device and core 0 (upstream's ``insert_dummy_device``); on a receive
   semaphore ``wait_recv``, with the copy's device id. The import keeps the waited buffer
   alone, so the wait names the buffers and device of the last copy started on its semaphore,
   as upstream's descriptor does, where they are in scope (where not, say a copy started in a
   branch, its own buffer twice and no device: the chip waits on the semaphore alike);
6. a signal of another device's row is ``tpu.sem_signal ... device_id`` (``semaphore``'s rule
   asks ``signal_device``). A signal whose target is the device itself imports as a signal of
   its own row, like a local one: it names the device when the kernel's text has a remote
   signal at its line (``remote_signals``, the user lines the caller read from the kernel's
   jaxpr), as upstream's does; a copy to the device itself keeps its device id;
7. a kernel's own ``pl.run_scoped`` allocates a row per device: each device allocates its row
   in the ``tpu.region`` (``scoped.scoped_region``).
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir.core import Op
from minipallas.ir.indexing import Dyn, Int, full
from minipallas.ir.types import RefType
from minipallas.lowering.compat.jaxlib_shim import ir, tpu
from minipallas.lowering.tpu import emit
from minipallas.lowering.tpu.context import Bound, MemRef, unsupported
from minipallas.lowering.tpu.device_context import (
    DEVICE_RULES,
    VIEWS,
    Copy,
    DeviceContext,
    DeviceRef,
    holds,
    remote_device,
    view_root,
)
from minipallas.lowering.tpu.rules import dma, kernel, scoped, views


@DEVICE_RULES.register("program_id")
def program_id(ctx: DeviceContext, op: Op) -> Sequence[Bound]:
    """Axes ``0..len(grid)-1`` are the kernel's grid, those after it the mesh's (step 2)."""
    axis = op.attrs["axis"]
    if axis < len(ctx.grid):
        return kernel.program_id(ctx, op)
    if axis >= len(ctx.grid) + len(ctx.sizes):
        raise unsupported(op, f"asks for axis {axis} of a grid {tuple(ctx.grid)} and a mesh of "
                          f"{len(ctx.sizes)} axes", fix="this is a bug in minipallas's import "
                          "of the kernel")  # fmt: skip
    return [ctx.position(axis - len(ctx.grid))]


@DEVICE_RULES.register("ref.at")
def at(ctx: DeviceContext, op: Op, ref: MemRef, *dyn: ir.Value) -> Sequence[Bound]:
    rows = len(op.operands[0].type.shape) - len(ref.shape)
    if rows == 0:  # a view of a row
        return [_like(ref, views.sliced(ctx, op, ref, dyn))]
    indexer = op.attrs["indexer"]
    row = tuple(Int(Dyn(k)) for k in range(rows))
    whole = indexer[rows:] == full(ref.shape)
    if rows != len(ctx.sizes) or tuple(indexer[:rows]) != row or not whole:
        raise unsupported(op, "a view of a row-per-device ref other than one device's whole row",
                          fix="take the device's row first (ref.at %r[%i, ..., :]), "
                          "then a window of it")  # fmt: skip
    own = all(holds(ctx.positions[k], i) for k, i in enumerate(dyn[:rows]))
    return [DeviceRef(ref.value, ref.dtype, ref.space, ref.squeezed, ctx.logical(dyn[:rows]), own)]


def _like(ref: MemRef, view: MemRef) -> MemRef:
    """``view`` on the device ``ref`` is on."""
    if not isinstance(ref, DeviceRef):
        return view
    return DeviceRef(view.value, view.dtype, view.space, view.squeezed, ref.device, ref.own)


@DEVICE_RULES.register("ref.reshape", "ref.bitcast")
def view(ctx: DeviceContext, op: Op, ref: MemRef) -> Sequence[Bound]:
    (out,) = (views.reshape if op.name == "ref.reshape" else views.bitcast)(ctx, op, ref)
    return [_like(ref, out)]


@DEVICE_RULES.register("run_scoped")
def run_scoped(ctx: DeviceContext, op: Op, *args: Bound) -> Sequence[Bound]:
    """A kernel's own ``pl.run_scoped`` allocations have a row per device: each device
    allocates its own row."""
    axes = tuple(op.attrs.get("collective_axes", ()))
    if axes and axes != ctx.names:
        raise unsupported(op, f"a run_scoped over mesh axes {axes} of a mesh {ctx.names}",
                          fix="allocate over every mesh axis, or none")  # fmt: skip
    rows = len(ctx.sizes) if axes else 0
    types = [p.type for p in op.param_group("allocs")]
    types = [RefType(t.shape[rows:], t.dtype, t.memory_space) for t in types]
    return scoped.scoped_region(ctx, op, args, types)


@DEVICE_RULES.register("dma_start")
def dma_start(ctx: DeviceContext, op: Op, src: MemRef, dst: MemRef, sem: MemRef) -> list:
    if op in ctx.send_side:  # a remote start: emitted with its send side (step 4)
        ctx.started[op] = (src, dst, sem)
        return []
    start = next((s for s, side in ctx.send_side.items() if side is op), None)
    if start is None:
        if remote_device(dst) is not None:
            raise unsupported(op, "a copy into another device's row without a send side",
                              fix="this is a bug in minipallas's import of the copy")  # fmt: skip
        return list(dma.dma_start(ctx, op, src, dst, sem))
    source, target, recv = ctx.started.pop(start)
    device = target.device if isinstance(target, DeviceRef) else None
    copy = Copy(
        dma.buffer(start, source),
        dma.buffer(start, target),
        view_root(sem.value),
        view_root(recv.value),
        device,
        ir.InsertionPoint.current.block,
    )
    tpu.enqueue_dma(
        source=copy.source,
        target=copy.target,
        target_semaphore=recv.value,
        source_semaphore=sem.value,
        device_id=device,
        priority=0,
    )
    ctx.copies.append(copy)
    return []


@DEVICE_RULES.register("dma_wait")
def dma_wait(ctx: DeviceContext, op: Op, src: MemRef, dst: MemRef, sem: MemRef) -> list:
    """A remote copy's wait names the buffers and device of the last copy started on its
    semaphore, where they are in scope, as upstream's descriptor does; else its own buffer
    (step 5)."""
    if op.operands[0] is not op.operands[1]:
        return list(dma.dma_wait(ctx, op, src, dst, sem))
    buffer, root = dma.buffer(op, dst), view_root(sem.value)
    sends = [c for c in ctx.copies if c.send == root]
    recvs = [c for c in ctx.copies if c.recv == root]
    if not sends and not recvs:
        raise unsupported(
            op,
            "the wait of a remote copy comes before any start that counts on its semaphore",
            fix="start the copy before its wait in the kernel's text (Mosaic's lowering pairs "
            "them in program order)",
        )
    seen = _blocks_above(ir.InsertionPoint.current.block)

    here = _guards(seen)

    def rank(k: int) -> tuple:  # waited buffer like the wait's; in scope; same branches; latest
        copy = (sends or recvs)[k]
        waited = copy.source if sends else copy.target
        there = _guards(_blocks_above(copy.block))
        shared = sum(any(g[1] == h[1] and _same(g[0], h[0]) for h in there) for g in here)
        return (waited.type == buffer.type, _visible(copy.target, seen), shared, k)

    copy = (sends or recvs)[max(range(len(sends or recvs)), key=rank)]
    waited = copy.source if sends else copy.target
    pair = (buffer, buffer)  # a wait for another window than the copy's: its own
    source, target = _here(copy.source, seen), _here(copy.target, seen)
    if waited.type == buffer.type and source is not None and target is not None:
        pair = (target, source) if sends else (source, target)
    if sends:  # wait_send: the target first, as upstream swaps them; device and core 0
        zero = emit.i32(0)
        tpu.wait_dma2(sem.value, *pair, device_id=zero, core_id=zero)
        return []
    tpu.wait_dma2(sem.value, *pair, device_id=_here(copy.device, seen))
    return []


# ops that read no memory: a value they make can be made again where a wait needs it
_REMADE = ("arith.", "tpu.device_id", *VIEWS)


def _here(value: ir.Value | None, seen: Sequence[ir.Block]) -> ir.Value | None:
    """``value`` usable at the insertion point: itself where it is in scope (``seen``), else
    its defining views and integer arithmetic emitted again here (a copy started in a branch:
    upstream's wait names the descriptor's buffers and device, made where the descriptor is);
    None when it comes from a block argument out of scope, or from another kind of op."""
    if value is None or _visible(value, seen):
        return value
    owner = value.owner
    if isinstance(owner, ir.Block) or not owner.operation.name.startswith(_REMADE):
        return None
    operands = [_here(v, seen) for v in owner.operation.operands]
    if any(v is None for v in operands):
        return None
    clone = owner.operation.clone()
    for k, v in enumerate(operands):
        clone.operands[k] = v
    return clone.results[ir.OpResult(value).result_number]


def _guards(blocks: Sequence[ir.Block]) -> list[tuple[ir.Value, bool]]:
    """The condition of each ``scf.if`` around the innermost of ``blocks`` (``_blocks_above``),
    and whether it is in the ``then`` branch: a wait under the conditions its copy started
    under is that copy's (the guide's reduce-scatter starts two copies to one buffer on one
    semaphore, each under its own ``pl.when``, and waits for each under the same one)."""
    out = []
    for block in blocks:
        op = block.owner.operation
        if op.name == "scf.if":
            out.append((op.operands[0], block == op.regions[0].blocks[0]))
    return out


def _same(a: ir.Value, b: ir.Value, depth: int = 8) -> bool:
    """Whether ``a`` and ``b`` are one value, or made alike by ops of the same kind and
    attributes from values that are the same (each ``pl.when`` emits its condition again)."""
    if a == b:
        return True
    if depth == 0 or isinstance(a.owner, ir.Block) or isinstance(b.owner, ir.Block):
        return False
    x, y = a.owner.operation, b.owner.operation
    return (
        x.name == y.name
        and ir.OpResult(a).result_number == ir.OpResult(b).result_number
        and [(k, str(x.attributes[k])) for k in x.attributes]
        == [(k, str(y.attributes[k])) for k in y.attributes]
        and len(x.operands) == len(y.operands)
        and all(_same(u, v, depth - 1) for u, v in zip(x.operands, y.operands, strict=True))
    )


def _blocks_above(block: ir.Block) -> list[ir.Block]:
    """``block`` and the blocks around it, innermost first."""
    out, op = [block], block.owner.operation
    while op.name != "func.func":
        out.append(op.block)
        op = op.block.owner.operation
    return out


def _visible(value: ir.Value | None, blocks: Sequence[ir.Block]) -> bool:
    """Whether ``value``, emitted before, can be used in the innermost of ``blocks``: it is
    defined in one of them (emission follows the program's order)."""
    if value is None:
        return False
    owner = value.owner
    block = owner if isinstance(owner, ir.Block) else owner.operation.block
    return any(block == b for b in blocks)
