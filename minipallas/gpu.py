"""GPU memory spaces, named as in ``jax.experimental.pallas.triton``/``mosaic_gpu``."""

from minipallas.ir.types import GPU_GMEM, GPU_SMEM

GMEM = GPU_GMEM
SMEM = GPU_SMEM

__all__ = ["GMEM", "SMEM"]
