"""Atomic ops (Pallas Triton's ``atomic_add``/``atomic_max``/``atomic_min``/``atomic_cas``):
combine a value into a window of a ref and return what the window held.

    %old = atomic_add %r[0:8], %v : f32[8]              // r[0:8] = r[0:8] + v
    %old = atomic_max %r[ds(%i, 8)], %v, mask %m : i32[8]
    %old = atomic_cas %r[0], %cmp, %v : i32[]           // r[0] = v where r[0] == cmp

Their meaning is upstream's discharge rules' (``jax/_src/pallas/triton/primitives.py``): read
the window, combine, write it back, the old window the result; a masked-off lane keeps its
value. The effect is ``accum``, as ``addupdate``'s: the op reads and writes its window, and
programs that run together may apply it in any order without a race (that is what atomic
means), so the collectives simulator does not call two of them a race.
"""

from __future__ import annotations

from minipallas.ir import dtypes
from minipallas.ir.opdef import (
    ACCUM,
    Attrs,
    Flagged,
    OperandTypes,
    Regions,
    Types,
    Variadic,
    declare,
    require,
)
from minipallas.ir.opset.common import count_dyn, ref_operand, same_type, window
from minipallas.ir.syntax import Windowed
from minipallas.ir.types import SEMAPHORE, ArrayType

# The combining op of each read-modify-write atomic.
COMBINE = {"atomic_add": "add", "atomic_max": "max", "atomic_min": "min"}


def _after_values(types: OperandTypes, attrs: Attrs, values: int) -> int:
    """Checks the ref and that its indices and ``values`` value operands are there; returns how
    many operands follow them (a mask), which the rule checks before reading by name."""
    ref = ref_operand(types)
    require(ref.memory_space != SEMAPHORE, "a semaphore ref is changed by semaphore ops")
    require(ref.dtype != "bool", "atomics do not apply to a bool ref")
    n = count_dyn(attrs)
    require(len(types) >= 1 + n + values, f"expected {n} indices and {values} value operands")
    return len(types) - 1 - n - values


def _window(types: OperandTypes, attrs: Attrs, values: tuple[str, ...]) -> ArrayType:
    """The window's type; each operand named in ``values`` must have it."""
    ref = types.one("ref")
    win = ArrayType(window(ref.shape, attrs, types.group("indices")), ref.dtype)
    for k, name in enumerate(values):
        same_type(types.one(name), win, f"value operand {k}")
    return win


def _read_modify_write(types: OperandTypes, attrs: Attrs, regions: Regions) -> Types:
    """Combine a value into a window: ``%old = atomic_add %r[0:8], %v, mask %m : f32[8]``."""
    after = _after_values(types, attrs, 1)
    masked = bool(attrs.get("masked"))
    require(after == masked, f"expected {int(masked)} mask operand, got {after}")
    win = _window(types, attrs, ("value",))
    if masked:
        same_type(types.one("mask"), ArrayType(win.shape, "bool"), "mask")
    return (win,)


for _name in COMBINE:
    declare(
        _name,
        operands=("ref", Variadic("indices"), "value", Flagged("mask", "masked")),
        syntax=Windowed(1, (("mask", "masked"),)),
        effect=ACCUM,
        pure=False,
    )(_read_modify_write)


@declare(
    "atomic_cas",
    operands=("ref", Variadic("indices"), "cmp", "value"),
    syntax=Windowed(2),
    effect=ACCUM,
    pure=False,
)
def atomic_cas(types: OperandTypes, attrs: Attrs, regions: Regions) -> Types:
    """Compare and swap: ``%old = atomic_cas %r[0], %cmp, %v : i32[]`` writes ``v`` where the
    window equals ``cmp``."""
    after = _after_values(types, attrs, 2)
    require(not after, f"expected no operand after the value, got {after}")
    win = _window(types, attrs, ("cmp", "value"))
    require(dtypes.is_int(win.dtype) or dtypes.is_float(win.dtype), "an int or float ref")
    return (win,)
