"""Rules for scoped allocation: ``run_scoped`` and the ``uninitialized`` value.

Each entry into a ``run_scoped`` body allocates fresh buffers (a loop around it gets new ones
every iteration), filled with ``dtypes.fill_value``; the ``uninitialized`` value discharge
starts an allocation from holds the same fill, so both forms of a program read the same.
Programs run together (``programs``) share a collective ``run_scoped``'s allocations.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.core import Op
from minipallas.ir.interpret.engine import Interpreter, rule


@rule("run_scoped")
def run_scoped(interp: Interpreter, op: Op, args: Sequence[Any]) -> list:
    (body,) = op.regions
    types = [p.type for p in op.param_group("allocs")]
    if op.attrs.get("collective_axes") and interp.together is not None:
        allocations = interp.together.shared_allocations(interp, op, types)  # the group's
    else:
        allocations = [interp.allocate(t) for t in types]
    return interp.run(body, [*allocations, *args])


@rule("uninitialized")
def uninitialized(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    t = op.attrs["type"]
    return (np.full(t.shape, dtypes.fill_value(t.dtype), dtypes.to_numpy(t.dtype)),)
