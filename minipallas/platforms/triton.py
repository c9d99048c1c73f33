"""The CUDA and ROCm rows: the kernel's Triton module as upstream Pallas's Triton custom call.

The ``gpu`` target's module, launched by ``triton_call.triton_custom_call`` as upstream's
Triton lowering emits it: the launch grid, ``num_warps``/``num_stages`` from the call's
``minipallas.gpu.CompilerParams`` over upstream's defaults per platform (``triton_call.LAUNCH``),
``input_output_aliases`` as ``output_operand_aliases``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from minipallas.lowering.runtime.triton_call import launch_for, triton_custom_call

if TYPE_CHECKING:
    from minipallas.platforms import Platform
    from minipallas.platforms.primitive import KernelCall


def launch(
    ctx: Any, operands: Sequence[Any], call: KernelCall, platform: Platform
) -> Sequence[Any]:
    """In the primitive's lowering rule (``ctx``): the Triton custom call running ``call``."""
    lowered = call.lowered(platform.target)
    options = launch_for(platform.name, call.compiler_params)
    return triton_custom_call(
        ctx,
        operands,
        lowered.module,
        call.kernel.name,
        lowered.launch_grid,
        num_warps=options.num_warps,
        num_stages=options.num_stages,
        aliases=call.kernel.input_output_aliases,
        debug=call.debug,
    )
