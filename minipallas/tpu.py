"""TPU memory spaces, named as in ``jax.experimental.pallas.tpu``: ``VMEM((8, 128), f32)``."""

from minipallas.ir.types import ANY, TPU_SMEM, TPU_VMEM

VMEM = TPU_VMEM
SMEM = TPU_SMEM

__all__ = ["ANY", "SMEM", "VMEM"]
