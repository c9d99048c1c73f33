"""Scratch promotion: scoped scratch that fits in registers becomes SSA vector values.

A ``run_scoped`` buffer lives in VMEM: every read is a ``vector.load``, every write a
``tpu.vector_store``. When the buffer is small and only accessed at static windows, the
kernel can keep it in vector registers instead. That is exactly partial discharge: discharge
the scoped allocations only (``discharge(body, should_discharge=False,
discharge_scoped=fits)``) — operand and scratch refs stay refs — and clean up, which forwards
each write to the reads that follow it.

Algorithm:
1. Walk every ``run_scoped``; an allocation is promotable when it is in VMEM (or names no
   memory space), holds at most ``REGISTER_BUDGET`` bytes, and every use, through views and
   into regions, is a state op with a static indexer.
2. The predicate given to discharge is per ``RefType``: a type is promoted when some
   allocation of it is promotable and none is not (types cannot tell allocations apart).
3. ``cleanup`` the partially discharged body.
"""

from __future__ import annotations

from dataclasses import dataclass

from minipallas.ir import dtypes, indexing
from minipallas.ir.core import Block, Function, Value
from minipallas.ir.effects import region_operand_map
from minipallas.ir.types import ANY, TPU_VMEM, RefType
from minipallas.passes.cleanup import cleanup
from minipallas.passes.discharge import discharge

# Half of the TensorCore's 64 vector registers of 8x128x32 bits: room left for temporaries.
REGISTER_BUDGET = 32 * 8 * 128 * 4
_STATE_OPS = ("get", "swap", "addupdate", "load", "store")


@dataclass(frozen=True)
class Promotion:
    """The promoted body and how many scoped allocations it no longer has."""

    body: Function
    promoted: int


@dataclass(frozen=True)
class PromotionReport:
    """What promotion changed in the emitted module: allocations promoted, and the MLIR op
    count of the kernel module without and with promotion (both canonicalized)."""

    promoted: int
    ops_without: int
    ops_with: int

    @property
    def difference(self) -> int:
        return self.ops_with - self.ops_without

    def __str__(self) -> str:
        return (
            f"promoted {self.promoted} scratch buffer(s) to registers: "
            f"{self.ops_without} -> {self.ops_with} ops ({self.difference:+d})"
        )


def promote_scratch(body: Function) -> Promotion:
    """``body`` with its register-sized, statically accessed scoped scratch discharged."""

    good, bad = _classify(body)
    chosen = good - bad
    promoted = sum(1 for t in _allocations(body) if t in chosen)
    if not promoted:
        return Promotion(body, 0)
    pure = discharge(body, should_discharge=False, discharge_scoped=lambda t: t in chosen)
    return Promotion(cleanup(pure), promoted)


def fits(t: RefType) -> bool:
    nbytes = dtypes.itemsize(t.dtype) * max(1, _size(t.shape))
    return t.memory_space in (ANY, TPU_VMEM) and nbytes <= REGISTER_BUDGET


def _size(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _allocations(fn: Function) -> list[RefType]:
    out = []
    for op in fn.walk():
        if op.name == "run_scoped":
            (region,) = op.regions
            out += [p.type for p in region.params[: len(region.params) - len(op.operands)]]
    return out


def _classify(fn: Function) -> tuple[set[RefType], set[RefType]]:
    """Allocation types with a promotable allocation, and with one that is not."""
    good: set[RefType] = set()
    bad: set[RefType] = set()
    for op in fn.walk():
        if op.name != "run_scoped":
            continue
        (region,) = op.regions
        for p in region.params[: len(region.params) - len(op.operands)]:
            ok = fits(p.type) and _static_uses(region, p)
            (good if ok else bad).add(p.type)
    return good, bad


def _static_uses(block: Block, ref: Value) -> bool:
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
            if not all(_static_uses(callee.body, callee.params[i]) for i in positions):
                return False
        elif op.regions:
            for k, region in enumerate(op.regions):
                inner = {o: p for p, o in region_operand_map(op, k).items()}
                for i in positions:
                    if i in inner and not _static_uses(region, region.params[inner[i]]):
                        return False
        else:  # a view, or anything else that hands the ref on
            return False
    return True
