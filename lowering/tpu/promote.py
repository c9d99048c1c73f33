"""What scratch promotion (``passes.promote_scratch``, the TPU pipeline's ``promote-scratch``
with ``promote_scratch=True``) changed in the emitted Mosaic module."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PromotionReport:
    """What promotion changed in the emitted module: allocations promoted, and the MLIR op
    count of the kernel module without and with promotion (both canonicalized)."""

    promoted: int
    ops_without: int
    ops_with: int

    @property
    def difference(self) -> int:
        return self.ops_with - self.ops_without

    def __str__(self) -> str:
        return (
            f"promoted {self.promoted} scratch buffer(s) to registers: "
            f"{self.ops_without} -> {self.ops_with} ops ({self.difference:+d})"
        )
