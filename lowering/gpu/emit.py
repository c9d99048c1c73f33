"""Small Triton builders shared by the rule files: types, constants, broadcasts, casts, and
index arithmetic that folds as it is built.

A minipallas array of shape ``()`` is a plain MLIR scalar (``i32``, ``f32``) in Triton, any
other shape a ``tensor<...>``. Triton tensors must have a power-of-2 number of elements.
``uint32`` is Triton's signless ``i32`` (the rules pick the unsigned ops), and ``bool`` is ``i1``
in registers but ``i8`` in memory: a bool operand is a ``!tt.ptr<i1>``, bitcast to
``!tt.ptr<i8>`` where it is loaded or stored, as upstream Pallas does.

Each function emits at the current insertion point and location (set by the lowering context
around every rule), so rules read as a list of ops.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.conversions import to_dtype
from minipallas.ir.core import Function
from minipallas.ir.errors import PassError
from minipallas.ir.kernel_spec import Kernel
from minipallas.ir.types import ArrayType
from minipallas.lowering.compat.jaxlib_shim import ir, triton_bindings
from minipallas.lowering.mlir_types import WIDTH, signless_type

tt, arith, scf, math = triton_bindings()


def element_type(dtype: str) -> ir.Type:
    """The register element type: ``f32``, ``bf16``, ``f16``, ``i32`` (also for uint32), ``i8``,
    ``i1``."""
    return signless_type(dtype)


def memory_type(dtype: str) -> ir.Type:
    """The element type in global memory (``bool`` is a byte there)."""
    return ir.IntegerType.get_signless(8) if dtype == "bool" else element_type(dtype)


def pointer_type(dtype: str, memory: bool = False) -> ir.Type:
    """An operand's pointer type: ``!tt.ptr<i1>`` for bool, as upstream declares it; with
    ``memory``, the type loads and stores go through (``!tt.ptr<i8>`` for bool)."""
    return tt.PointerType.get(memory_type(dtype) if memory else element_type(dtype), 1)


def shaped(element: ir.Type, shape: Sequence[int]) -> ir.Type:
    """``element`` for a scalar, ``tensor<shape x element>`` otherwise."""
    if not shape:
        return element
    check_size(shape)
    return ir.RankedTensorType.get(list(shape), element)


def value_type(t: ArrayType) -> ir.Type:
    return shaped(element_type(t.dtype), t.shape)


def check_size(shape: Sequence[int]) -> None:
    """Triton's power-of-2 rule; ``sizes_named`` says where the user's code breaks it."""
    if not _power_of_2(shape):
        raise TensorSizeError(tuple(int(d) for d in shape))


class TensorSizeError(PassError):
    """A Triton tensor whose number of elements is not a power of 2."""

    def __init__(self, shape: tuple[int, ...], where: str = "", **kw: Any) -> None:
        self.shape = shape
        rounded = tuple(1 << max(d - 1, 0).bit_length() for d in shape)
        super().__init__(
            f"Triton tensors need a power-of-2 number of elements, got shape {shape}{where}",
            fix=f"use block shapes (and intermediate arrays) whose sizes are powers of 2, e.g. "
            f"{rounded} instead of {shape}, masking the extra elements (load/store with mask=)",
            **kw,
        )


@contextlib.contextmanager
def sizes_named(kernel: Kernel, body: Function) -> Iterator[None]:
    """Re-raises a ``TensorSizeError`` from emitting ``kernel`` at the user's code: the op
    being lowered (its line) and the block spec whose block it reads or writes; outside the
    body (placing the blocks), the first block spec whose block breaks the rule."""
    try:
        yield
    except TensorSizeError as e:
        op = e.failing_op
        specs = {f"in_specs[{k}]": s for k, s in enumerate(kernel.in_specs)}
        specs |= {f"out_specs[{k}]": s for k, s in enumerate(kernel.out_specs)}
        blocks = dict(zip(body.params[len(kernel.scalar_prefetch) :], specs, strict=False))
        used = [blocks[v] for v in op.operands if v in blocks] if op is not None else []
        candidates = used if op is not None else list(specs)
        bad = [n for n in candidates if not _power_of_2(specs[n].ref_type.shape)]
        shape = e.shape
        if bad:
            shape = specs[bad[0]].ref_type.shape
            where = f": the block of {bad[0]} of kernel '{kernel.name}'"
        elif op is not None and op.results and isinstance(op.result.type, ArrayType):
            shape, where = op.result.type.shape, f": the result of '{op.name}'"
        else:
            where = f" in kernel '{kernel.name}'"
        loc = op.loc if op is not None else None
        error = TensorSizeError(tuple(shape), where, op=op.name if op else "pallas_call", loc=loc)
        error.failing_op, error.excerpt = op, e.excerpt
        for note in getattr(e, "__notes__", []):
            error.add_note(note)
        raise error from None


def _power_of_2(shape: Sequence[int]) -> bool:
    size = int(np.prod(shape))
    return size & (size - 1) == 0


def shape_of(x: ir.Value) -> list[int]:
    return list(ir.RankedTensorType(x.type).shape) if is_tensor(x) else []


def is_tensor(x: ir.Value) -> bool:
    return isinstance(x.type, ir.RankedTensorType)


def known_int(x: ir.Value) -> int | None:
    """The integer an ``arith.constant`` (or a splat of one) holds, else None."""
    owner = x.owner
    if not isinstance(owner, ir.Operation | ir.OpView):
        return None
    if owner.name == "tt.splat":
        return known_int(owner.operands[0])
    if owner.name == "arith.constant" and isinstance(owner.attributes["value"], ir.IntegerAttr):
        return owner.attributes["value"].value
    return None


def element_of(x: ir.Value) -> ir.Type:
    return ir.RankedTensorType(x.type).element_type if is_tensor(x) else x.type


# --- constants and shapes ---------------------------------------------------------------------


def constant(value: object, dtype: str, shape: Sequence[int] = ()) -> ir.Value:
    """A scalar constant, splatted when ``shape`` is given. Floats travel as their bits, so NaN
    payloads and signed zeros survive exactly."""
    element = element_type(dtype)
    scalar = to_dtype(value, dtype)
    if dtypes.is_float(dtype):
        bits = scalar.view(np.uint16 if WIDTH[dtype] == 16 else np.uint32)
        attr = ir.FloatAttr.get(element, float(scalar.astype(np.float64)))
        if np.isnan(scalar) or (scalar == 0 and np.signbit(scalar)):
            width = WIDTH[dtype]
            as_int = ir.IntegerAttr.get(ir.IntegerType.get_signless(width), int(bits))
            raw = arith.constant(ir.IntegerType.get_signless(width), as_int)
            return splat(arith.bitcast(element, raw), shape)
        return splat(arith.constant(element, attr), shape)
    if dtype == "bool":
        number = int(bool(scalar))
    else:
        number = int(scalar.view(dtypes.to_numpy(dtypes.signed_twin(dtype))))
    return splat(arith.constant(element, ir.IntegerAttr.get(element, number)), shape)


def dense(array: np.ndarray, dtype: str) -> ir.Value:
    """A tensor constant holding ``array`` (not a splat)."""
    element = element_type(dtype)
    raw = to_dtype(array, dtype)
    if dtypes.is_float(dtype):
        raw = raw.view(np.uint16 if WIDTH[dtype] == 16 else np.uint32)
    elif dtype == "bool":
        raw = raw.astype(np.bool_)
    elif dtypes.is_unsigned(dtype):
        raw = raw.view(dtypes.to_numpy(dtypes.signed_twin(dtype)))
    attr = ir.DenseElementsAttr.get(
        np.ascontiguousarray(raw), type=element, shape=list(array.shape)
    )
    return arith.constant(shaped(element, array.shape), attr)


def like(value: object, x: ir.Value, dtype: str) -> ir.Value:
    """A constant of ``x``'s shape and the given dtype."""
    return constant(value, dtype, shape_of(x))


