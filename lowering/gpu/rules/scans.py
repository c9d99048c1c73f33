"""The cumulative ops and ``reduce_prod`` on the Triton path.

``cumsum`` is upstream's: a ``tt.scan`` along the axis whose region adds (``arith.addf`` /
``addi``). As upstream, a reverse ``cumsum`` is rejected, and so are ``cumprod``, ``cummax``,
``cummin`` and ``reduce_prod`` (upstream has no rule for them).

Where minipallas's meaning and upstream's part ways, minipallas's wins: XLA starts each window
from +0, so a float ``cumsum`` never gives -0.0 (except along an axis of one float32/float16
element, which XLA leaves as it is); the scan's result gets ``+ 0.0``, which turns -0.0 into
+0.0 and changes nothing else. Integer sums wrap, exact in any order; float sums match the
interpreter to rounding (Triton's scan adds in its own order, and does not flush subnormals).
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir import dtypes
from minipallas.ir.core import Op
from minipallas.ir.errors import PassError
from minipallas.lowering.gpu import emit
from minipallas.lowering.gpu.context import LoweringContext, rule
from minipallas.lowering.gpu.emit import arith, ir, tt
from minipallas.lowering.gpu.unsupported import no_triton_rule


@rule("cumsum")
def cumsum(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    t, axis = op.operands[0].type, op.attrs["axis"]
    if op.attrs["reverse"]:
        raise PassError(
            "a reverse cumsum has no Triton lowering (upstream: 'Reverse cumsum is not supported')",
            op=op.name,
            loc=op.loc,
            fix="compute it outside the kernel, or scan the block forward and subtract each "
            "prefix from the total (exact for integers)",
        )
    is_float = dtypes.is_float(t.dtype)
    scan = tt.ScanOp([x], axis)
    element = emit.element_type(t.dtype)
    body = scan.regions[0].blocks.append(element, element)
    with ir.InsertionPoint(body):
        tt.scan_return([(arith.addf if is_float else arith.addi)(*body.arguments)])
    y = scan.results[0]
    if is_float and not (t.shape[axis] == 1 and t.dtype != "bfloat16"):
        y = arith.addf(y, emit.like(0.0, y, t.dtype))
    return [y]


@rule("cumprod", "cummax", "cummin")
def cumulative(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    raise no_triton_rule(op, f"compute the {op.name} outside the kernel")


@rule("reduce_prod")
def reduce_prod(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    raise no_triton_rule(
        op, "compute the product outside the kernel, or multiply slices in a fori_loop"
    )
