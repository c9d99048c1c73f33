"""Scratch promotion: scoped scratch that fits in registers becomes SSA values.

A ``run_scoped`` buffer of a Mosaic kernel lives in VMEM: every read is a ``vector.load``,
every write a ``tpu.vector_store``. When the buffer is small and only accessed at static
windows, the kernel can keep it in vector registers instead. That is exactly partial
discharge: discharge the scoped allocations only (``discharge(body, should_discharge=False,
discharge_scoped=chosen)``) — operand and scratch refs stay refs — and clean up, which forwards
each write to the reads that follow it. The TPU target runs this pass for
``lower(..., target="tpu", promote_scratch=True)``; ``promote-scratch`` runs it on any IR.

Algorithm:
1. Walk every ``run_scoped``; an allocation is promotable when it is in VMEM (or names no
   memory space), holds at most ``budget`` bytes, and every use, through views and into
   regions, is a state op with a static indexer.
2. The predicate given to discharge is per ``RefType``: a type is promoted when some
   allocation of it is promotable and none is not (types cannot tell allocations apart).
3. ``cleanup`` the partially discharged body.
"""

from __future__ import annotations

import math

from minipallas.ir import dtypes, indexing
from minipallas.ir.core import Block, Function, Value
from minipallas.ir.effects import region_operand_map
from minipallas.ir.types import ANY, TPU_VMEM, RefType
from minipallas.passes.cleanup import cleanup
from minipallas.passes.discharge import discharge
from minipallas.passes.registry import INT, Option, register

# Half of the TensorCore's 64 vector registers of 8x128x32 bits: room left for temporaries.
REGISTER_BUDGET = 32 * 8 * 128 * 4
_STATE_OPS = ("get", "swap", "addupdate", "load", "store")


@register(
    "promote-scratch",
    Option("budget", INT, "the most bytes an allocation may hold to be promoted"),
    doc="register-sized, statically accessed run_scoped scratch discharged into SSA values",
)
def promote_scratch(fn: Function, *, budget: int = REGISTER_BUDGET) -> Function:
    """``fn`` with its promotable scoped allocations discharged (module doc); ``fn`` itself
    when there are none."""
    chosen = _chosen(fn, budget)
    if not any(t in chosen for t in _allocations(fn)):
        return fn
    pure = discharge(fn, should_discharge=False, discharge_scoped=lambda t: t in chosen)
    return cleanup(pure)


def promoted_count(fn: Function, budget: int = REGISTER_BUDGET) -> int:
    """How many scoped allocations of ``fn`` ``promote_scratch`` promotes."""
    chosen = _chosen(fn, budget)
    return sum(1 for t in _allocations(fn) if t in chosen)


def fits(t: RefType, budget: int = REGISTER_BUDGET) -> bool:
    nbytes = dtypes.itemsize(t.dtype) * max(1, math.prod(t.shape))
    return t.memory_space in (ANY, TPU_VMEM) and nbytes <= budget


def _allocations(fn: Function) -> list[RefType]:
    out = []
    for op in fn.walk():
        if op.name == "run_scoped":
            out += [p.type for p in op.param_group("allocs")]
    return out


def _chosen(fn: Function, budget: int) -> set[RefType]:
    """Allocation types with a promotable allocation and none that is not."""
    good: set[RefType] = set()
    bad: set[RefType] = set()
    for op in fn.walk():
        if op.name != "run_scoped":
            continue
        (region,) = op.regions
        for p in op.param_group("allocs"):
            ok = fits(p.type, budget) and static_uses(region, p)
            (good if ok else bad).add(p.type)
    return good - bad


def static_uses(block: Block, ref: Value) -> bool:
    """Every use of ``ref`` in ``block`` (regions and callees included) is a static access."""
    for op in block.ops:
        positions = [i for i, v in enumerate(op.operands) if v is ref]
        if not positions:
            continue
        if op.name in _STATE_OPS:
            if positions != [0] or not indexing.is_static(op.attrs["indexer"]):
                return False
        elif op.name == "call":
            callee = op.attrs["callee"]
            if not all(static_uses(callee.body, callee.params[i]) for i in positions):
                return False
        elif op.regions:
            for k, region in enumerate(op.regions):
                inner = {o: p for p, o in region_operand_map(op, k).items()}
                for i in positions:
                    if i in inner and not static_uses(region, region.params[inner[i]]):
                        return False
        else:  # a view, or anything else that hands the ref on
            return False
    return True
