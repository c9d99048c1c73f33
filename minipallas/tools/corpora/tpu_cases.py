"""Kernels marked for the TPU: the hardware check (``bench/chip/tpu_check.py``) runs these on the
chip beside the suite and the six realistic kernels. A test whose kernel must be checked on
the chip adds its ``Case`` to ``TPU_CASES`` (one kernel source for minipallas and upstream, as
in ``suite.py``); the tests here run each on the CPU against upstream's interpret mode, so a
case is known good before it reaches the chip (``test_tpu_cases.py``).
"""

from __future__ import annotations

import numpy as np

from minipallas.tools.corpora.dma_cases import DMA_CASES
from minipallas.tools.corpora.suite import BF16, Case, inputs, normal


def negate_mask(ns, x_ref, o_ref):
    """Bool in, bool out: both cross the custom call as int32."""
    o_ref[...] = ~x_ref[...]


def scaled_rows(ns, x_ref, o_ref):
    """A 2-D grid over (8, 128) tiles, the row block index from ``program_id(0)``."""
    o_ref[...] = x_ref[...] * (ns.program_id(0) + 1).astype(ns.np.float32)


def rolled(ns, x_ref, o_ref):
    """``pltpu.roll``: a static shift, a shift from the grid index and a strided roll."""
    x = x_ref[...]
    o_ref[...] = (
        ns.pltpu.roll(x, 3, 1)
        + ns.pltpu.roll(x, ns.program_id(0) * 5 + 1, 0) * 2.0
        + ns.pltpu.roll(x, 1, 1, stride=1, stride_axis=0) * 4.0
    )


def repacked(ns, x_ref, h_ref, b_ref, o_ref):
    """``pltpu.bitcast`` across widths: an int32 block as int16 and bfloat16 blocks of twice
    the rows, and int8 back to int32 plus the int16 view's bits xor'ed back in."""
    x = x_ref[...]
    h = ns.pltpu.bitcast(x, ns.np.int16)
    h_ref[...] = h
    b_ref[...] = ns.pltpu.bitcast(x, ns.np.bfloat16)
    o_ref[...] = ns.pltpu.bitcast(ns.pltpu.bitcast(x, ns.np.int8), ns.np.int32) ^ (
        ns.pltpu.bitcast(h, ns.np.int32) + 1
    )


def bitcast_views(ns, x_ref, h_ref, b_ref):
    """Reads through ``ref.bitcast`` views of another width: the whole int32 block as int16,
    and a window of it as bfloat16 rows (a view of a view)."""
    h_ref[...] = x_ref.bitcast(ns.np.int16)[...]
    b_ref[...] = x_ref.at[8:16].bitcast(ns.np.bfloat16)[...]


def _ints(rng):
    return (rng.integers(-(2**31), 2**31, (16, 128), dtype=np.int64).astype(np.int32),)


def rolled_packed(ns, x_ref, i_ref, o_ref, j_ref):
    """``pltpu.roll`` of bfloat16 and int8 across sublanes and strided, which Mosaic refuses on
    packed dtypes (upstream fails); minipallas rolls them on 32 bits with the same bits."""
    o_ref[...] = ns.pltpu.roll(x_ref[...], 5, 0) + ns.pltpu.roll(x_ref[...], 3, 1)
    j_ref[...] = ns.pltpu.roll(i_ref[...], 7, 1, stride=2, stride_axis=0)


def _packed(rng):
    x = rng.standard_normal((32, 256), dtype=np.float32).astype(BF16)
    return x, rng.integers(-128, 128, (64, 256), dtype=np.int8)


def _mask(rng):
    return (rng.integers(0, 2, (16, 256)) == 1,)


TPU_CASES: list[Case] = [
    Case("negate_mask", negate_mask, ((16, 256), "bool"), _mask, grid=(2,),
         in_specs=[((8, 256), lambda i: (i, 0))], out_specs=((8, 256), lambda i: (i, 0))),
    Case("scaled_rows", scaled_rows, ((32, 256), "float32"), inputs(normal(32, 256)),
         grid=(4, 2), in_specs=[((8, 128), lambda i, j: (i, j))],
         out_specs=((8, 128), lambda i, j: (i, j))),
    Case("rolled", rolled, ((16, 256), "float32"), inputs(normal(16, 256)), grid=(2,),
         in_specs=[((8, 256), lambda i: (i, 0))], out_specs=((8, 256), lambda i: (i, 0))),
    Case("repacked", repacked,
         (((32, 128), "int16"), ((32, 128), "bfloat16"), ((16, 128), "int32")), _ints, grid=(2,),
         in_specs=[((8, 128), lambda i: (i, 0))],
         out_specs=[((16, 128), lambda i: (i, 0)), ((16, 128), lambda i: (i, 0)),
                    ((8, 128), lambda i: (i, 0))]),
    Case("bitcast_views", bitcast_views, (((64, 128), "int16"), ((32, 128), "bfloat16")), _ints,
         grid=(2,), in_specs=[((16, 128), lambda i: (0, 0))],
         out_specs=[((32, 128), lambda i: (i, 0)), ((16, 128), lambda i: (i, 0))]),
    Case("rolled_packed", rolled_packed, (((32, 256), "bfloat16"), ((64, 256), "int8")), _packed,
         grid=(2,), in_specs=[((16, 256), lambda i: (i, 0)), ((32, 256), lambda i: (i, 0))],
         out_specs=[((16, 256), lambda i: (i, 0)), ((32, 256), lambda i: (i, 0))]),
    *DMA_CASES,  # async copies (dma_cases.py)
]  # fmt: skip
