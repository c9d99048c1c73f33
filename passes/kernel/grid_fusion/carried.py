"""Scratch carried from sub-step to sub-step, kept in values inside a fused grid step.

Flash attention hands its running max, sum and accumulator from one grid step to the next in
scratch. Fused (``substeps``), sub-step ``s + 1`` reads what sub-step ``s`` stored: a VMEM store
and load per buffer per sub-step, on the chain that links the sub-steps. Partial discharge
removes them, the project's own discharge used as an optimization:

1. Pick the buffers (``threaded``): scratch the body both reads and writes, in VMEM, at most
   ``budget`` bytes in tiles (``vmem.tiled_bytes``: a 128x1 running max takes 64 KiB), every
   access a state op with a static window (``static_uses``; a DMA or a dynamic index keeps a
   buffer in memory). An output block that stays put along the fused axis and that the body
   reads and writes is an accumulator carried the same way (a sum of 2^24 floats adds each
   step's sum into one): given the operands' moves, it is picked by the same rules, within
   ``CARRIED_BYTES``.
2. Discharge each sub-step's body with respect to those buffers alone
   (``discharge(step, mask)``): they become array parameters, their final values its results;
   operand refs stay refs. A ``pl.when`` in the body becomes a ``cond`` returning the values.
3. The fused step reads each buffer once, threads its value through the sub-steps' calls, and
   writes it back once, for the next fused step.

Discharge moves values and never computes, so each element's float ops are the old ones in
the old order: the bits stay.
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir import dtypes, indexing
from minipallas.ir.builder import Builder
from minipallas.ir.core import Function, Value
from minipallas.ir.effects import Accum, Read, Write, effects_with_swap_reads
from minipallas.ir.kernel_spec import Kernel
from minipallas.ir.types import RefType
from minipallas.passes.discharge import discharge
from minipallas.passes.kernel.grid_fusion.index_maps import Motion
from minipallas.passes.kernel.grid_fusion.vmem import tiled_bytes
from minipallas.passes.promote_scratch import fits, static_uses

# promote_scratch's half of the 64 vector registers: a v5e keeps flash attention's 128-row
# max and sum there; its accumulator (32 KiB at d=64) fits too
CARRIED_BYTES = 32 * 8 * 128 * 4


def carried_buffers(kernel: Kernel) -> list[int]:
    """The body parameters of the scratch buffers the body both reads and writes."""
    return _read_and_written(kernel, _scratch(kernel))


def threaded(
    kernel: Kernel, budget: int, moves: Sequence[Motion] | None = None, guarded: bool = False
) -> tuple[bool, ...]:
    """Per body parameter, whether the fused body keeps it in values (step 1): carried scratch
    within ``budget``, and, given the operands' ``moves`` (inputs then outputs), the outputs
    whose block stays put along the fused axis within ``CARRIED_BYTES``. When sub-steps past
    the axis's end are ``guarded`` (a ``cond`` yields the values past them), no 1-D buffer of
    a packed dtype: Mosaic refuses such a yield ("Invalid input layout", bf16 and int8 alike;
    fuzz-tpu --aot, seed 4912)."""
    body = kernel.body
    most = dict.fromkeys(_scratch(kernel), budget)
    if moves is not None:
        first = len(kernel.scalar_prefetch) + kernel.num_inputs
        outputs = enumerate(moves[kernel.num_inputs :])
        most |= {first + j: CARRIED_BYTES for j, m in outputs if m.dim is None}
    chosen = {
        k
        for k in _read_and_written(kernel, list(most))
        if isinstance(t := body.param_types[k], RefType)
        and fits(t, most[k])
        and tiled_bytes(t.shape, t.dtype) <= most[k]
        and static_uses(body.body, body.params[k])
        and not (guarded and len(t.shape) == 1 and dtypes.itemsize(t.dtype) < 4)
    }
    return tuple(k in chosen for k in range(len(body.params)))


def _scratch(kernel: Kernel) -> range:
    return range(len(kernel.body.params) - len(kernel.scratch_types), len(kernel.body.params))


def _read_and_written(kernel: Kernel, positions: Sequence[int]) -> list[int]:
    found = effects_with_swap_reads(kernel.body)
    return [k for k in positions if Read(k) in found and (Write(k) in found or Accum(k) in found)]


class Threading:
    """The values of the threaded buffers through one fused body under construction."""

    def __init__(self, mask: Sequence[bool]) -> None:
        self.mask = tuple(mask)
        self.positions = [k for k, m in enumerate(mask) if m]
        self._discharged: dict[int, tuple[Function, Function]] = {}

    def __bool__(self) -> bool:
        return bool(self.positions)

    def step(self, fn: Function) -> Function:
        """``fn`` taking and returning the threaded buffers' values (step 2); one discharged
        copy per function, shared by the sub-steps that call it."""
        if not self.positions:
            return fn
        if id(fn) not in self._discharged:  # fn kept alive with it, so its id stays its own
            self._discharged[id(fn)] = (fn, discharge(fn, self.mask))
        return self._discharged[id(fn)][1]

    def load(self, b: Builder, refs: Sequence[Value]) -> list[Value]:
        """Each threaded buffer read whole, at the start of the fused step."""
        return [
            b.create("get", [refs[k]], {"indexer": indexing.full(refs[k].type.shape)}).result
            for k in self.positions
        ]

    def store(self, b: Builder, refs: Sequence[Value], values: Sequence[Value]) -> None:
        """Each threaded buffer written whole with its last value, at the end."""
        for k, value in zip(self.positions, values, strict=True):
            b.create("swap", [refs[k], value], {"indexer": indexing.full(refs[k].type.shape)})

    def arguments(self, views: Sequence[Value], values: Sequence[Value]) -> list[Value]:
        """A sub-step's arguments: its views, each threaded buffer's current value instead."""
        args = list(views)
        for k, value in zip(self.positions, values, strict=True):
            args[k] = value
        return args
