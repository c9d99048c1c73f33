"""The Mosaic rule for ``platform_index``: upstream Pallas TPU's choice, the first branch that
is the default or names ``mosaic``. The range analysis (``ranges``) knows the same constant, so
a ``cond`` on it lowers the chosen branch alone, as upstream's does."""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir.core import Op
from minipallas.ir.opset.platform import mosaic_branch
from minipallas.lowering.compat.jaxlib_shim import ir
from minipallas.lowering.tpu import emit
from minipallas.lowering.tpu.context import LoweringContext, rule, unsupported


@rule("platform_index")
def platform_index(ctx: LoweringContext, op: Op) -> Sequence[ir.Value]:
    branch = mosaic_branch(op.attrs["platforms"])
    if branch is None:
        raise unsupported(
            op,
            f"no mosaic or default branch among {op.attrs['platforms']} (upstream: 'No mosaic "
            "or default platform indexing rule found.')",
            fix="give lax.platform_dependent a mosaic= or default= branch",
        )
    return [emit.i32(branch)]
