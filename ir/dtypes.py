"""Element types: the closed set minipallas supports, their short printed names and numpy types.

A dtype is carried through the IR by its canonical name (``"float32"``), which is hashable and
prints stably; ``to_numpy`` gives the numpy dtype (bfloat16 comes from ``ml_dtypes``).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from minipallas.ir.errors import MiniPallasError

_NUMPY = {
    "float32": np.dtype(np.float32),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float16": np.dtype(np.float16),
    "int32": np.dtype(np.int32),
    "int16": np.dtype(np.int16),
    "int8": np.dtype(np.int8),
    "uint32": np.dtype(np.uint32),
    "uint16": np.dtype(np.uint16),
    "uint8": np.dtype(np.uint8),
    "bool": np.dtype(np.bool_),
}
SHORT = {
    "float32": "f32",
    "bfloat16": "bf16",
    "float16": "f16",
    "int32": "i32",
    "int16": "i16",
    "int8": "i8",
    "uint32": "u32",
    "uint16": "u16",
    "uint8": "u8",
    "bool": "bool",
}
FROM_SHORT = {short: name for name, short in SHORT.items()}
NAMES = tuple(_NUMPY)


def canonicalize(dtype: object) -> str:
    """Accepts a name, a short name, a numpy dtype or scalar type; returns the canonical name."""
    if isinstance(dtype, str):
        if dtype in _NUMPY:
            return dtype
        if dtype in FROM_SHORT:
            return FROM_SHORT[dtype]
        if dtype == "bool_":
            return "bool"
    else:
        try:
            np_dtype = np.dtype(dtype)
        except (TypeError, ValueError):
            np_dtype = None
        for name, candidate in _NUMPY.items():
            if np_dtype == candidate:
                return name
    raise MiniPallasError(f"unsupported dtype {dtype!r}", fix=f"use one of {', '.join(NAMES)}")


def to_numpy(name: str) -> np.dtype:
    return _NUMPY[name]


def is_float(name: str) -> bool:
    return name in ("float32", "bfloat16", "float16")


def is_int(name: str) -> bool:
    return name in ("int32", "int16", "int8", "uint32", "uint16", "uint8")


def is_signed(name: str) -> bool:
    """Signed integers (floats are not integers, so neither signed nor unsigned here)."""
    return name in ("int32", "int16", "int8")


def is_unsigned(name: str) -> bool:
    return name in ("uint32", "uint16", "uint8")


def fill_value(name: str) -> np.generic:
    """What fresh scratch of ``name`` holds: NaN for floats, the minimum for integers, False
    for bool.

    These are the values upstream JAX's discharge gives a ``run_scoped`` allocation
    (``uninitialized_value``), so programs read the same garbage under the reference
    interpreter, every target, and upstream.
    """
    np_dtype = to_numpy(name)
    if is_float(name):
        return np_dtype.type(np.nan)
    if is_int(name):
        return np_dtype.type(np.iinfo(np_dtype).min)
    return np.False_


def signed_twin(name: str) -> str:
    """The signed integer dtype of ``name``'s width (``uint8`` -> ``int8``): the view whose
    sign bit XLA reads where an unsigned operand is taken as signed (a ``pow`` exponent)."""
    return {8: "int8", 16: "int16", 32: "int32"}[itemsize(name) * 8]


def itemsize(name: str) -> int:
    return _NUMPY[name].itemsize


def saturation_ends(source: str, target: str) -> tuple[np.generic, np.generic]:
    """The floats of ``source`` nearest the range of integer ``target`` from inside it (never
    infinite): where a saturating float -> int ``convert`` clamps before converting. For f32 to
    i32 the top is 2147483520; a value beyond an end that is not the integer limit itself must
    then map to that limit."""
    info = np.iinfo(to_numpy(target))
    return _inner_float(info.min, source), _inner_float(info.max, source)


def _inner_float(limit: int, dtype: str) -> np.generic:
    float_t = to_numpy(dtype).type
    with np.errstate(over="ignore"):
        end = float_t(limit)
    if not np.isfinite(end) or abs(int(end)) > abs(limit):
        end = np.nextafter(end, float_t(0))
    return end
