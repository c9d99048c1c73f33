"""A few lines of sugar over ``ir.Builder`` for writing interpreter tests by hand.

Every op gets a distinct location ``prog.py:<line>`` (``line=`` picks it), so tests can check
that an error names the right op and place.
"""

from __future__ import annotations

import itertools

import numpy as np

from minipallas import ir
from minipallas.ir.location import Location

FILE = "prog.py"
_lines = itertools.count(1000)


class B:
    """Builds one block; ``op`` returns the Op, ``v`` its single result."""

    def __init__(self):
        self.builder = ir.Builder()

    def op(self, name, *operands, regions=(), line=None, **attrs):
        loc = Location(FILE, line if line is not None else next(_lines))
        return self.builder.create(name, operands, attrs, regions, loc)

    def v(self, name, *operands, **kw):
        return self.op(name, *operands, **kw).result

    def const(self, value, dtype):
        return self.v("constant", value=ir.Literal.of(np.asarray(value), dtype))

    def region(self, types, body):
        inner = B()
        params = ir.params(types)
        out = body(inner, *params)
        return inner.builder.block(params, _tuple(out))


def _tuple(out):
    if out is None:
        return ()
    if isinstance(out, ir.Value):
        return (out,)
    return tuple(out)


def build(types, body, name="f"):
    """``body(b, *params)`` returns the results (a Value, a sequence or None)."""
    b = B()
    params = ir.params(types)
    out = body(b, *params)
    return b.builder.function(name, params, _tuple(out))


def ref(shape, dtype="float32"):
    return ir.RefType(tuple(shape), dtype)


def arr(shape, dtype="float32"):
    return ir.ArrayType(tuple(shape), dtype)


def full(shape):
    """The indexer selecting a whole array."""
    return tuple(ir.Slice(0, d, 1) for d in shape)


def run_op(name, *inputs, **attrs):
    """Interpret a one-op function whose parameters are ``inputs``; return its result."""
    from minipallas import interpret

    inputs = [np.asarray(x) for x in inputs]
    f = build([arr(x.shape, x.dtype) for x in inputs], lambda b, *ps: b.v(name, *ps, **attrs))
    (out,) = interpret(f, *inputs)
    return out


def bits(x):
    """The bit pattern of an array, for exact comparisons that see NaN payloads and -0.0."""
    x = np.asarray(x)
    return x.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize])


def assert_same(actual, expected):
    """Same dtype, shape and bits (NaN equals NaN; -0.0 differs from +0.0)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    if actual.dtype.kind == "f" or actual.dtype.name in ("bfloat16",):
        np.testing.assert_array_equal(
            np.isnan(actual.astype(np.float32)), np.isnan(expected.astype(np.float32))
        )
        keep = ~np.isnan(actual.astype(np.float32))
        np.testing.assert_array_equal(bits(actual)[keep], bits(expected)[keep])
    else:
        np.testing.assert_array_equal(actual, expected)
