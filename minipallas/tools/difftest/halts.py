"""What halts a TPU: a block index past the end of its array, found on the CPU before the chip.

Pallas TPU copies each block with a DMA from the window its index map names. A window that
starts past the end of the array either makes the DMA engine fault and halt the core
("RuntimeUnexpectedCoreHalt": the process holding the chip can run nothing after it) or reads
and writes whatever memory lies there (measured on a v5e: a block (1, 1) of a one-block-wide
input gave both Pallas lowerings the same garbage), upstream's kernels and minipallas's alike.
Upstream's interpret mode and minipallas's CPU path clamp such an index instead
(``lax.dynamic_slice``), so the kernel runs there, with other values.

``out_of_bounds_block(kernel, operands)`` is the kernel checks' block check
(``checks.blocks``: every windowed operand's index map at every grid point) as one line: the
first block that starts outside its array (a partial last block is fine), or an index map
whose int32 arithmetic wraps, or None. ``fuzz-tpu`` and the hardware check ask it before a
kernel reaches the chip.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from minipallas.ir.kernel_spec import Kernel
from minipallas.tools.difftest.checks.blocks import Operands, block_bugs


def out_of_bounds_block(kernel: Kernel, operands: Sequence[Any]) -> str | None:
    """The first block whose window starts outside its array, described; None if every
    block of every grid point lies inside (``operands``: dynamic grid sizes, scalar-prefetch
    arrays, inputs, as the kernel's programs take them)."""
    for bug in block_bugs(kernel, Operands.of(kernel, operands)):
        if not bug.latent:
            return f"{bug.buffer} at grid point {list(bug.point)}: {bug.message}"
    return None
