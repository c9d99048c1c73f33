"""Kernels marked for the TPU: the hardware check (``bench/tpu_check.py``) runs these on the
chip beside the suite and the six realistic kernels. A test whose kernel must be checked on
the chip adds its ``Case`` to ``TPU_CASES`` (one kernel source for minipallas and upstream, as
in ``suite.py``); the tests here run each on the CPU against upstream's interpret mode, so a
case is known good before it reaches the chip (``test_tpu_cases.py``).
"""

from __future__ import annotations

from dma_cases import DMA_CASES
from suite import Case, inputs, normal


def negate_mask(ns, x_ref, o_ref):
    """Bool in, bool out: both cross the custom call as int32."""
    o_ref[...] = ~x_ref[...]


def scaled_rows(ns, x_ref, o_ref):
    """A 2-D grid over (8, 128) tiles, the row block index from ``program_id(0)``."""
    o_ref[...] = x_ref[...] * (ns.program_id(0) + 1).astype(ns.np.float32)


def _mask(rng):
    return (rng.integers(0, 2, (16, 256)) == 1,)


TPU_CASES: list[Case] = [
    Case("negate_mask", negate_mask, ((16, 256), "bool"), _mask, grid=(2,),
         in_specs=[((8, 256), lambda i: (i, 0))], out_specs=((8, 256), lambda i: (i, 0))),
    Case("scaled_rows", scaled_rows, ((32, 256), "float32"), inputs(normal(32, 256)),
         grid=(4, 2), in_specs=[((8, 128), lambda i, j: (i, j))],
         out_specs=((8, 128), lambda i, j: (i, j))),
    *DMA_CASES,  # async copies (dma_cases.py)
]  # fmt: skip
