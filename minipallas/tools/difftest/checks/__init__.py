"""What the TPU will do with a kernel, found on the CPU: its bugs, each as a ``KernelBug``.

The CPU ways of the difftest follow upstream's interpret mode, which defines what the chip
leaves undefined (it clamps a block past its array, fills padding and scratch with NaN,
keeps every output block), so they agree on a wrong kernel. ``kernel_bugs(kernel, operands)``
looks for what would go wrong on the chip instead, in order:

1. ``blocks``: every grid point's blocks against their arrays (scalar-prefetch tables and
   int32 wrap in index maps included), and "parallel" axes whose points write one output
   block (a race a one-core chip hides: ``latent``);
2. ``pipeline``: the grid run as the chip moves its blocks, with every read of memory
   nothing wrote, every index out of range, every int32 wrap, every async copy misused and
   every wait nothing satisfies reported at its op and grid point; then again with scratch
   undefined whenever a "parallel" coordinate changes (scratch carried from another core's
   points: a latent race) and with other padding;
3. what the outputs owe to memory nothing defined: elements never written back
   (``unwritten-output``), and elements that change with the padding of a partial input
   block (``undefined-read``, located by a run where reading that padding is an error).

``program_bugs`` does this for every TPU ``pallas_call`` of an upstream jaxpr; ``aot`` adds
libtpu's ahead-of-time compile of upstream's kernels (``compile``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from minipallas.ir.kernel_spec import Kernel
from minipallas.tools.difftest.checks.blocks import Operands, block_bugs, windowed
from minipallas.tools.difftest.checks.bug import BUG_KINDS, KernelBug
from minipallas.tools.difftest.checks.pipeline import Result, run_pipeline
from minipallas.tools.difftest.undefined import bits, high_fill, low_fill

__all__ = ["BUG_KINDS", "KernelBug", "kernel_bugs"]


def kernel_bugs(kernel: Kernel, operands: Sequence[Any]) -> list[KernelBug]:
    """The bugs of ``kernel`` on ``operands`` (dynamic grid sizes, scalar-prefetch tables,
    inputs); empty when the chip would compute what its author meant, as far as the checks
    can see."""
    ops = Operands.of(kernel, operands)
    bugs = block_bugs(kernel, ops)
    if any(not b.latent for b in bugs):
        return bugs  # a block outside its array: the pipeline cannot even be modelled
    n = len(kernel.in_specs)
    first = run_pipeline(kernel, ops, [high_fill] * n)
    if first.bug is not None:
        return [*bugs, first.bug]
    split = run_pipeline(kernel, ops, [low_fill] * n, split=True)
    if split.bug is not None:
        return [*bugs, _carried(split.bug)]
    return [*bugs, *_unwritten(kernel, first), *_padding(kernel, ops, first, split)]


def _carried(bug: KernelBug) -> KernelBug:
    """An undefined read that only the split run makes: scratch from another core's points."""
    if bug.kind != "undefined-read" or not bug.buffer.startswith("scratch"):
        return bug
    return dataclasses.replace(
        bug,
        kind="race",
        message=f"{bug.message}: it holds what earlier points of a parallel axis wrote, "
        "which a chip that splits the axis among its cores computes on another core",
        fix="initialize the scratch at the first point of the arbitrary axes (pl.when), or "
        "mark the axis that carries it 'arbitrary'",
        latent=True,
    )


def _unwritten(kernel: Kernel, result: Result) -> list[KernelBug]:
    bugs = []
    for k, defined in enumerate(result.defined):
        missing = ~defined
        if missing.any():
            at = [int(i) for i in np.argwhere(missing)[0]]
            bugs.append(
                KernelBug(
                    "unwritten-output",
                    f"{int(missing.sum())} of {missing.size} elements are never written "
                    f"(the first at {at}): the chip returns whatever memory held",
                    kernel=kernel.name,
                    buffer=f"output {k}",
                    fix="cover the whole output with the grid's blocks, and write every "
                    "element of each block",
                )
            )
    return bugs


def _padding(kernel: Kernel, ops: Operands, high: Result, low: Result) -> list[KernelBug]:
    """Outputs that change with the padding fill: which input's padding, and where it is read."""
    if not _differs(high, low):
        return []
    names = [name for name, _ in windowed(kernel)]
    n = len(kernel.in_specs)
    for k in range(n):
        if f"input {k}" not in names:
            continue
        fills = [high_fill] * n
        fills[k] = low_fill
        if not _differs(high, run_pipeline(kernel, ops, fills)):
            continue
        read = run_pipeline(kernel, ops, [high_fill] * n, strict=k).bug
        where = (read.where, read.point) if read is not None else ("", None)
        return [
            KernelBug(
                "undefined-read",
                "the outputs depend on the padding of a partial block (past the array's "
                "end), which on the chip is whatever VMEM held",
                kernel=kernel.name,
                where=where[0],
                point=where[1],
                buffer=f"padding of input {k}",
                fix="mask the padding before it enters a sum, a max or a dot (e.g. "
                "jnp.where(row < n - start, x, 0)), or choose a block that divides the array",
            )
        ]
    return []


def _differs(a: Result, b: Result) -> bool:
    """Whether an output element ``a`` defines has other bits in ``b``."""
    pairs = zip(a.outputs, b.outputs, a.defined, strict=True)
    return any(((bits(x) != bits(y)) & keep).any() for x, y, keep in pairs)
