"""The GPU launch path of ``bench/chip/gpu_check.py``, as far as a machine without a GPU goes: the
jax function that launches an emitted module lowers for "cuda" to XLA's Triton custom call,
carrying the module and its launch grid."""

import jax
import numpy as np
from gpu_util import lowered

from minipallas.lowering.runtime.triton_call import gpu_available, gpu_triton_function


def test_the_launch_lowers_to_xlas_triton_custom_call():
    low = lowered("add_partial_blocks")
    fn = gpu_triton_function(
        low.module, "add_partial_blocks", low.launch_grid, [((20, 300), np.float32)]
    )
    spec = jax.ShapeDtypeStruct((20, 300), np.float32)
    text = fn.trace(spec, spec).lower(lowering_platforms=("cuda",)).as_text()
    assert "stablehlo.custom_call @__gpu$xla.gpu.triton" in text
    assert "grid_x = 3 : i32" in text and "grid_y = 3 : i32" in text
    assert 'name = "add_partial_blocks"' in text and "num_warps = 4 : i32" in text


def test_no_gpu_here_and_gpu_check_refuses_cleanly(capsys):
    from bench.chip import gpu_check

    if gpu_available():  # pragma: no cover - only on a GPU machine
        return
    assert gpu_check.main([]) == 2
    assert "no CUDA GPU is visible" in capsys.readouterr().err


def test_one_table_holds_the_launch_defaults_every_launch_reads():
    """Upstream's defaults (4 warps; 3 stages on CUDA, 1 on ROCm) are written once, in
    ``triton_call.LAUNCH``: a call's params override them field by field, and the custom call,
    the jitted launch and the PTX compiler default to the CUDA row."""
    import inspect

    from minipallas.gpu import CompilerParams
    from minipallas.lowering.gpu import ptx
    from minipallas.lowering.runtime.triton_call import (
        LAUNCH,
        Launch,
        gpu_triton_call,
        launch_for,
        triton_custom_call,
    )

    assert LAUNCH == {"cuda": Launch(4, 3), "rocm": Launch(4, 1)}
    assert launch_for("rocm") == Launch(4, 1)
    assert launch_for("cuda", CompilerParams(num_warps=8)) == Launch(8, 3)
    assert launch_for("rocm", CompilerParams(num_stages=2)) == Launch(4, 2)
    for fn in (
        triton_custom_call,
        gpu_triton_function,
        gpu_triton_call,
        ptx.emit_ptx,
        ptx.compile_ptx,
    ):
        params = inspect.signature(fn).parameters
        assert (params["num_warps"].default, params["num_stages"].default) == (4, 3), fn
