"""The MLIR element type of a minipallas dtype, as the three emitters share it.

Floats are ``f32`` / ``bf16`` / ``f16``; integers are signless (``i32``, ``i16``, ``i8``;
``uint32`` is ``i32`` and the rules pick unsigned ops from the dtype); ``bool`` is ``i1`` in
values. A target that differs says so around ``signless_type``: StableHLO marks unsigned, Mosaic
stores a ``bool`` as ``i32`` and Triton as ``i8``.
"""

from __future__ import annotations

from minipallas.ir import dtypes
from minipallas.lowering.compat.jaxlib_shim import ir

WIDTH = {"float32": 32, "bfloat16": 16, "float16": 16, "bool": 1}
WIDTH.update({d: 8 * dtypes.itemsize(d) for d in dtypes.NAMES if dtypes.is_int(d)})


def signless_type(dtype: str, bool_bits: int = 1) -> ir.Type:
    """The element type of ``dtype``, integers signless, ``bool`` an ``i{bool_bits}``."""
    if dtype == "float32":
        return ir.F32Type.get()
    if dtype == "bfloat16":
        return ir.BF16Type.get()
    if dtype == "float16":
        return ir.F16Type.get()
    if dtype == "bool":
        return ir.IntegerType.get_signless(bool_bits)
    return ir.IntegerType.get_signless(WIDTH[dtype])
