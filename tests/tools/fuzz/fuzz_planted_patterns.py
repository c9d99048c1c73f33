"""A wrong rewrite pattern planted for the fuzzer to catch (``test_fuzz_planted.py``).

``twice-is-plus-two``: a float ``x * 2.0`` becomes ``x + 2.0`` (wrong wherever ``x`` is not 2).
It is a ``@pattern``, no pass: every ``cleanup`` applies it, and it fires only on a multiply by
a 2.0 splat, which plain random programs rarely hold after discharge and cleanup.

Load with ``python -m minipallas.tools.fuzz.programs --load
tests/tools/fuzz/fuzz_planted_patterns.py --pass-pipeline=cleanup``.
"""

import numpy as np

from minipallas.ir import dtypes
from minipallas.passes.cleanup_patterns import pattern


def _is_two(value, defs) -> bool:
    op = defs.get(value)
    return op is not None and op.name == "constant" and bool(np.all(op.attrs["value"].array() == 2))


@pattern("mul")
def twice_is_plus_two(op, defs):
    """``x * 2.0`` -> ``x + 2.0`` for floats (wrong on purpose)."""
    if not dtypes.is_float(op.results[0].type.dtype):
        return None
    x, y = op.operands
    if _is_two(y, defs):
        return op.replace(name="add")
    if _is_two(x, defs):
        return op.replace(name="add")
    return None
