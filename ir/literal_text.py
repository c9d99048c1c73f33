"""Constants as text, bit-exact in both directions.

A splat constant prints as one scalar (``1.5``), any other as nested lists (``[[1, 2], [3,
4]]``). Floats print as the shortest decimal that converts back to the same bits in their own
dtype (``0.1`` for f32, bf16 and f16 alike), written as Python writes floats; ``inf``,
``-inf``, ``-0.0`` and the dtype's default ``nan`` print by name, and any other NaN as its raw
bits in hex (``0x7fc00001``), as MLIR does. Booleans are ``true`` / ``false``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.conversions import round_float
from minipallas.ir.errors import ParseError
from minipallas.ir.lexer import Token
from minipallas.ir.literal import Literal
from minipallas.ir.location import Location
from minipallas.ir.types import ArrayType

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32}


def format_literal(literal: Literal) -> str:
    """The text of a constant's value (without its type)."""
    dtype = literal.type.dtype
    flat = literal.array().reshape(-1)
    if flat.size and literal.is_splat():
        return _scalar_text(flat[:1], dtype)
    items = [_scalar_text(flat[i : i + 1], dtype) for i in range(flat.size)]
    return _nest(items, literal.type.shape)


def _nest(items: list[str], shape: tuple[int, ...]) -> str:
    """Groups a flat list of element texts into nested brackets, innermost dimension first."""
    groups = items
    for k in reversed(range(len(shape))):
        d, outer = shape[k], math.prod(shape[:k])
        groups = ["[" + ", ".join(groups[i * d : (i + 1) * d]) + "]" for i in range(outer)]
    return groups[0]


def _bits(value: float, dtype: str) -> int:
    """The bits of a Python float rounded to ``dtype``."""
    width = dtypes.itemsize(dtype)
    return int(round_float(np.float64(value), dtype).view(_UINT[width]))


def _scalar_text(element: np.ndarray, dtype: str) -> str:
    """One element (a length-1 array, so its bits are at hand) as text."""
    if dtype == "bool":
        return "true" if element[0] else "false"
    if dtypes.is_int(dtype):
        return str(int(element[0]))
    width = dtypes.itemsize(dtype)
    bits = int(element.view(_UINT[width])[0])
    value = float(element[0])
    if math.isnan(value):
        return "nan" if bits == _bits(math.nan, dtype) else f"0x{bits:0{2 * width}x}"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    for digits in range(1, 18):
        text = f"{value:.{digits}g}"
        if _bits(float(text), dtype) == bits:
            break
    return repr(float(text))  # the same number, written as Python does: 65500.0, not 6.55e+04


def build_literal(
    tokens: list[Token], type_: ArrayType, splat: bool, where: Callable[[Token], Location]
) -> Literal:
    """A ``Literal`` of ``type_`` from element tokens: one (``splat``) or one per element.
    ``where`` gives a token's ``line:col`` for error messages."""
    dtype = type_.dtype
    values = [_element(tok, dtype, where) for tok in tokens]
    if dtypes.is_float(dtype):
        array = np.array(values, _UINT[dtypes.itemsize(dtype)]).view(dtypes.to_numpy(dtype))
    else:
        array = np.array(values, dtypes.to_numpy(dtype))
    array = np.broadcast_to(array[0], type_.shape) if splat else array.reshape(type_.shape)
    return Literal(type_, np.ascontiguousarray(array).tobytes())


def _element(tok: Token, dtype: str, where: Callable[[Token], Location]) -> int | bool:
    """One element token as a Python value (floats as their bits in ``dtype``)."""
    text = tok.text
    name = dtypes.SHORT[dtype]
    if dtype == "bool":
        if text not in ("true", "false"):
            raise ParseError(f"expected true or false for {name}, got {text!r}", loc=where(tok))
        return text == "true"
    if text in ("true", "false"):
        raise ParseError(f"expected a number for {name}, got {text!r}", loc=where(tok))
    is_hex = "0x" in text
    if dtypes.is_int(dtype):
        try:
            value = int(text, 16) if is_hex else int(text)
        except ValueError:
            raise ParseError(
                f"expected an integer for {name}, got {text!r}", loc=where(tok)
            ) from None
        info = np.iinfo(dtypes.to_numpy(dtype))
        if not info.min <= value <= info.max:
            raise ParseError(f"{value} does not fit in {name}", loc=where(tok))
        return value
    if is_hex:
        bits = int(text, 16)
        if not 0 <= bits < 1 << (8 * dtypes.itemsize(dtype)):
            raise ParseError(f"bits {text} do not fit in {name}", loc=where(tok))
        return bits
    return _bits(float(text), dtype)
