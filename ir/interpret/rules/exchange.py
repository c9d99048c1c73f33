"""``exchange`` and ``gather_rows`` in the reference interpreter: refused. Each is a collective
of every device of a mesh, made by compiling a kernel that spans devices
(``minipallas.kernels.devices``); one program run alone has no devices to talk to. The kernel
it came from runs in the simulator, where each remote copy is the ``dma_start`` it was."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from minipallas.ir.core import Op
from minipallas.ir.interpret.engine import Interpreter, rule

SIMULATE = (
    "run the kernel the collective was compiled from with collectives='simulate' "
    "(mp.interpret(mp.from_jaxpr(jax.make_jaxpr(f)(x)), x, collectives='simulate')), or this "
    "program under jax.shard_map (jax.jit(mp.on_devices(f))(x))"
)


@rule("exchange", "gather_rows")
def exchange(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    raise interp.error(op, "a collective of every device of a mesh, run by one program alone",
                       fix=SIMULATE)  # fmt: skip
