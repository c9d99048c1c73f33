"""``argmax`` / ``argmin`` in Mosaic as upstream Pallas TPU lowers them, ``sort`` and ``top_k``
rejected (upstream has no rule for either).

``argmax`` is ``tpu.reduce_index`` with ``#tpu.reduction_kind<arg_max>`` along the axis; a
rank-1 operand goes through a leading unit dim and ``vector.extract``, as upstream does (Mosaic
has no 0-d vectors). Upstream takes float32 operands and int32 indices only; so does
minipallas. Which index the TPU picks for NaNs and ties is the hardware's; without a TPU,
minipallas cannot check it against its meaning (the first NaN, else the first extreme).
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir.core import Op
from minipallas.ir.types import ArrayType
from minipallas.lowering.compat.jaxlib_shim import ir, tpu, vector
from minipallas.lowering.tpu import emit
from minipallas.lowering.tpu.context import LoweringContext, no_mosaic_rule, rule, unsupported


@rule("argmax", "argmin")
def argmax(ctx: LoweringContext, op: Op, x: ir.Value) -> Sequence[ir.Value]:
    t: ArrayType = op.operands[0].type
    index = op.result.type.dtype
    if t.dtype != "float32" or index != "int32":
        raise unsupported(
            op,
            f"{op.name} of {t.dtype} into {index} indices has no Mosaic TPU lowering "
            "(upstream: float32 operands and int32 indices only)",
            fix="convert the operand to float32 (exact for up to 24-bit integers) and ask for "
            "int32 indices",
        )
    axis = op.attrs["axis"]
    one_d = t.ndim == 1
    if one_d:
        x = emit.shape_cast(x, ArrayType((1, *t.shape), t.dtype))
        axis += 1
    out = ArrayType((1,) if one_d else op.result.type.shape, "int32")
    kind = ir.Attribute.parse(f"#tpu.reduction_kind<arg_{op.name[3:]}>")
    y = tpu.reduce_index(emit.value_type(out), x, axis, kind)
    return [vector.extract(y, [], [0]) if one_d else y]


@rule("sort", "top_k")
def sort(ctx: LoweringContext, op: Op, *xs: ir.Value) -> Sequence[ir.Value]:
    raise no_mosaic_rule(op, fix=f"{op.name} outside the kernel, on the kernel's inputs or outputs")
