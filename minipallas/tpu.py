"""TPU memory spaces and compiler params, named as in ``jax.experimental.pallas.tpu``:
``VMEM((8, 128), f32)``, ``CompilerParams(dimension_semantics=("parallel",))``."""

from minipallas.ir.types import ANY, TPU_SMEM, TPU_VMEM
from minipallas.kernels.params import TpuCompilerParams as CompilerParams

VMEM = TPU_VMEM
SMEM = TPU_SMEM

__all__ = ["ANY", "SMEM", "VMEM", "CompilerParams"]
