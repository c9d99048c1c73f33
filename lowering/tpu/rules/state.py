"""Mosaic rules for the state ops: reads and writes of a window of a ref.

- VMEM: ``get`` / ``load`` are ``vector.load`` of the window (``tpu.strided_load`` when a slice
  has a stride), then a ``vector.shape_cast`` dropping integer-indexed and squeezed dimensions;
  ``swap`` / ``store`` are ``tpu.vector_store`` (``tpu.strided_store``). A ``swap`` loads the old
  window first, as upstream does; canonicalization drops that load when nothing uses it.
- SMEM holds scalars: ``memref.load`` / ``memref.store``.
- ANY (HBM) is not addressable by vector loads; upstream reaches it only with DMAs.
- ``bool`` lives in memory as ``i32``: reads compare with 0, writes zero-extend.

minipallas's masked ``load`` reads the whole window and selects ``other`` (or the fill value)
in the masked-off lanes — upstream has no TPU lowering for masked loads. A masked ``store``
is ``tpu.vector_store`` with a mask for 32-bit data; narrower data is read, merged with
``arith.select`` and written back, which is the same thing in a single-threaded kernel.
``addupdate`` is a read, an add and a write.
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir import dtypes
from minipallas.ir.core import Op
from minipallas.ir.types import ArrayType
from minipallas.lowering.compat.jaxlib_shim import arith, ir, memref, tpu, vector
from minipallas.lowering.tpu import emit
from minipallas.lowering.tpu.context import Bound, LoweringContext, MemRef, rule, unsupported
from minipallas.lowering.tpu.windows import Window, window


def _split(op: Op, args: Sequence[Bound]) -> tuple[MemRef, list[ir.Value], list[ir.Value]]:
    indices = op.slices()["indices"]  # ``args`` line up with the operands
    return args[0], list(args[indices]), list(args[indices.stop :])  # type: ignore[return-value]


def _check_space(op: Op, ref: MemRef, t: ArrayType) -> None:
    space = ref.space_name
    if space == "any":
        raise unsupported(
            op,
            "loads and stores are only allowed on VMEM and SMEM references; ANY memory space "
            "can only be accessed using async_copy (as upstream)",
            fix="give the operand a VMEM block spec, or copy it into VMEM scratch",
        )
    if space == "smem" and t.shape:
        raise unsupported(
            op,
            f"can only move scalars to or from SMEM, this moves {t}",
            fix="index every dimension of the SMEM ref, or put the operand in VMEM",
        )
    if space == "vmem" and not ref.shape:
        raise unsupported(
            op,
            "indexing into a ()-shaped VMEM ref is not supported on TPU (as upstream)",
            fix="use a ref of shape (1, 1), or put the scalar in SMEM",
        )


def read(ref: MemRef, w: Window, t: ArrayType) -> ir.Value:
    """The window's value, of type ``t`` (the op's view of it)."""
    if ref.space_name == "smem":
        return _from_memory(memref.load(ref.value, list(w.starts)), t)
    mem_dtype = "int32" if t.dtype == "bool" else t.dtype
    load_type = emit.value_type(ArrayType(w.sizes, mem_dtype))
    if w.strided:
        value = tpu.strided_load(load_type, ref.value, list(w.starts), list(w.strides))
    else:
        value = vector.load(load_type, ref.value, list(w.starts))
    return _from_memory(emit.shape_cast(value, ArrayType(t.shape, mem_dtype)), t)


def write(ref: MemRef, w: Window, value: ir.Value, t: ArrayType, mask: ir.Value | None) -> None:
    """Stores ``value`` (of type ``t``) into the window, where ``mask`` is true if given."""
    value = _to_memory(value, t)
    if ref.space_name == "smem":
        memref.store(value, ref.value, list(w.starts))
        return
    mem_t = ArrayType(w.sizes, "int32" if t.dtype == "bool" else t.dtype)
    value = emit.shape_cast(value, mem_t)
    if mask is not None:
        mask = emit.shape_cast(mask, ArrayType(w.sizes, "bool"))
    if w.strided:
        if mask is not None:
            old = tpu.strided_load(emit.value_type(mem_t), ref.value, list(w.starts), w.strides)
            value = arith.select(mask, value, old)
        tpu.strided_store(value, ref.value, list(w.starts), list(w.strides))
    elif mask is not None and dtypes.itemsize(mem_t.dtype) != 4:
        old = vector.load(emit.value_type(mem_t), ref.value, list(w.starts))
        tpu.vector_store(arith.select(mask, value, old), ref.value, list(w.starts), strides=[])
    else:
        tpu.vector_store(value, ref.value, list(w.starts), strides=[], mask=mask)


def _from_memory(x: ir.Value, t: ArrayType) -> ir.Value:
    if t.dtype != "bool":
        return x
    zero = emit.constant(0, ArrayType(t.shape, "int32"))
    return arith.cmpi(arith.CmpIPredicate.ne, x, zero)


def _to_memory(x: ir.Value, t: ArrayType) -> ir.Value:
    if t.dtype != "bool":
        return x
    return arith.extui(emit.value_type(ArrayType(t.shape, "int32")), x)


def _access(ctx: LoweringContext, op: Op, args: Sequence[Bound], t: ArrayType) -> tuple:
    ref, dyn, rest = _split(op, args)
    _check_space(op, ref, t)
    return ref, window(ctx, op, ref, dyn), rest


@rule("get")
def get(ctx: LoweringContext, op: Op, *args: Bound) -> Sequence[ir.Value]:
    t = op.result.type
    ref, w, _ = _access(ctx, op, args, t)
    return [read(ref, w, t)]


@rule("swap")
def swap(ctx: LoweringContext, op: Op, *args: Bound) -> Sequence[ir.Value]:
    t = op.result.type
    ref, w, (value,) = _access(ctx, op, args, t)
    old = read(ref, w, t)
    write(ref, w, value, t, None)
    return [old]


@rule("addupdate")
def addupdate(ctx: LoweringContext, op: Op, *args: Bound) -> Sequence[ir.Value]:
    t = op.operands[-1].type
    ref, w, (value,) = _access(ctx, op, args, t)
    old = read(ref, w, t)
    total = arith.addf(old, value) if dtypes.is_float(t.dtype) else arith.addi(old, value)
    write(ref, w, total, t, None)
    return []


@rule("load")
def load(ctx: LoweringContext, op: Op, *args: Bound) -> Sequence[ir.Value]:
    t = op.result.type
    ref, w, rest = _access(ctx, op, args, t)
    value = read(ref, w, t)
    if not op.attrs.get("masked"):
        return [value]
    mask = rest[0]
    if op.attrs.get("has_other"):
        other = emit.broadcast(rest[1], t) if t.shape else rest[1]
    else:
        other = emit.constant(dtypes.fill_value(t.dtype), t)
    return [arith.select(mask, value, other)]


@rule("store")
def store(ctx: LoweringContext, op: Op, *args: Bound) -> Sequence[ir.Value]:
    t = op.operands[-2 if op.attrs.get("masked") else -1].type
    ref, w, rest = _access(ctx, op, args, t)
    mask = rest[1] if op.attrs.get("masked") else None
    if mask is not None and ref.space_name == "smem":
        value = arith.select(mask, rest[0], read(ref, w, t))
        write(ref, w, value, t, None)
    else:
        write(ref, w, rest[0], t, mask)
    return []
