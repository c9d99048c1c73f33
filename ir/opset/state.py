"""State ops: read, write and accumulate into a window of a ``Ref``.

Operands are the ref, then the indexer's dynamic index values (``Dyn(k)`` is operand ``1+k``),
then any value operands. The ``indexer`` attribute picks the window (see ``ir.indexing``).
"""

from __future__ import annotations

from minipallas.ir import dtypes
from minipallas.ir.opdef import (
    ACCUM,
    READ,
    WRITE,
    Attrs,
    Flagged,
    OperandTypes,
    Regions,
    Types,
    Variadic,
    declare,
    require,
)
from minipallas.ir.opset.common import array_operand, count_dyn, ref_operand, same_type, window
from minipallas.ir.syntax import Windowed
from minipallas.ir.types import ArrayType, Type, is_semaphore

_LOAD = Windowed(0, (("mask", "masked"), ("other", "has_other")))


def _after_indices(types: OperandTypes, attrs: Attrs) -> int:
    """Checks the ref and that its indices are there; returns how many operands follow them
    (each rule checks that count before it reads those operands by name)."""
    ref = ref_operand(types)
    require(
        not is_semaphore(ref),
        "a semaphore ref is not memory: read it with semaphore_read, change it with "
        "semaphore_signal / semaphore_wait",
    )
    n = count_dyn(attrs)
    require(len(types) >= 1 + n, f"expected {n} dynamic index operands, got {len(types) - 1}")
    return len(types) - 1 - n


def _window(types: OperandTypes, attrs: Attrs) -> ArrayType:
    """The type of the window the indexer and the ``indices`` operands select in ``ref``."""
    ref = types.one("ref")
    return ArrayType(window(ref.shape, attrs, types.group("indices")), ref.dtype)


@declare("get", operands=("ref", Variadic("indices")), syntax=Windowed(0), effect=READ, pure=False)
def get(types: OperandTypes, attrs: Attrs, regions: Regions) -> Types:
    """Read a window: ``%v = get %r[0, 2:6, ds(%i, 8)] : f32[4,8]``."""
    after = _after_indices(types, attrs)
    require(not after, f"expected no value operands, got {after}")
    return (_window(types, attrs),)


@declare(
    "swap",
    operands=("ref", Variadic("indices"), "value"),
    syntax=Windowed(1),
    effect=WRITE,
    pure=False,
)
def swap(types: OperandTypes, attrs: Attrs, regions: Regions) -> Types:
    """Write a window and return what it held: ``%old = swap %r[:, 0], %v : f32[8]``.

    Its effect is a write only, as upstream's ``swap`` (``{WriteEffect(0)}``): returning the old
    contents is part of the write. ``effects_with_swap_reads`` counts a used result as a read.
    """
    after = _after_indices(types, attrs)
    require(after == 1, f"expected 1 value operand, got {after}")
    win = _window(types, attrs)
    _written(types.one("value"), win, "stored value")
    return (win,)


@declare(
    "addupdate",
    operands=("ref", Variadic("indices"), "value"),
    syntax=Windowed(1),
    effect=ACCUM,
    pure=False,
)
def addupdate(types: OperandTypes, attrs: Attrs, regions: Regions) -> Types:
    """Add into a window in place: ``addupdate %r[ds(%i, 8)], %v``."""
    after = _after_indices(types, attrs)
    require(after == 1, f"expected 1 value operand, got {after}")
    win = _window(types, attrs)
    _written(types.one("value"), win, "added value")
    require(win.dtype != "bool", "cannot accumulate into a bool ref")
    return ()


@declare(
    "load",
    operands=("ref", Variadic("indices"), Flagged("mask", "masked"), Flagged("other", "has_other")),
    syntax=_LOAD,
    effect=READ,
    pure=False,
)
def load(types: OperandTypes, attrs: Attrs, regions: Regions) -> Types:
    """Masked read: ``%v = load %r[0:8], mask %m, other %o : f32[8]``.

    Attributes ``masked`` and ``has_other`` say which of the trailing operands are present; a
    masked-off lane reads ``other`` (a scalar or a window-shaped array), or is unspecified.
    """
    after = _after_indices(types, attrs)
    masked, has_other = bool(attrs.get("masked")), bool(attrs.get("has_other"))
    require(
        after == masked + has_other,
        f"expected {masked + has_other} mask/other operands, got {after}",
    )
    require(masked or not has_other, "'other' needs a mask")
    win = _window(types, attrs)
    if masked:
        mask = array_operand(types.one("mask"), "mask")
        same_type(mask, ArrayType(win.shape, "bool"), "mask")
    if has_other:
        other = array_operand(types.one("other"), "other")
        require(
            other.dtype == win.dtype and other.shape in ((), win.shape),
            f"other has type {other}, expected {win} or {dtypes.SHORT[win.dtype]}[]",
        )
    return (win,)


@declare(
    "store",
    operands=("ref", Variadic("indices"), "value", Flagged("mask", "masked")),
    syntax=Windowed(1, (("mask", "masked"),)),
    effect=WRITE,
    pure=False,
)
def store(types: OperandTypes, attrs: Attrs, regions: Regions) -> Types:
    """Masked write: ``store %r[0:8], %v, mask %m``; masked-off lanes keep their value."""
    after = _after_indices(types, attrs)
    masked = bool(attrs.get("masked"))
    require(after == 1 + masked, f"expected {1 + masked} value/mask operands, got {after}")
    win = _window(types, attrs)
    _written(types.one("value"), win, "stored value")
    if masked:
        same_type(types.one("mask"), ArrayType(win.shape, "bool"), "mask")
    return ()


def _written(value: Type, win: Type, what: str) -> None:
    """The value a write takes has the window's type; of the right shape but another dtype,
    the fix is a ``convert`` of it (the op's form alone does not say so)."""
    fix = None
    if isinstance(value, ArrayType) and isinstance(win, ArrayType) and value.shape == win.shape:
        fix = f"convert it to the ref's dtype first: %c = convert %v : {win}, then write %c"
    same_type(value, win, what, fix)
