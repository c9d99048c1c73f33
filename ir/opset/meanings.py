"""What array ops mean where hardware leaves a choice, said once: every path (the interpreter,
the StableHLO, Triton and Mosaic emitters, the JAX exporter) builds it from its own ops.

Integer ``div`` and ``rem``, which trap in C, are XLA's: ``x / 0`` is -1 (all bits set when
unsigned), ``x % 0`` is ``x``, ``INT_MIN / -1`` is ``INT_MIN`` and ``INT_MIN % -1`` is 0;
elsewhere the quotient truncates toward zero and the remainder has the dividend's sign.
Integer ``pow`` is XLA's six square-and-multiply steps (only the exponent's low 6 bits count);
an exponent whose bits, read as signed, are negative gives 1 for base 1 and 0 otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np


class IntegerOps(NamedTuple):
    """A path's own operations: ``constant(value, like)``, ``eq``, ``both`` and ``either`` (of
    two predicates), ``select(predicate, on_true, on_false)``."""

    constant: Callable[[int, Any], Any]
    eq: Callable[[Any, Any], Any]
    both: Callable[[Any, Any], Any]
    either: Callable[[Any, Any], Any]
    select: Callable[[Any, Any, Any], Any]


def integer_div_rem(
    name: str, dtype: np.dtype, x: Any, y: Any, ops: IntegerOps, divide: Callable[[Any, Any], Any]
) -> Any:
    """``x div y`` or ``x rem y`` (``name``) of integers of ``dtype``, as the module doc says.
    ``divide`` is the path's own truncating ``div`` or ``rem``; it is only given divisors that
    cannot trap: 1 stands in where C would (``x / 1`` is ``INT_MIN / -1``'s answer, ``x % 1``
    its remainder), then a zero divisor's answer is selected."""
    by_zero = ops.eq(y, ops.constant(0, y))
    trap = by_zero
    if np.dtype(dtype).kind == "i":
        int_min = int(np.iinfo(dtype).min)
        overflow = ops.both(ops.eq(x, ops.constant(int_min, x)), ops.eq(y, ops.constant(-1, y)))
        trap = ops.either(by_zero, overflow)
    safe = divide(x, ops.select(trap, ops.constant(1, y), y))
    on_zero = ops.constant(-1, x) if name == "div" else x
    return ops.select(by_zero, on_zero, safe)


# numpy's: -1 cast to an unsigned dtype wraps to all bits set
NUMPY_INTEGERS = IntegerOps(
    lambda value, like: np.array(value).astype(like.dtype),
    np.equal,
    np.logical_and,
    np.logical_or,
    np.where,
)


def numpy_div_rem(name: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``integer_div_rem`` on numpy integer arrays of one dtype (the reference's)."""

    def divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        remainder = np.fmod(a, b)  # C's: the dividend's sign
        return remainder if name == "rem" else (a - remainder) // b  # an exact division

    return integer_div_rem(name, x.dtype, x, y, NUMPY_INTEGERS, divide)


class PowerOps(NamedTuple):
    """A path's operations for integer ``pow``: ``constant``, ``eq`` and ``select`` as above,
    ``negative(y)`` (its bits read as signed), and for the steps ``odd(e)``, ``mul`` and
    ``halve(e)`` (a shift right by one)."""

    constant: Callable[[int, Any], Any]
    eq: Callable[[Any, Any], Any]
    select: Callable[[Any, Any, Any], Any]
    negative: Callable[[Any], Any]
    odd: Callable[[Any], Any] | None = None
    mul: Callable[[Any, Any], Any] | None = None
    halve: Callable[[Any], Any] | None = None


def square_and_multiply(x: Any, y: Any, ops: PowerOps) -> Any:
    """XLA's integer power for an exponent that is not negative: six steps, so only its low 6
    bits count."""
    acc, base, e = ops.constant(1, x), x, y
    for _ in range(6):
        acc = ops.select(ops.odd(e), ops.mul(acc, base), acc)
        base = ops.mul(base, base)
        e = ops.halve(e)
    return acc


def integer_pow(x: Any, y: Any, ops: PowerOps, power: Callable[[Any, Any], Any]) -> Any:
    """``x ** y`` of integers: ``power(x, y)`` (the path's XLA power, or
    ``square_and_multiply``) where ``y`` is not negative, else 1 for base 1 and 0 otherwise."""
    result = power(x, y)
    negative = ops.negative(y)
    inverse = ops.select(ops.eq(x, ops.constant(1, x)), ops.constant(1, x), ops.constant(0, x))
    return ops.select(negative, inverse, result)


def numpy_pow(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``integer_pow`` on numpy integer arrays of one dtype (the reference's)."""
    signed = np.dtype(f"int{8 * x.dtype.itemsize}")
    ops = PowerOps(
        constant=NUMPY_INTEGERS.constant,
        eq=np.equal,
        select=np.where,
        negative=lambda e: e.view(signed) < 0,
        odd=lambda e: e & 1,
        mul=np.multiply,
        halve=lambda e: e >> 1,
    )
    return integer_pow(x, y, ops, lambda a, b: square_and_multiply(a, b, ops))


# erf_inv in float32 is Giles' single-precision polynomial, as XLA computes it: with
# w = -log1p(-x * x), p(w - 2.5) where w < 5 and p(sqrt(w) - 3) elsewhere, times x; at |x| == 1,
# x times infinity. Its coefficients, highest first: (for w < 5, for w >= 5).
ERF_INV_COEFFICIENTS = (
    ("2.81022636e-08", "-0.000200214257"),
    ("3.43273939e-07", "0.000100950558"),
    ("-3.5233877e-06", "0.00134934322"),
    ("-4.39150654e-06", "-0.00367342844"),
    ("0.00021858087", "0.00573950773"),
    ("-0.00125372503", "-0.0076224613"),
    ("-0.00417768164", "0.00943887047"),
    ("0.246640727", "1.00167406"),
    ("1.50140941", "2.83297682"),
)
