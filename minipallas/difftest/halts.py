"""What halts a TPU: a block index past the end of its array, found on the CPU before the chip.

Pallas TPU copies each block with a DMA from the window its index map names. A window that
starts past the end of the array either makes the DMA engine fault and halt the core
("RuntimeUnexpectedCoreHalt": the process holding the chip can run nothing after it) or reads
and writes whatever memory lies there (measured on a v5e: a block (1, 1) of a one-block-wide
input gave both Pallas lowerings the same garbage), upstream's kernels and minipallas's alike.
Upstream's interpret mode and minipallas's CPU path clamp such an index instead
(``lax.dynamic_slice``), so the kernel runs there, with other values.

``out_of_bounds_block(kernel, operands)`` evaluates every windowed operand's index map at every
grid point with the reference interpreter and returns the first block that starts outside its
array (a partial last block is fine), or None. The difftest's TPU ways and ``fuzz-tpu`` ask it
before a kernel reaches the chip and report the kernel as ``out-of-bounds`` with that block.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from minipallas.ir.interpret import interpret
from minipallas.ir.kernel_spec import Kernel
from minipallas.ir.types import ANY


def out_of_bounds_block(kernel: Kernel, operands: Sequence[Any]) -> str | None:
    """The first block whose window starts past its array's end, described; None if every
    block of every grid point lies inside (``operands``: dynamic grid sizes, scalar-prefetch
    arrays, inputs, as the kernel's programs take them)."""
    n_dyn, n_pre = len(kernel.dynamic_axes), len(kernel.scalar_prefetch)
    sizes = iter(int(np.asarray(s)) for s in operands[:n_dyn])
    grid = [next(sizes) if n is None else n for n in kernel.grid]
    prefetch = [np.array(p, copy=True) for p in operands[n_dyn : n_dyn + n_pre]]
    specs = [("input", k, s) for k, s in enumerate(kernel.in_specs)]
    specs += [("output", k, s) for k, s in enumerate(kernel.out_specs)]
    for point in itertools.product(*(range(n) for n in grid)):
        for what, k, spec in specs:
            if spec.memory_space == ANY:
                continue  # not windowed: the kernel copies what it wants itself
            ids = [np.int32(i) for i in point]
            index = [int(v) for v in interpret(spec.index_map, *ids, *prefetch)]
            for d, (i, b) in enumerate(zip(index, spec.block_shape, strict=True)):
                extent = spec.array.shape[d] + sum(spec.pads[d])
                start = i if b is None or d in spec.element_dims else i * b
                if start < 0 or start >= extent:
                    return (
                        f"{what} {k} at grid point {list(point)}: block index {index} starts at "
                        f"element {start} of dimension {d}, past its {extent} elements"
                    )
    return None
