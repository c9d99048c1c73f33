"""Triton rules for the atomics (``ir/opset/atomic.py``): ``tt.atomic_rmw`` and
``tt.atomic_cas`` on the window's pointers (acquire-release, GPU scope, as upstream's).

Integer ``max``/``min`` are Triton's signed or unsigned ops by the dtype. Triton has no float
``max``/``min``; as upstream's lowering does, a float is compared as its bits: for a value
``>= 0`` the signed integer max (min) of the bits is the float max (min), for a negative one
the unsigned min (max). NaNs are not handled (upstream's neither). The masked-off and
past-the-end lanes are not touched.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from minipallas.ir import dtypes
from minipallas.ir.core import Op
from minipallas.ir.opset.atomic import COMBINE
from minipallas.lowering.gpu import emit
from minipallas.lowering.gpu.context import LoweringContext, rule
from minipallas.lowering.gpu.emit import arith, ir, tt
from minipallas.lowering.gpu.rules.state import _window

_SEM, _SCOPE = tt.MemSemantic.ACQUIRE_RELEASE, tt.MemSyncScope.GPU
# (combine, signed?) -> Triton's op on integers; floats: FADD, or the bit trick below
_INT_OPS = {
    ("add", True): tt.RMWOp.ADD, ("add", False): tt.RMWOp.ADD,
    ("max", True): tt.RMWOp.MAX, ("max", False): tt.RMWOp.UMAX,
    ("min", True): tt.RMWOp.MIN, ("min", False): tt.RMWOp.UMIN,
}  # fmt: skip
# float max/min through the bits: (op for values >= 0, op for negative values)
_FLOAT_BITS = {"max": (tt.RMWOp.MAX, tt.RMWOp.UMIN), "min": (tt.RMWOp.MIN, tt.RMWOp.UMAX)}


def _rmw(kind: Any, pointer: ir.Value, value: ir.Value, mask: ir.Value | None) -> ir.Value:
    return tt.atomic_rmw(value.type, kind, pointer, value, _SEM, _SCOPE, mask=mask)


def _and(a: ir.Value | None, b: ir.Value | None) -> ir.Value | None:
    return b if a is None else a if b is None else arith.andi(a, b)


def _float_bits(combine: str, dtype: str, pointer: ir.Value, value: ir.Value, mask: Any) -> Any:
    shape = emit.shape_of(value)
    bits = f"int{8 * dtypes.itemsize(dtype)}"
    int_pointer = tt.bitcast(emit.shaped(emit.pointer_type(bits), shape), pointer)
    int_value = tt.bitcast(emit.shaped(emit.element_type(bits), shape), value)
    zero = emit.constant(0, bits, shape)
    nonnegative = arith.cmpi(arith.CmpIPredicate.sge, int_value, zero)
    negative = arith.cmpi(arith.CmpIPredicate.slt, int_value, zero)
    up, down = _FLOAT_BITS[combine]
    old_up = _rmw(up, int_pointer, int_value, _and(mask, nonnegative))
    old_down = _rmw(down, int_pointer, int_value, _and(mask, negative))
    return tt.bitcast(value.type, arith.select(nonnegative, old_up, old_down))


@rule(*COMBINE)
def read_modify_write(ctx: LoweringContext, op: Op, ref: Any, *args: Any) -> Sequence[Any]:
    access, rest = _window(ctx, op, ref, args, write=True)
    dtype, combine = op.result.type.dtype, COMBINE[op.name]
    mask = access.mask
    if op.attrs.get("masked"):
        mask = _and(mask, emit.broadcast_to(rest[1], access.shape))
    value = rest[0]
    if dtypes.is_int(dtype):
        kind = _INT_OPS[combine, dtypes.is_signed(dtype)]
        return [_rmw(kind, access.pointer, value, mask)]
    if combine == "add":
        return [_rmw(tt.RMWOp.FADD, access.pointer, value, mask)]
    return [_float_bits(combine, dtype, access.pointer, value, mask)]


@rule("atomic_cas")
def atomic_cas(ctx: LoweringContext, op: Op, ref: Any, *args: Any) -> Sequence[Any]:
    access, (cmp, value) = _window(ctx, op, ref, args, write=True)
    return [tt.atomic_cas(value.type, access.pointer, cmp, value, _SEM, _SCOPE)]
