"""``argmax`` / ``argmin`` on the Triton path; ``sort`` and ``top_k`` rejected (upstream
Pallas's Triton lowering has no rule for either).

As upstream: a ``tt.reduce`` along the axis over pairs (value, int32 index), the indices a
``tt.make_range`` broadcast across the other dims; the pair kept is the better value, the
smaller index on a tie (so the order Triton combines in does not matter). Upstream only
accepts int32 indices, and so does minipallas.

Where minipallas's meaning and upstream's part ways, minipallas's wins: upstream compares with
ordered ``ogt``/``olt`` and keeps ``maxnumf``, so a NaN loses to every number; in minipallas
(as in XLA and numpy) the first NaN wins. So a NaN is better than any number and ties another
NaN, and values compare after subnormals are flushed to zero (XLA's comparisons flush: 1e-40
ties 0.0), which the comparisons see and the results never do.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.core import Op
from minipallas.ir.errors import PassError
from minipallas.lowering.gpu import emit
from minipallas.lowering.gpu.context import LoweringContext, rule
from minipallas.lowering.gpu.emit import arith, ir, math, tt
from minipallas.lowering.gpu.unsupported import no_triton_rule

_F, _P = arith.CmpFPredicate, arith.CmpIPredicate
_SMALLEST_NORMAL = float(np.finfo(np.float32).tiny)  # what XLA's comparisons flush below


@rule("argmax", "argmin")
def argmax(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    t, axis = op.operands[0].type, op.attrs["axis"]
    if op.result.type.dtype != "int32":
        raise PassError(
            f"{op.name} into {op.result.type.dtype} indices has no Triton lowering "
            "(upstream: '`index_type` must be i32')",
            op=op.name,
            loc=op.loc,
            fix="ask for int32 indices and convert them after",
        )
    if dtypes.is_float(t.dtype):
        tiny = emit.like(_SMALLEST_NORMAL, x, t.dtype)
        x = arith.select(arith.cmpf(_F.OLT, math.absf(x), tiny), emit.like(0.0, x, t.dtype), x)
    steps = tt.make_range(
        emit.shaped(emit.element_type("int32"), [t.shape[axis]]), 0, t.shape[axis]
    )
    index = emit.broadcast_to(emit.expand(steps, t.ndim, [axis]), t.shape)
    reduce_op = tt.ReduceOp([x, index], axis)
    element, i32 = emit.element_type(t.dtype), emit.element_type("int32")
    body = reduce_op.regions[0].blocks.append(element, i32, element, i32)
    with ir.InsertionPoint(body):
        v1, i1, v2, i2 = body.arguments
        first = _better(op.name == "argmax", t.dtype, v1, v2)
        second = _better(op.name == "argmax", t.dtype, v2, v1)
        tie = arith.minsi(i1, i2)
        chosen = arith.select(first, i1, arith.select(second, i2, tie))
        tt.reduce_return([arith.select(second, v2, v1), chosen])
    return [reduce_op.results[1]]


def _better(is_max: bool, dtype: str, a: ir.Value, b: ir.Value) -> ir.Value:
    """Whether ``a`` beats ``b``: larger (smaller) for argmax (argmin), a NaN beating numbers."""
    if dtypes.is_float(dtype):
        beats = arith.cmpf(_F.OGT if is_max else _F.OLT, a, b)
        a_nan, b_number = arith.cmpf(_F.UNO, a, a), arith.cmpf(_F.ORD, b, b)
        return arith.ori(beats, arith.andi(a_nan, b_number))
    signed = dtypes.is_signed(dtype)
    predicate = {(True, True): _P.sgt, (True, False): _P.ugt, (False, True): _P.slt}
    return arith.cmpi(predicate.get((is_max, signed), _P.ult), a, b)


@rule("sort", "top_k")
def sort(ctx: LoweringContext, op: Op, *xs: ir.Value) -> Sequence[ir.Value]:
    raise no_triton_rule(op, f"{op.name} outside the kernel, on its inputs or outputs")
