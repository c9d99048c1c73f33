"""Shared helpers for the front-end tests: trace-and-verify, op listings, error locations."""

from __future__ import annotations

import contextlib
import sys

import numpy as np
import pytest

import minipallas as mp
from minipallas.ir.errors import TraceError

F32 = "float32"


def ref(shape, dtype=F32, space=None):
    return mp.RefType(shape, dtype) if space is None else mp.RefType(shape, dtype, space)


def arr(shape, dtype=F32):
    return mp.ArrayType(shape, dtype)


def traced(f, *types, **kw):
    """``mp.trace`` plus the verifier and a print/parse round trip: every traced function must
    be valid IR."""
    fn = mp.trace(f, *types, **kw)
    mp.verify(fn)
    assert str(mp.parse(str(fn))) == str(fn)
    return fn


def names(block):
    """Op names of a block (or a function's body), top level only."""
    block = getattr(block, "body", block)
    return [op.name for op in block.ops]


def find(fn, name):
    """Every op called ``name`` in ``fn``, regions included, in order."""
    return [op for op in fn.walk() if op.name == name]


def only(fn, name):
    (op,) = find(fn, name)
    return op


def next_line():
    """The line after the caller's: for asserting an error is reported there."""
    return sys._getframe(1).f_lineno + 1


@contextlib.contextmanager
def raises_at(line, match=None):
    """Expects a TraceError located at ``line`` of the calling test file."""
    file = sys._getframe(2).f_code.co_filename
    with pytest.raises(TraceError, match=match) as info:
        yield info
    loc = info.value.loc
    assert (loc.file, loc.line) == (file, line), f"error at {loc}, expected {file}:{line}"
    assert f"{file}:{line}" in str(info.value)


def run(fn, *args, **kw):
    """Interprets ``fn``; ref arguments are mutated in place."""
    return mp.interpret(fn, *args, **kw)


def same(actual, expected):
    """Bit-for-bit equality of dtype, shape and contents; any NaN equals any NaN (their sign
    and payload bits carry no meaning)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    if actual.dtype == np.bool_:
        np.testing.assert_array_equal(actual, expected)
        return
    as_bits = {1: np.uint8, 2: np.uint16, 4: np.uint32}[actual.dtype.itemsize]
    a_bits, e_bits = actual.view(as_bits).copy(), expected.view(as_bits).copy()
    if actual.dtype.kind == "f" or "float" in actual.dtype.name:
        a_nan, e_nan = np.isnan(actual.astype(np.float32)), np.isnan(expected.astype(np.float32))
        np.testing.assert_array_equal(a_nan, e_nan)
        a_bits[a_nan] = e_bits[e_nan] = 0
    np.testing.assert_array_equal(a_bits, e_bits)


# the ops of a scalar index's negative wrap, in order: select(i < 0, i + n, i)
WRAP = ["constant", "lt", "constant", "add", "select"]


def wrapped_index(fn, v):
    """``(i, n)`` where ``v`` is computed as ``select(i < 0, i + n, i)`` in ``fn``'s body (an
    int8 ``i`` widened to int32 first): the explicit negative wrap the front end emits."""
    made = {r: op for op in fn.walk() for r in op.results}

    def constant(u):  # a constant, maybe broadcast
        while made[u].name == "broadcast_in_dim":
            (u,) = made[u].operands
        return made[u].attrs["value"].array()

    select = made[v]
    assert select.name == "select", select.name
    negative, shifted, i = select.operands
    lt, add = made[negative], made[shifted]
    assert lt.name == "lt" and lt.operands[0] is i and (constant(lt.operands[1]) == 0).all()
    assert add.name == "add" and add.operands[0] is i
    (n,) = set(np.asarray(constant(add.operands[1])).reshape(-1).tolist())
    if i in made and made[i].name == "convert":
        (i,) = made[i].operands
    return i, n
