"""The ``debug_print`` op under ``to_jax``: a ``jax.debug.print`` call with the op's format, its
operands as positional and keyword arguments (``names``) and its numpy print options (the
import: ``importer/rules/debug.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from minipallas.interop.exporter.engine import rule
from minipallas.ir.core import Op
from minipallas.ir.opset.debug import DEFAULT_OPTIONS


@rule("debug_print")
def to_jax_debug_print(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    positional = [a for a, n in zip(args, op.attrs["names"], strict=True) if not n]
    keywords = {n: a for a, n in zip(args, op.attrs["names"], strict=True) if n}
    with np.printoptions(**{**DEFAULT_OPTIONS, **dict(op.attrs["options"])}):
        jax.debug.print(op.attrs["fmt"], *positional, skip_format_check=True, **keywords)
    return []
