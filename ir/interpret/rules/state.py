"""Rules for the state ops: ``get``, ``swap``, ``addupdate``, masked ``load`` and ``store``.

Operands are the ref, the indexer's dynamic index values, then value operands. Each rule
locates its window (``windows.locate``; out-of-range handling lives there) and acts on the
ref's numpy storage in place, so every view and indexer of one buffer sees every write.

Under initialization tracking a read of an element never written is an error: ``get``,
``load`` (on the lanes its mask enables) and ``addupdate`` (which reads what it adds to).
``swap`` is not checked: ``ref[...] = v`` is a ``swap`` whose old value is usually unused, and
its old value from fresh scratch is the fill value. Writes mark their elements written.
Under ``checks``, an access an async copy in flight makes undefined is an error (``dma``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from minipallas.ir.core import Op
from minipallas.ir.dtypes import fill_value
from minipallas.ir.interpret.engine import Interpreter, Ref, rule
from minipallas.ir.interpret.races import ACCUM, READ, WRITE
from minipallas.ir.interpret.windows import (
    Access,
    accumulate,
    locate,
    read,
    through,
    unwritten,
    write,
)
from minipallas.ir.interpret.xla import numerics


def _window(
    interp: Interpreter, op: Op, args: Sequence[Any], kind: str, mask_at: int = 0
) -> tuple[Ref, Access, Sequence]:
    """The ref, where the op's window lands in its storage, and the remaining operands (a
    mask, when the op is ``masked``, is the ``mask_at``-th of them). Among programs run
    together, the access is checked for races first (``programs``, ``races``)."""
    ref = args[0]
    indexer, indices = op.attrs["indexer"], op.slices()["indices"]
    access = through(ref, locate(interp, op, indexer, ref.shape, args[indices]))
    rest = args[indices.stop :]
    if interp.together is not None or interp.copies is not None:
        mask = rest[mask_at] if op.attrs.get("masked") else None
        if interp.together is not None:
            interp.together.touch(interp, op, ref.data, access, kind, mask)
        if interp.copies is not None:  # under checks, with async copies started
            interp.copies.check(interp, op, ref.data, access, kind, mask)
    return ref, access, rest


def check_initialized(
    interp: Interpreter, op: Op, ref: Ref, access: Access, mask: Any = None
) -> None:
    """Under tracking, raise if the window (where ``mask`` is true) holds an unwritten element."""
    if ref.written is None:
        return
    position = unwritten(ref, access, mask)
    if position is not None:
        instead = "without checks=True" if interp.checks else "with uninitialized='nan'"
        raise interp.error(
            op,
            f"reads element {list(position)} of its window, which was never written",
            fix="scoped buffers, a kernel's scratch and its output blocks start undefined: "
            "write before reading (in a kernel, under pl.when at the first grid step); "
            f"{instead} the read gives the fill value upstream JAX gives it",
        )


def _mark_written(ref: Ref, access: Access, mask: Any = None) -> None:
    if ref.written is not None:
        write(ref.written, access, True, mask)


@rule("get")
def get(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    ref, access, _ = _window(interp, op, args, READ)
    check_initialized(interp, op, ref, access)
    return (read(ref.data, access),)


@rule("swap")
def swap(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    ref, access, (value,) = _window(interp, op, args, WRITE)
    old = read(ref.data, access)
    write(ref.data, access, value)
    _mark_written(ref, access)
    return (old,)


@rule("addupdate")
def addupdate(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    ref, access, (value,) = _window(interp, op, args, ACCUM)
    check_initialized(interp, op, ref, access)
    dtype = op.operands[0].type.dtype
    accumulate(ref.data, access, value, lambda old, new: numerics.add(old, new, dtype))
    return ()


@rule("load")
def load(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    """Masked-off lanes read ``other``, or the fill value (NaN / int minimum / False)."""
    ref, access, rest = _window(interp, op, args, READ)
    value = read(ref.data, access)
    if not op.attrs.get("masked"):
        check_initialized(interp, op, ref, access)
        return (value,)
    mask = rest[0]
    check_initialized(interp, op, ref, access, mask)
    other = rest[1] if op.attrs.get("has_other") else fill_value(op.results[0].type.dtype)
    return (np.where(mask, value, other),)


@rule("store")
def store(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    """Masked-off lanes keep what they held."""
    ref, access, rest = _window(interp, op, args, WRITE, mask_at=1)
    mask = rest[1] if op.attrs.get("masked") else None
    write(ref.data, access, rest[0], mask)
    _mark_written(ref, access, mask)
    return ()
