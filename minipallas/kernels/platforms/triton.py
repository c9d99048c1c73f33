"""The CUDA and ROCm rows: the kernel's Triton module as upstream Pallas's Triton custom call.

The ``gpu`` target's module, launched by ``jaxlib_shim.triton_custom_call`` as upstream's
Triton lowering emits it: the launch grid, ``num_warps``/``num_stages`` from the call's
``minipallas.gpu.CompilerParams`` (default 4 warps; 3 stages on CUDA, 1 on ROCm, as
upstream), ``input_output_aliases`` as ``output_operand_aliases``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from minipallas.lowering.jaxlib_shim import triton_custom_call

if TYPE_CHECKING:
    from minipallas.kernels.platforms import Platform
    from minipallas.kernels.platforms.primitive import KernelCall

DEFAULT_STAGES = {"cuda": 3, "rocm": 1}  # upstream's, per platform
DEFAULT_WARPS = 4


def launch(
    ctx: Any, operands: Sequence[Any], call: KernelCall, platform: Platform
) -> Sequence[Any]:
    """In the primitive's lowering rule (``ctx``): the Triton custom call running ``call``."""
    lowered = call.lowered(platform.target)
    params = call.compiler_params
    num_warps = getattr(params, "num_warps", None)
    num_stages = getattr(params, "num_stages", None)
    return triton_custom_call(
        ctx,
        operands,
        lowered.module,
        call.kernel.name,
        lowered.launch_grid,
        num_warps=DEFAULT_WARPS if num_warps is None else num_warps,
        num_stages=DEFAULT_STAGES[platform.name] if num_stages is None else num_stages,
        aliases=call.kernel.input_output_aliases,
        debug=call.debug,
    )
