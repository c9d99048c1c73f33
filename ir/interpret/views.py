"""Rules for ref views: ``ref.at``, ``ref.reshape``, ``ref.bitcast`` and ``ref.transpose``.

A view is a ``Ref`` aliasing its parent's storage: numpy views of ``data`` (and of the
``written`` shadow, viewed the same way), so writes through the view land in the parent. The
one view numpy cannot express, a reshape of a strided window, is kept as a table of positions
into the parent instead (``Ref.positions``); later views compose on that table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.core import Op
from minipallas.ir.interpret.engine import Interpreter, Ref, rule
from minipallas.ir.interpret.windows import locate


@rule("ref.at")
def at(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    ref = args[0]
    index = locate(interp, op, op.attrs["indexer"], ref.shape, args[1:]).index + (Ellipsis,)
    if ref.positions is not None:
        return (Ref(ref.data, ref.written, ref.positions[index]),)
    written = None if ref.written is None else ref.written[index]
    return (Ref(ref.data[index], written),)


@rule("ref.reshape")
def reshape(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    (ref,) = args
    shape = op.attrs["shape"]
    if ref.positions is None:
        try:
            data = np.reshape(ref.data, shape, copy=False)
            written = None if ref.written is None else np.reshape(ref.written, shape, copy=False)
            return (Ref(data, written),)
        except ValueError:  # no strides express it: fall back to a position table
            positions = np.arange(ref.data.size).reshape(ref.data.shape)
            return (Ref(ref.data, ref.written, positions.reshape(shape)),)
    return (Ref(ref.data, ref.written, ref.positions.reshape(shape)),)


@rule("ref.bitcast")
def bitcast(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    (ref,) = args
    target = dtypes.to_numpy(op.attrs["dtype"])
    old, new = ref.data.dtype.itemsize, np.dtype(target).itemsize
    if old == new:
        return (Ref(ref.data.view(target), ref.written, ref.positions),)
    if old < new or ref.data.ndim == 0 or ref.data.strides[-1] != old:
        raise interp.error(
            op,
            f"a bitcast view from {op.operands[0].type} to {op.result.type}: the interpreter "
            "aliases narrowing views of refs whose last dim is contiguous only",
            fix="read the ref and minipallas.tpu.bitcast the value (or write it back so)",
        )
    return (_narrowed(ref, target, old // new),)


def _narrowed(ref: Ref, target: np.dtype, r: int) -> Ref:
    """A narrowing bitcast view by ``r`` as a position table (``repack``'s order): the data
    seen as ``target`` with each element's ``r`` pieces on a new last dim, and view element
    ``(.., i * r + k, j)`` at piece ``k`` of the parent's element ``(.., i, j)``. The
    ``written`` shadow repeats each element's flag along the pieces (a view of it)."""
    data = ref.data.view(target).reshape(*ref.data.shape, r)
    written = None
    if ref.written is not None:
        strides = (*ref.written.strides, 0)
        written = np.lib.stride_tricks.as_strided(ref.written, data.shape, strides)
    parent = ref.positions if ref.positions is not None else np.arange(ref.data.size)
    parent = np.reshape(parent, ref.shape)
    pieces = parent[..., None] * r + np.arange(r)  # (.., m, n, r): flat positions in data
    *lead, m, n = ref.shape
    positions = np.swapaxes(pieces, -1, -2).reshape(*lead, m * r, n)
    return Ref(data, written, positions)


@rule("ref.transpose")
def transpose(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    (ref,) = args
    perm = op.attrs["permutation"]
    if ref.positions is not None:
        return (Ref(ref.data, ref.written, ref.positions.transpose(perm)),)
    written = None if ref.written is None else ref.written.transpose(perm)
    return (Ref(ref.data.transpose(perm), written),)
