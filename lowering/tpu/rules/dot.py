"""Mosaic rule for ``dot``: ``tpu.matmul`` as upstream's ``dot_general`` lowering writes it.

A 2-D dot takes each side as upstream's ``dot_general`` does: a ``tpu.transpose`` feeding it
(the importer's transpose of a contraction over the other dim) is folded into the matmul's
dimension numbers, and bfloat16 operands the importer widened for XLA:CPU go in narrow; so the
module is upstream's, with its ``precision`` (``#tpu.contract_precision<fp32>`` for HIGHEST)
and, with ``fuse_transposed_lhs_in_matmul``, its ``transpose_lhs_hint``. Batched dots collapse
their leading dims into one. A matrix-vector product against a transposed ``(1, k)`` row not
of two float32 operands is upstream's multiply and reduce.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.core import Op
from minipallas.ir.types import ArrayType
from minipallas.lowering.compat.jaxlib_shim import arith, ir, tpu, vector
from minipallas.lowering.tpu import emit
from minipallas.lowering.tpu.context import LoweringContext, rule, unsupported


def _type(op: Op, i: int = 0) -> ArrayType:
    return op.operands[i].type


_DOT_DIMS = "#tpu.dot_dimension_numbers<[1], [0], [0], [1], [0, 0, 1, 1], [], []>"
# (lhs, rhs contracting dim) -> upstream's numbers for a 2-D dot_general contracting them
_DOT_DIMS_2D = {
    (1, 0): _DOT_DIMS,
    (0, 0): "#tpu.dot_dimension_numbers<[0], [0], [1], [1], [0, 1, 1, 1], [], []>",
    (1, 1): "#tpu.dot_dimension_numbers<[1], [1], [0], [0], [0, 0, 1, 0], [], []>",
    (0, 1): "#tpu.dot_dimension_numbers<[0], [1], [1], [0], [0, 1, 1, 0], [], []>",
}
# (B, m, k) x (B, k, n): upstream's numbers for a dot_general with batch dimensions (0, 0)
_BATCHED_DOT_DIMS = "#tpu.dot_dimension_numbers<[2], [1], [1], [2], [0, 0, 0, 1, 1, 2], [0], [0]>"


# lax.Precision per operand -> Mosaic's contraction precision (None: Mosaic's default, one
# bfloat16 pass); upstream refuses the others (HIGH) and two different precisions
_CONTRACT_PRECISION = {"default": None, "highest": "#tpu.contract_precision<fp32>"}


@rule("dot")
def dot(ctx: LoweringContext, op: Op, x: ir.Value, y: ir.Value) -> Sequence[ir.Value]:
    """``tpu.matmul`` of ``(m, k) x (k, n)`` into a zero ``(m, n)`` accumulator; with batch
    dimensions, of ``(B, m, k) x (B, k, n)``, several leading ones collapsed into one
    (``vector.shape_cast``) and restored after, as upstream's batched ``dot_general``.
    ``precision`` becomes the matmul's contraction precision, as upstream's. A matrix-vector
    product against a transposed row (``x @ v.T``, ``v`` of shape ``(1, k)``) not of two
    float32 operands is upstream's multiply and reduce (``_matvec``)."""
    out = op.result.type
    a, b = _type(op, 0), _type(op, 1)
    batch = a.shape[:-2]
    if dtypes.is_unsigned(_type(op).dtype):
        raise unsupported(
            op,
            "dot of unsigned integers has no Mosaic TPU lowering (upstream: matmul "
            "interprets integer inputs as signed)",
            fix="convert the operands to a signed type before the dot",
        )
    row = _transposed_row(y)
    if not batch and row is not None and (a.dtype, b.dtype) != ("float32", "float32"):
        return [_matvec(op, x, row)]
    precision = _precision(op)
    if not batch:
        (x, lhs_t), (y, rhs_t) = _untransposed(x), _untransposed(y)
        x, y = _unwidened(x, y)
        dims = _DOT_DIMS_2D[0 if lhs_t else 1, 1 if rhs_t else 0]
        return [_matmul(x, y, out, dims, precision, hint=lhs_t and ctx.fuse_transposed_lhs)]
    n = int(np.prod(batch))
    x = emit.shape_cast(x, ArrayType((n, *a.shape[-2:]), a.dtype))
    y = emit.shape_cast(y, ArrayType((n, *b.shape[-2:]), b.dtype))
    flat = ArrayType((n, *out.shape[-2:]), out.dtype)
    return [emit.shape_cast(_matmul(x, y, flat, _BATCHED_DOT_DIMS, precision), out)]


