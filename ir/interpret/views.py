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
    data = ref.data.view(dtypes.to_numpy(op.attrs["dtype"]))
    return (Ref(data, ref.written, ref.positions),)


@rule("ref.transpose")
def transpose(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    (ref,) = args
    perm = op.attrs["permutation"]
    if ref.positions is not None:
        return (Ref(ref.data, ref.written, ref.positions.transpose(perm)),)
    written = None if ref.written is None else ref.written.transpose(perm)
    return (Ref(ref.data.transpose(perm), written),)
