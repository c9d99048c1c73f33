"""``Literal``: a constant array held as a static, hashable attribute."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.conversions import to_dtype
from minipallas.ir.types import ArrayType


@dataclass(frozen=True)
class Literal:
    """The bytes of a constant array with its type; ``array()`` gives it back as numpy."""

    type: ArrayType
    data: bytes

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
