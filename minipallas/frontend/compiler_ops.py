"""The Pallas ops that tell the compiler how to compute a value, not what it is:
``reciprocal(x, approx=...)`` (``pl.reciprocal``: the TPU's approximate reciprocal) and
``multiple_of(i, n)`` (``pl.multiple_of``: a promise Mosaic reads to prove an offset aligned).
Off the chip they compute what upstream's interpret mode computes."""

from __future__ import annotations

from typing import Any

from minipallas.frontend.scopes import trace_error
from minipallas.frontend.values import TracedArray, asarray, emit_array
from minipallas.ir import dtypes


def reciprocal(x: Any, *, approx: bool = False, full_range: bool = True) -> TracedArray:
    """``1 / x`` of a float array; ``approx=True`` lets the TPU use its approximate reciprocal
    (off the chip: ``1 / x`` of ``x`` rounded to bfloat16, as upstream). ``full_range=False``
    lets Mosaic assume no infinities, NaNs or extreme inputs."""
    x = asarray(x)
    if not dtypes.is_float(x.type.dtype):
        raise trace_error(
            f"reciprocal takes a float array, got {x.type}", fix="convert it to float32 first"
        )
    return emit_array("reciprocal", [x], approx=bool(approx), full_range=bool(full_range))


def multiple_of(x: Any, multiple: int) -> TracedArray:
    """``x`` unchanged, promised to be a multiple of ``multiple`` (an integer): a wrong promise
    is undefined behaviour on the chip, as upstream's."""
    x = asarray(x)
    if not dtypes.is_int(x.type.dtype) or not isinstance(multiple, int) or multiple <= 0:
        raise trace_error(
            f"multiple_of takes an integer and a positive int, got {x.type} and {multiple!r}",
            fix="pass the index and the multiple it is of: multiple_of(i * 8, 8)",
        )
    return emit_array("multiple_of", [x], multiple=multiple)
