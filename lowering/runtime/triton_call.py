"""Launching a Triton module as upstream Pallas's Triton backend does: XLA's GPU custom call
``__gpu$xla.gpu.triton`` with the module as bytecode, and the launch's defaults.

- ``LAUNCH``: upstream's number of warps and pipeline stages per platform, the one table every
  launch and compilation reads (``launch_for``: a call's compiler params over them);
- ``triton_custom_call``: the custom call, in a jax lowering rule; ``gpu_triton_function`` /
  ``gpu_triton_call``: a module launched by itself under ``jax.jit`` (the GPU checks);
- ``gpu_available()``: whether jax sees a CUDA GPU.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from minipallas.lowering.compat import jax_private
from minipallas.lowering.compat.jaxlib_shim import ir

__all__ = [
    "CUDA",
    "LAUNCH",
    "Launch",
    "gpu_available",
    "gpu_triton_call",
    "gpu_triton_function",
    "launch_for",
    "triton_custom_call",
]


@dataclasses.dataclass(frozen=True)
class Launch:
    """How a Triton program is compiled and launched: its warps (32 threads each) and the
    software-pipeline stages of its loops."""

    num_warps: int
    num_stages: int


# Upstream Pallas's defaults (jax/_src/pallas/triton/pallas_call_registration.py): 4 warps; 3
# stages on CUDA, 1 on ROCm.
LAUNCH = {"cuda": Launch(num_warps=4, num_stages=3), "rocm": Launch(num_warps=4, num_stages=1)}
CUDA = LAUNCH["cuda"]


def launch_for(platform: str, params: Any = None) -> Launch:
    """The launch of a call on ``platform``: ``params`` (a ``minipallas.gpu.CompilerParams``, or
    None) where it sets ``num_warps`` / ``num_stages``, else ``LAUNCH[platform]``."""
    given = {
        f.name: getattr(params, f.name, None)
        for f in dataclasses.fields(Launch)
        if getattr(params, f.name, None) is not None
    }
    return dataclasses.replace(LAUNCH[platform], **given)


def gpu_available() -> bool:
    """Whether jax sees a CUDA GPU in this process."""
    import jax

    try:
        return bool(jax.devices("cuda"))
    except RuntimeError:
        return False


def triton_custom_call(
    ctx: Any,
    operands: Sequence[Any],
    module: ir.Module,
    name: str,
    grid: Sequence[int],
    *,
    num_warps: int = CUDA.num_warps,
    num_stages: int = CUDA.num_stages,
    aliases: Sequence[tuple[int, int]] = (),
    debug: bool = False,
) -> Sequence[Any]:
    """In a jax lowering rule (``ctx``): the custom call launching ``module``'s function ``name``
    over ``grid`` (up to 3 axes), ``operands`` then the results as its pointers, in the form
    upstream Pallas's Triton lowering emits with jaxlib 0.10.2: ``__gpu$xla.gpu.triton``, the
    module as bytecode in the backend config, row-major layouts, and ``aliases`` (input,
    output) as ``output_operand_aliases``, so XLA gives each such pair one buffer."""
    import io

    jax_mlir = jax_private.mlir
    buf = io.BytesIO()
    module.operation.write_bytecode(buf)
    x, y, z = (*grid, 1, 1, 1)[:3]
    config = dict(
        name=ir.StringAttr.get(name),
        ir=ir.StringAttr.get(buf.getvalue()),
        num_stages=jax_mlir.i32_attr(num_stages),
        num_warps=jax_mlir.i32_attr(num_warps),
        grid_x=jax_mlir.i32_attr(x),
        grid_y=jax_mlir.i32_attr(y),
        grid_z=jax_mlir.i32_attr(z),
        debug=ir.BoolAttr.get(debug),
    )
    return jax_mlir.custom_call(
        call_target_name="__gpu$xla.gpu.triton",
        result_types=[jax_mlir.aval_to_ir_type(ctx.module_context, a) for a in ctx.avals_out],
        operands=list(operands),
        backend_config=config,
        api_version=4,
        operand_layouts=[list(reversed(range(a.ndim))) for a in ctx.avals_in],
        result_layouts=[list(reversed(range(a.ndim))) for a in ctx.avals_out],
        operand_output_aliases=dict(aliases),
    ).results


def gpu_triton_function(
    module: ir.Module,
    name: str,
    grid: Sequence[int],
    out_types: Sequence[tuple[tuple[int, ...], np.dtype]],
    *,
    num_warps: int = CUDA.num_warps,
    num_stages: int = CUDA.num_stages,
) -> Any:
    """A jitted jax function launching a Triton module once over ``grid`` through
    ``triton_custom_call``, its arguments then its outputs as the kernel's pointers. Lowers for
    ``"cuda"`` on any machine; runs only where jax sees a CUDA GPU."""
    import jax

    jax_core, jax_mlir = jax_private.core, jax_private.mlir

    avals = [jax_core.ShapedArray(shape, dtype) for shape, dtype in out_types]
    call = jax_core.Primitive(f"minipallas_triton_{name}")
    call.multiple_results = True
    call.def_abstract_eval(lambda *_: avals)

    def lowering(ctx: Any, *operands: Any) -> Any:
        return triton_custom_call(
            ctx, operands, module, name, grid, num_warps=num_warps, num_stages=num_stages
        )

    jax_mlir.register_lowering(call, lowering, platform="cuda")
    return jax.jit(lambda *a: call.bind(*a))


def gpu_triton_call(
    module: ir.Module,
    name: str,
    grid: Sequence[int],
    arrays: Sequence[np.ndarray],
    out_types: Sequence[tuple[tuple[int, ...], np.dtype]],
    *,
    num_warps: int = CUDA.num_warps,
    num_stages: int = CUDA.num_stages,
) -> list[np.ndarray]:
    """Runs ``gpu_triton_function`` on the first CUDA device; returns numpy arrays."""
    import jax

    fn = gpu_triton_function(
        module, name, grid, out_types, num_warps=num_warps, num_stages=num_stages
    )
    device = jax.devices("cuda")[0]
    outs = fn(*(jax.device_put(a, device) for a in arrays))
    return [np.asarray(o) for o in outs]
