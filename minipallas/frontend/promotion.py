"""Dtypes of mixed operations, following ``jax.numpy`` with 64-bit types disabled.

- Two arrays promote along JAX's lattice: bool < int8 < int16 < int32, uint8 < uint16 < uint32;
  a signed with an unsigned int gives the narrowest signed int holding both (uint8 with int8 is
  int16; uint32 with a signed int gives int32, as JAX gives int64 and then narrows it); any int with
  a float gives the float; bfloat16 with float16 gives float32.
- Python scalars are *weakly typed*: next to an array they take the array's dtype, unless the
  kind has to change (an int next to a bool array gives int32, a float next to an int or bool
  array gives float32). Alone they default to bool, int32 and float32.
- numpy arrays are strongly typed; their 64-bit dtypes narrow to 32 bits as JAX does.
"""

from __future__ import annotations

import numpy as np

from minipallas.frontend.scopes import trace_error
from minipallas.ir import dtypes
from minipallas.ir.errors import MiniPallasError

_FLOAT_RANK = {"float16": 1, "bfloat16": 1, "float32": 2}
_NARROW = {"float64": "float32", "int64": "int32", "uint64": "uint32"}

PythonScalar = bool | int | float


def canonical(dtype: object) -> str:
    """The canonical dtype name of ``dtype`` (a name, numpy dtype or scalar type)."""
    if dtype is not None and not isinstance(dtype, str):
        try:
            dtype = np.dtype(dtype).name  # type: ignore[call-overload]
        except TypeError:
            pass  # canonicalize reports it
    if isinstance(dtype, str):
        dtype = _NARROW.get(dtype, dtype)
    try:
        return dtypes.canonicalize(dtype)
    except MiniPallasError as e:
        raise trace_error(e.message, fix=e.fix) from None


def promote(a: str, b: str) -> str:
    """The dtype both operands of a binary operation are converted to."""
    if a == b or b == "bool":
        return a
    if a == "bool":
        return b
    if dtypes.is_float(a) and dtypes.is_float(b):
        if _FLOAT_RANK[a] == _FLOAT_RANK[b]:
            return "float32"  # bfloat16 with float16
        return a if _FLOAT_RANK[a] > _FLOAT_RANK[b] else b
    if dtypes.is_float(a) or dtypes.is_float(b):
        return a if dtypes.is_float(a) else b
    if dtypes.is_signed(a) == dtypes.is_signed(b):
        return a if dtypes.itemsize(a) >= dtypes.itemsize(b) else b
    signed, unsigned = (a, b) if dtypes.is_signed(a) else (b, a)
    # the narrowest signed type holding both (uint8 with int8 is int16), int32 at most as
    # JAX gives with x64 off (uint32 with a signed int is int64, narrowed)
    width = min(max(dtypes.itemsize(signed), 2 * dtypes.itemsize(unsigned)), 4)
    return {1: "int8", 2: "int16", 4: "int32"}[width]


def is_python_scalar(x: object) -> bool:
    return isinstance(x, bool | int | float) and not isinstance(x, np.generic)


def default_dtype(value: PythonScalar) -> str:
    """The dtype of a Python scalar on its own."""
    if isinstance(value, bool):
        return "bool"
    return "int32" if isinstance(value, int) else "float32"


def weak_dtype(value: PythonScalar, other: str) -> str:
    """The dtype a Python scalar takes next to an array of dtype ``other``."""
    if isinstance(value, bool):
        return other
    if isinstance(value, int):
        return "int32" if other == "bool" else other
    return other if dtypes.is_float(other) else "float32"


def numpy_dtype(array: np.ndarray) -> str:
    """The dtype a numpy array becomes: its own, with 64-bit types narrowed."""
    return canonical(array.dtype)


def check_fits(value: PythonScalar, dtype: str) -> None:
    """A Python number must be representable in the dtype it is converted to."""
    if isinstance(value, float) and not isinstance(value, bool) and not dtypes.is_float(dtype):
        raise trace_error(
            f"cannot convert the Python float {value!r} to {dtype} without losing its fraction",
            fix=f"write an integer, or convert explicitly with .astype({dtype!r})",
        )
    if isinstance(value, int) and not isinstance(value, bool) and dtypes.is_int(dtype):
        info = np.iinfo(dtypes.to_numpy(dtype))
        if not info.min <= value <= info.max:
            raise trace_error(
                f"the Python int {value} does not fit in {dtype} (range {info.min}..{info.max})",
                fix="use a value in range, or a wider dtype",
            )
