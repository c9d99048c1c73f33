"""minipallas's IR: SSA values, ops with regions, ``Ref`` types and scoped allocation.

Design decision — regions are *closed*. A region (``Block``) sees only its own parameters and
the values it defines; whatever it needs from outside, refs included, is passed as an operand
of the op that owns the region and bound to a region parameter. This is how jaxprs work, and it
is chosen for the passes that come after the IR:

- effects are attributable: a write inside a ``run_scoped`` or loop body to an outer ref is a
  write to a numbered operand of that op, so the effects analysis reports it at an operand
  position (upstream's ``_run_scoped_abstract_eval`` does the same) with no scope walking;
- discharge is local: each region op's rule knows from its operand list exactly which refs
  flow in and must become carries or results;
- a scoped ref cannot silently escape its ``run_scoped``: the only way out of a region is
  through its yields (checked to be arrays) or an operand list (checked by the verifier).

The front end does the closure conversion: a traced body that uses an outer value gets it
added as an operand automatically.

Values compare by identity; types, attributes and indexers are frozen, hashable values. Ops are
never edited in place: passes build new IR.
"""

from minipallas.ir import opset as _opset  # noqa: F401  (registers every op)
from minipallas.ir.builder import Builder, infer_result_types, params
from minipallas.ir.core import Block, Function, Module, Op, Value
from minipallas.ir.indexing import Array, Dyn, Int, Slice
from minipallas.ir.literal import Literal
from minipallas.ir.location import UNKNOWN, Location
from minipallas.ir.opdef import OPS, OpDef
from minipallas.ir.types import (
    ANY,
    DMA_SEMAPHORE,
    GPU_GMEM,
    GPU_SMEM,
    MEMORY_SPACES,
    SEMAPHORE,
    TPU_SMEM,
    TPU_VMEM,
    ArrayType,
    MemorySpace,
    RefType,
    Type,
)

__all__ = [
    "ANY",
    "DMA_SEMAPHORE",
    "GPU_GMEM",
    "GPU_SMEM",
    "MEMORY_SPACES",
    "OPS",
    "SEMAPHORE",
    "TPU_SMEM",
    "TPU_VMEM",
    "UNKNOWN",
    "Array",
    "ArrayType",
    "Block",
    "Builder",
    "Dyn",
    "Function",
    "Int",
    "Literal",
    "Location",
    "MemorySpace",
    "Module",
    "Op",
    "OpDef",
    "RefType",
    "Slice",
    "Type",
    "Value",
    "infer_result_types",
    "params",
]