def splat(x: ir.Value, shape: Sequence[int]) -> ir.Value:
    """A scalar as a tensor of ``shape`` (itself for ``()``)."""
    if not shape:
        return x
    return tt.splat(shaped(x.type, shape), x)


def broadcast_to(x: ir.Value, shape: Sequence[int]) -> ir.Value:
    """``x`` (a scalar, or a tensor of the same rank with 1s where ``shape`` is larger) to
    ``shape``."""
    if not is_tensor(x):
        return splat(x, shape)
    if shape_of(x) == list(shape):
        return x
    return tt.broadcast(shaped(element_of(x), shape), x)


def expand(x: ir.Value, rank: int, dims: Sequence[int]) -> ir.Value:
    """``x`` with size-1 dimensions inserted so that its dim i lands at position ``dims[i]`` of
    a rank-``rank`` tensor (``dims`` increasing)."""
    if not is_tensor(x):
        return splat(x, [1] * rank) if rank else x
    for target in range(rank):
        if target not in dims:
            x = tt.expand_dims(x, target)
    return x


def reshape(x: ir.Value, shape: Sequence[int]) -> ir.Value:
    """``x`` with a new shape of the same size (scalars and tensors alike)."""
    old = shape_of(x)
    if old == list(shape):
        return x
    if not shape:
        return tt.unsplat(x)
    if not is_tensor(x):
        return splat(x, shape)
    kept = [d for d, n in enumerate(shape) if n != 1]
    if [shape[d] for d in kept] == old:  # only size-1 dimensions added: tt.expand_dims
        return expand(x, len(shape), kept)
    return tt.reshape(shaped(element_of(x), shape), x)