def _precision(op: Op) -> ir.Attribute | None:
    """The matmul's ``precision`` attribute, refusing what upstream's rule refuses."""
    lhs, rhs = op.attrs.get("precision", ("default", "default"))
    if lhs != rhs:
        raise unsupported(
            op,
            "Per-operand dot precision unsupported (upstream's Mosaic lowering)",
            fix="give both operands one precision: lax.Precision.DEFAULT or HIGHEST",
        )
    if lhs not in _CONTRACT_PRECISION:
        raise unsupported(
            op,
            f"Unsupported dot precision: {lhs.upper()} (upstream's Mosaic lowering)",
            fix="use lax.Precision.DEFAULT (one bfloat16 pass) or HIGHEST (float32)",
        )
    attr = _CONTRACT_PRECISION[lhs]
    return None if attr is None else ir.Attribute.parse(attr)


def _untransposed(x: ir.Value) -> tuple[ir.Value, bool]:
    """A 2-D operand as upstream's ``dot_general`` takes it: the source of a ``tpu.transpose``
    feeding it (the importer's transpose of a contraction over the other dim), and whether it
    was one; the matmul then contracts the source's other dim, as upstream's does."""
    owner = x.owner
    if isinstance(owner, ir.OpView) and owner.operation.name == "tpu.transpose":
        return owner.operands[0], True
    return x, False


def _unwidened(x: ir.Value, y: ir.Value) -> tuple[ir.Value, ir.Value]:
    """Both operands' narrower sources when both are ``arith.extf`` of one float type (the
    importer widens a bfloat16 dot to float32 where XLA:CPU does): the products of widened
    values are the narrow ones' products, exact in the float32 accumulator at any precision,
    so the matmul takes the sources, as upstream's takes its bfloat16 operands."""
    owners = [v.owner for v in (x, y)]
    if not all(isinstance(o, ir.OpView) and o.operation.name == "arith.extf" for o in owners):
        return x, y
    a, b = (o.operands[0] for o in owners)
    same = ir.VectorType(a.type).element_type == ir.VectorType(b.type).element_type
    return (a, b) if same else (x, y)


def _transposed_row(y: ir.Value) -> ir.Value | None:
    """The ``(1, k)`` row whose transpose ``y`` is (the importer's transpose of a ``dot_general``
    contracting both operands' dim 1), or None."""
    owner = y.owner
    if not (isinstance(owner, ir.OpView) and owner.operation.name == "tpu.transpose"):
        return None
    source = owner.operands[0]
    shape = ir.VectorType(source.type).shape
    return source if len(shape) == 2 and shape[0] == 1 else None


def _matvec(op: Op, x: ir.Value, row: ir.Value) -> ir.Value:
    """Upstream's matrix-vector product: the row broadcast to the matrix's shape, both widened
    to float32 when the result is, ``mulf`` and an add reduction over the columns into zeros,
    then the result's ``(m, 1)`` shape."""
    a, out = _type(op, 0), op.result.type
    if a.dtype != out.dtype and out.dtype != "float32":
        raise unsupported(
            op,
            f"Unsupported preferred_element_type={out.dtype} (upstream's Mosaic lowering of a "
            "matrix-vector dot)",
            fix="accumulate in float32 (preferred_element_type=jnp.float32)",
        )
    row = vector.broadcast(emit.value_type(ArrayType(a.shape, a.dtype)), row)
    if a.dtype != out.dtype:
        wide = emit.value_type(ArrayType(a.shape, out.dtype))
        x, row = arith.extf(wide, x), arith.extf(wide, row)
    zeros = emit.constant(0, ArrayType(a.shape[:1], out.dtype))
    kind = ir.Attribute.parse("#vector.kind<add>")
    sums = vector.multi_reduction(kind, arith.mulf(x, row), zeros, [1])
    return emit.shape_cast(sums, out)


def _matmul(
    x: ir.Value,
    y: ir.Value,
    out: ArrayType,
    dims: str,
    precision: ir.Attribute | None,
    hint: bool = False,
) -> ir.Value:
    """``tpu.matmul`` into zeros; ``hint`` is upstream's ``transpose_lhs_hint`` (a left side
    contracted over its first dim, with ``fuse_transposed_lhs_in_matmul``)."""
    acc = emit.constant(0, out)
    numbers = ir.Attribute.parse(dims)
    return tpu.matmul(
        emit.value_type(out),
        x,
        y,
        acc,
        transpose_lhs_hint=hint,
        dimension_numbers=numbers,
        precision=precision,
    )
