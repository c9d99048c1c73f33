"""The rule for ``debug_print``: writes to ``sys.stdout`` what ``jax.debug.print`` writes.

Upstream formats the values it is handed (JAX arrays) under the print options it captured:
``fmt.format(*positional, **keywords)`` when ``fmt`` has a placeholder, else ``fmt`` and each
value's ``str`` joined by spaces; then a newline. A JAX array formats as its numpy value does
(a 0-d one as its scalar, so ``{x:.3f}`` works), which ``Shown`` reproduces; ``!r`` (JAX's
``Array(...)`` repr) is refused when the program is imported.
"""

from __future__ import annotations

import string
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from minipallas.ir.core import Op
from minipallas.ir.interpret.engine import Interpreter, rule
from minipallas.ir.opset.debug import DEFAULT_OPTIONS


class Shown:
    """A value as ``jax.debug.print`` shows a JAX array: ``str`` and ``format`` of its numpy
    value, a 0-d one formatted as its scalar."""

    def __init__(self, value: Any) -> None:  # noqa: ANN401
        self.value = np.asarray(value)

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(self.value if self.value.ndim else self.value[()], spec)


def has_placeholders(fmt: str) -> bool:
    """Whether ``fmt`` has a ``{...}`` field (upstream looks at its first piece only)."""
    return bool(fmt) and next(iter(string.Formatter().parse(fmt)))[1] is not None


def message(op: Op, values: Sequence[Any]) -> str:
    """The line ``op`` prints for these operand values (without its newline)."""
    fmt, names = op.attrs["fmt"], op.attrs["names"]
    shown = [Shown(v) for v in values]
    options = {**DEFAULT_OPTIONS, **dict(op.attrs["options"])}
    with np.printoptions(formatter=None, **options):  # upstream's, not the caller's, options
        if not has_placeholders(fmt):
            return " ".join((fmt, *(str(s) for s in shown)))
        positional = [s for s, n in zip(shown, names, strict=True) if not n]
        keywords = {n: s for s, n in zip(shown, names, strict=True) if n}
        return fmt.format(*positional, **keywords)


def show(op: Op, values: Sequence[Any]) -> None:
    """Prints ``op``'s line for these values (the compiled program's callback does too)."""
    sys.stdout.write(message(op, values) + "\n")


@rule("debug_print")
def debug_print(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    show(op, args)
    return ()
