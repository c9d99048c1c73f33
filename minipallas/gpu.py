"""GPU memory spaces, named as in ``jax.experimental.pallas.triton``/``mosaic_gpu``, and
Triton's compiler params (``CompilerParams(num_warps=8, num_stages=2)``)."""

from minipallas.ir.types import GPU_GMEM, GPU_SMEM
from minipallas.kernels.spec.params import GpuCompilerParams as CompilerParams

GMEM = GPU_GMEM
SMEM = GPU_SMEM

__all__ = ["GMEM", "SMEM", "CompilerParams"]
