"""The rule for ``mesh_call``: a kernel body on every core of a mesh (``ir/opset/mesh.py``).

Each operand gets a fresh buffer that every core sees (inputs copied in; outputs holding the
fill value, or their aliased input), the body runs on each core with ``axis_index`` giving
the core's position, and the results are the output buffers. How the cores run is the
interpreter's ``collectives`` mode: ``"simulate"`` runs them together in the multi-program
interpreter (``programs``: shared collective allocations, barriers, semaphores, races and
deadlocks), under the interpreter's ``schedule``; by default they run one after another, as
upstream's ``interpret=True`` runs a kernel's grid (the collective-axes check has refused a
body that shares memory before anything runs).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.core import Op
from minipallas.ir.interpret.engine import Interpreter, Ref, rule
from minipallas.ir.interpret.programs import Programs


@rule("mesh_call")
def mesh_call(interp: Interpreter, op: Op, args: Sequence[Any]) -> list:
    callee, axes, shape = op.attrs["callee"], op.attrs["axes"], op.attrs["shape"]
    outs = callee.body.param_types[len(args) :]
    sources = {o: i for i, o in op.attrs.get("aliases", ())}
    buffers = [_buffer(interp, np.array(a), True) for a in args]
    for k, t in enumerate(outs):
        if k in sources:
            buffers.append(_buffer(interp, np.array(args[sources[k]]), True))
        else:
            fill = np.full(t.shape, dtypes.fill_value(t.dtype), dtypes.to_numpy(t.dtype))
            buffers.append(_buffer(interp, fill, False))

    if interp.collectives == "simulate":
        cores = Programs(shape, axes, interp.schedule, lambda ids: interp.at(ids, shape))
        cores.run(callee, buffers)
    else:
        for ids in np.ndindex(*shape):
            interp.at(ids, shape, axes).run(callee.body, buffers)
    return [np.array(b.data) for b in buffers[len(args) :]]


def _buffer(interp: Interpreter, data: np.ndarray, written: bool) -> Ref:
    return Ref(data, np.full(data.shape, written) if interp.tracking else None)
