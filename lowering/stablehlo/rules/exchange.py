"""``exchange`` and ``gather_rows`` in a StableHLO module of one program: refused. Each is a
collective of every device of a mesh (``ir/opset/exchange.py``), which ``to_jax`` emits as
``lax.ppermute`` or ``lax.all_gather`` under ``jax.shard_map``
(``minipallas.kernels.devices.on_devices``)."""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir.core import Op
from minipallas.ir.errors import PassError
from minipallas.ir.interpret.rules.exchange import SIMULATE
from minipallas.lowering.compat.jaxlib_shim import ir
from minipallas.lowering.stablehlo.context import LoweringContext, rule


@rule("exchange", "gather_rows")
def exchange(ctx: LoweringContext, op: Op) -> Sequence[ir.Value]:
    raise PassError("a collective of every device of a mesh, lowered as one program", op=op.name,
                    loc=op.loc, fix=SIMULATE)  # fmt: skip
