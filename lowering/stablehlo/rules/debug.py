"""The StableHLO rule for ``debug_print``, as upstream lowers ``jax.debug.print`` on CPU: a
side-effecting ``xla_ffi_python_cpu_callback`` custom call on the operands, whose
``index`` names the Python function (``LoweringContext.host_callbacks``) that XLA runs on
their values; that function prints what the interpreter prints. As with upstream's
``ordered=False`` prints, XLA may run two prints in either order (no token orders them).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from minipallas.ir.core import Op
from minipallas.ir.errors import PassError
from minipallas.ir.interpret.rules.debug import show
from minipallas.lowering.compat.jaxlib_shim import ir, stablehlo
from minipallas.lowering.stablehlo.context import LoweringContext, rule


def _callback(op: Op, *arrays: object) -> tuple:
    show(op, arrays)
    return ()


@rule("debug_print")
def debug_print(ctx: LoweringContext, op: Op, *args: ir.Value) -> Sequence[ir.Value]:
    if ctx.host_callbacks is None:
        raise PassError(
            "prints through a host callback, which this lowering cannot register",
            op=op.name,
            loc=op.loc,
            fix="compile with minipallas.compile, which runs the callback",
        )
    index = len(ctx.host_callbacks)
    ctx.host_callbacks.append(functools.partial(_callback, op))
    config = {"index": ir.IntegerAttr.get(ir.IntegerType.get_unsigned(64), index)}
    stablehlo.CustomCallOp(
        [],
        list(args),
        "xla_ffi_python_cpu_callback",
        has_side_effect=True,
        backend_config=ir.DictAttr.get(config),
        api_version=ir.IntegerAttr.get(ir.IntegerType.get_signless(32), 4),
    )
    return []
