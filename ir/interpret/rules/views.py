"""Rules for ref views: ``ref.at``, ``ref.reshape``, ``ref.bitcast`` and ``ref.transpose``.

A view is a ``Ref`` aliasing its parent's storage: numpy views of ``data`` (and of the
``written`` shadow, viewed the same way), so writes through the view land in the parent. The
views numpy cannot express, a reshape of a strided window and a bitcast across widths, are kept
as a table of positions into the parent instead (``Ref.positions``); later views compose on
that table. A widening bitcast's table lists each element's pieces (``Ref.joined``).
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
        return (Ref(ref.data, ref.written, ref.positions[index], ref.joined),)
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
    pieces = ref.positions.shape[len(ref.shape) :]  # a joined view's pieces stay last
    return (Ref(ref.data, ref.written, ref.positions.reshape(*shape, *pieces), ref.joined),)


@rule("ref.bitcast")
def bitcast(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    (ref,) = args
    target = dtypes.to_numpy(op.attrs["dtype"])
    old, new = ref.dtype.itemsize, np.dtype(target).itemsize
    if old == new and ref.joined is not None:
        return (Ref(ref.data, ref.written, ref.positions, np.dtype(target)),)
    if old == new:
        return (Ref(ref.data.view(target), ref.written, ref.positions),)
    if old < new and ref.joined is None:
        return (_widened(ref, np.dtype(target), new // old),)
    if ref.joined is not None or ref.data.strides[-1] != old:
        raise interp.error(
            op,
            f"a bitcast view from {op.operands[0].type} to {op.result.type}: the interpreter "
            "aliases a bitcast across widths of a ref whose last dim is contiguous, and not of "
            "a view that joined narrower elements",
            fix="read the ref and minipallas.tpu.bitcast the value (or write it back so)",
        )
    return (_narrowed(ref, target, old // new),)


def _widened(ref: Ref, target: np.dtype, r: int) -> Ref:
    """A widening bitcast view by ``r`` (``repack``'s order): view element ``(.., i, j)`` joins
    the parent's elements ``(.., i * r + k, j)``, ``k < r``, low piece first."""
    parent = ref.positions if ref.positions is not None else np.arange(ref.data.size)
    parent = np.reshape(parent, ref.shape)
    *lead, m, n = ref.shape
    positions = np.swapaxes(parent.reshape(*lead, m // r, r, n), -1, -2)
    return Ref(ref.data, ref.written, positions, target)


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
        full = (*perm, *range(len(perm), ref.positions.ndim))  # a joined view's pieces stay last
        return (Ref(ref.data, ref.written, ref.positions.transpose(full), ref.joined),)
    written = None if ref.written is None else ref.written.transpose(perm)
    return (Ref(ref.data.transpose(perm), written),)
