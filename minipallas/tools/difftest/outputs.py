"""A case's inputs and a program's outputs, as every part of the difftest sees them.

A case input is an array, or a ref (``ref(x)``: a ``RefArg``) the program may write. A
program's outputs are its results, then the final value of each ref input, in order
(``interpret_outputs``). Each run starts from fresh copies of the inputs (``initial``), so no
run sees another's writes.

This is the bottom of the difftest: the numerics envelope, the comparisons (``report``), the
bisect, the classifier and the harness all run programs on a case's inputs this way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from minipallas.ir.core import Function
from minipallas.ir.interpret import interpret


@dataclass(frozen=True)
class RefArg:
    """An input passed as a ``Ref`` (its initial value); see ``ref``."""

    value: np.ndarray


def ref(value: Any) -> RefArg:  # noqa: ANN401
    """Marks a case input as a ref: the program gets a ``Ref`` holding a copy of ``value``."""
    return RefArg(np.asarray(value))


def initial(args: Sequence[Any]) -> list[np.ndarray]:
    """Fresh copies of the inputs' values (refs unwrapped)."""
    return [np.array(a.value if isinstance(a, RefArg) else a, copy=True) for a in args]


def interpret_outputs(fn: Function, args: Sequence[Any], **options: Any) -> list[np.ndarray]:  # noqa: ANN401
    """Results, then the final value of each ref input, of interpreting ``fn``."""
    values = initial(args)
    results = interpret(fn, *values, **options)
    return [*results, *(v for a, v in zip(args, values, strict=True) if isinstance(a, RefArg))]
