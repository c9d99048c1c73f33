"""An output block read before anything wrote it: undefined memory on a TPU, refused ahead of time.

Pallas TPU copies each input block from HBM into VMEM before a grid step and each output block
back after it, but never copies an output block *in*, even when ``input_output_aliases`` makes
it the very HBM buffer of an input. At the first step that visits an output block, the block
holds whatever VMEM held before. Measured on a v5e chip (``tests/lowering/tpu/chip_check.py``):
a kernel that swaps two aliased outputs by reading them returned the previous kernel's values,
upstream's module (the same text as minipallas's) as well; upstream's interpret mode and
minipallas's CPU path read the aliased inputs instead, so the two platforms disagree.

The check is the case that is undefined on every run, whatever the inputs:
1. the first grid step always visits fresh output blocks;
2. so an op at the body's top level (it runs at every step) that reads an output ref (``get``,
   ``load``, ``addupdate``, a ``swap`` whose old contents are used) before any op that may
   write that ref reads undefined memory at step 0.
Reads under a ``when`` or in a loop, and reads after a write that may not run (the accumulator
pattern: ``@when(k == 0): o[...] = 0`` then ``o[...] += ...``), are left alone; a ``call``'s
callee counts as its ops at the call's place.
"""

from __future__ import annotations

from minipallas.ir.core import Function, Value
from minipallas.ir.effects import EffectsAnalysis, Read
from minipallas.ir.kernel_spec import Kernel
from minipallas.ir.opdef import ACCUM, READ, WRITE
from minipallas.lowering.tpu.context import unsupported


def check_output_reads(kernel: Kernel, body: Function) -> None:
    """Raises at the first top-level read of an output ref that no earlier op may have written."""
    first = len(kernel.scalar_prefetch) + len(kernel.in_specs)
    outputs = body.params[first : first + len(kernel.out_specs)]
    _scan(kernel, body, {p: k for k, p in enumerate(outputs)}, set(range(len(outputs))))


def _scan(kernel: Kernel, body: Function, output_of: dict[Value, int], unwritten: set) -> None:
    """Steps 1-2 over ``body``'s top level, a ``call``'s callee read as if inlined (a fused
    grid step calls the old body once per sub-step); ``unwritten`` shrinks as outputs are
    written."""
    used = {v for op in body.body.ops for v in op.operands} | set(body.body.results)
    analysis = EffectsAnalysis()
    for op in body.body.ops:
        if op.name.startswith("ref.") and op.operands and op.operands[0] in output_of:
            output_of[op.results[0]] = output_of[op.operands[0]]  # a view of an output
            continue
        if op.name == "call":
            callee = op.attrs["callee"]
            pairs = zip(callee.params, op.operands, strict=True)
            inner = {p: output_of[v] for p, v in pairs if v in output_of}
            _scan(kernel, callee, inner, unwritten)
            continue
        own = analysis.op(op)
        if op.name == "swap" and op.results[0] in used:
            own = own | {Read(0)}
        touched = [(e.kind, output_of.get(op.operands[e.input])) for e in own]
        reads = {k for kind, k in touched if kind in (READ, ACCUM) and k is not None}
        if not op.regions and reads & unwritten:
            k = min(reads & unwritten)
            raise unsupported(
                op,
                f"reads output {k} of kernel '{kernel.name}' before anything writes it: on a "
                "TPU an output block is not loaded from HBM (not even when aliased to an "
                "input), so this reads whatever VMEM held",
                fix="read the input it is aliased to (input_output_aliases), or write the "
                "output block before reading it",
            )
        unwritten -= {k for kind, k in touched if kind in (WRITE, ACCUM) and k is not None}
