"""``Literal``: a constant array held as a static, hashable attribute."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.conversions import canonical_bools, to_dtype
from minipallas.ir.types import ArrayType


@dataclass(frozen=True)
class Literal:
    """The bytes of a constant array with its type; ``array()`` gives it back as numpy.

    A bool's byte is always 0 or 1. numpy lets a bool array hold any byte (``view(bool)`` of
    0xFF), which compares equal to True but is other bits: kept, it would make a folded constant
    differ bit for bit from what the op computes (numpy's bool ops give 1). So the bytes of a
    bool literal are canonicalized when it is built, whichever way it is built.
    """

    type: ArrayType
    data: bytes

    def __post_init__(self) -> None:
        if self.type.dtype == "bool" and self.data.strip(b"\x00\x01"):
            bools = np.frombuffer(self.data, dtype=np.bool_)
            object.__setattr__(self, "data", canonical_bools(bools).tobytes())

    @staticmethod
    def of(value: object, dtype: object) -> Literal:
        name = dtypes.canonicalize(dtype)
        array = to_dtype(value, name)
        return Literal(ArrayType(array.shape, name), np.ascontiguousarray(array).tobytes())

    def array(self) -> np.ndarray:
        flat = np.frombuffer(self.data, dtype=dtypes.to_numpy(self.type.dtype))
        return flat.reshape(self.type.shape).copy()

    def is_splat(self) -> bool:
        """All elements equal (bitwise), so the literal prints as one scalar."""
        flat = (
            np.frombuffer(self.data, dtype=np.uint8).reshape(max(self.type.size, 1), -1)
            if self.type.size
            else None
        )
        return flat is None or bool((flat == flat[0]).all())
