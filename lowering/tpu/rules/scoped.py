"""Mosaic rules for scoped allocation: ``run_scoped`` is a ``tpu.region`` of ``memref.alloca``s.

The region bounds the allocations' lifetime, as ``run_scoped`` does: the body runs inside it
with one ``memref.alloca`` per allocated ref (VMEM unless the ref names SMEM; a ref with no
memory space lives in VMEM, the kernel's default), or one ``tpu.sem_alloc`` per semaphore ref,
and yields its results with ``tpu.yield``.
Collective axes never reach this rule: ``lower_to_mosaic`` runs the collective-axes check first,
which raises upstream Mosaic's ``NotImplementedError``.

``uninitialized`` appears only after scratch promotion (partial discharge): it is the fill
value minipallas gives fresh scratch (NaN, the integer minimum, False), as a constant.
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir.core import Op
from minipallas.ir.dtypes import fill_value
from minipallas.ir.types import RefType, is_semaphore
from minipallas.lowering.compat.jaxlib_shim import ir, memref, tpu
from minipallas.lowering.tpu import emit
from minipallas.lowering.tpu.context import Bound, LoweringContext, MemRef, rule


def allocate(t: RefType) -> MemRef:
    """A buffer for ``t``: ``memref.alloca``, or ``tpu.sem_alloc`` for semaphores."""
    t = emit.scratch_space(t)
    mem = emit.ref_memref_type(t)
    buffer = tpu.sem_alloc(mem) if is_semaphore(t) else memref.alloca(mem, [], [])
    return MemRef(buffer, t.dtype, t.memory_space, (False,) * t.ndim)


@rule("run_scoped")
def run_scoped(ctx: LoweringContext, op: Op, *args: Bound) -> Sequence[Bound]:
    return scoped_region(ctx, op, args, [p.type for p in op.param_group("allocs")])


def scoped_region(
    ctx: LoweringContext, op: Op, args: Sequence[Bound], types: Sequence[RefType]
) -> Sequence[Bound]:
    """``op``'s body in a ``tpu.region`` over fresh buffers of ``types`` (one device's rows of
    a kernel's allocations that span devices: ``remote``)."""
    (body,) = op.regions
    region = tpu.RegionOp([emit.value_type(r.type) for r in op.results])
    with ir.InsertionPoint(region.body):
        buffers = [allocate(t) for t in types]
        tpu.YieldOp(ctx.lower_block(body, [*buffers, *args]))
    return list(region.results)


@rule("uninitialized")
def uninitialized(ctx: LoweringContext, op: Op) -> Sequence[ir.Value]:
    t = op.attrs["type"]
    return [emit.constant(fill_value(t.dtype), t)]