# --- index arithmetic: i32 scalars and tensors, folded as built ----------------------------------

Index = int | ir.Value
"""An index: a Python int is a constant not yet emitted, so sums and products of constants, and
``x + 0`` or ``x * 1``, cost no op."""


def i32(value: Index, shape: Sequence[int] = ()) -> ir.Value:
    """The index as an emitted ``i32`` value, splatted to ``shape``."""
    if isinstance(value, int):
        return constant(value, "int32", shape)
    return broadcast_to(value, shape) if shape else value


def add(a: Index, b: Index) -> Index:
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    if isinstance(b, int) and b == 0:
        return a
    if isinstance(a, int) and a == 0:
        return b
    shape = _common(a, b)
    return arith.addi(i32(a, shape), i32(b, shape))


def mul(a: Index, b: Index) -> Index:
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    if isinstance(a, int):
        a, b = b, a
    if isinstance(b, int):
        if b == 0:
            return 0
        if b == 1:
            return a
    shape = _common(a, b)
    return arith.muli(i32(a, shape), i32(b, shape))


def sub(a: Index, b: Index) -> Index:
    if isinstance(a, int) and isinstance(b, int):
        return a - b
    if isinstance(b, int) and b == 0:
        return a
    shape = _common(a, b)
    return arith.subi(i32(a, shape), i32(b, shape))


def clamp(x: Index, low: int, high: int) -> Index:
    """``x`` clamped into ``[low, high]`` (signed)."""
    if isinstance(x, int):
        return min(max(x, low), high)
    if low == high:
        return low
    return at_most(at_least(x, low), high)


def at_least(x: Index, low: int) -> Index:
    """``max(x, low)`` (signed)."""
    return max(x, low) if isinstance(x, int) else arith.maxsi(x, i32(low, shape_of(x)))


def at_most(x: Index, high: int) -> Index:
    """``min(x, high)`` (signed)."""
    return min(x, high) if isinstance(x, int) else arith.minsi(x, i32(high, shape_of(x)))


def wrap_negative(x: Index, n: int) -> Index:
    """``x + n`` where ``x < 0`` (once), as ``lax.dynamic_slice`` reads a negative start."""
    if isinstance(x, int):
        return x + n if x < 0 else x
    return arith.select(less(x, 0), add(x, n), x)


def less(a: Index, b: Index) -> ir.Value | bool:
    """``a < b`` (signed): a Python bool when both are known."""
    if isinstance(a, int) and isinstance(b, int):
        return a < b
    shape = _common(a, b)
    return arith.cmpi(arith.CmpIPredicate.slt, i32(a, shape), i32(b, shape))


def _common(a: Index, b: Index) -> list[int]:
    shapes = [shape_of(v) for v in (a, b) if not isinstance(v, int)]
    return max(shapes, key=len) if shapes else []


def to_i32(x: ir.Value, dtype: str) -> ir.Value:
    """An integer index of any minipallas int dtype as ``i32`` (sign- or zero-extended)."""
    width = WIDTH.get(dtype, 1)
    if width == 32:
        return x
    target = shaped(ir.IntegerType.get_signless(32), shape_of(x))
    return arith.extsi(target, x) if dtypes.is_signed(dtype) else arith.extui(target, x)
