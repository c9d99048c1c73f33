"""Every emitted module compiles with the real Triton compiler (the ``triton`` package, a test
dependency) for sm_90 on this CPU machine: TTIR -> TTGIR -> LLVM IR -> PTX -> cubin. About
0.1-0.5 s per kernel the first time (Triton caches by module text)."""

import numpy as np
import pytest
from gpu_util import KERNELS, lowered
from test_gpu_emit import highest_dot_call

from minipallas.ir.errors import PassError
from minipallas.lowering.gpu.ptx import compile_ptx
from minipallas.tools.corpora.gpu_kernels import EXTRA, control_mix_call, masked_io_call

pytest.importorskip("triton")


@pytest.mark.parametrize("case", [*KERNELS, *EXTRA], ids=lambda c: c.name)
def test_every_kernel_compiles_to_ptx_and_a_cubin(case):
    if case in KERNELS:
        low = lowered(case.name)
    else:
        low = case.minipallas().lower(*case.inputs(), target="gpu")
    compiled = compile_ptx(low)
    assert compiled.name == case.name
    assert f".visible .entry {case.name}(" in compiled.ptx and ".target sm_90a" in compiled.ptx
    assert compiled.cubin[:4] == b"\x7fELF"
    assert compiled.num_warps == 4


def test_masked_io_compiles_with_predicated_accesses():
    x = np.zeros(100, np.float32)
    compiled = compile_ptx(masked_io_call().lower(x, target="gpu"))
    assert "@%p" in compiled.ptx  # predicated loads/stores: the masks reached the hardware


def test_control_flow_and_register_windows_compile():
    x = np.zeros((32, 128), np.float32)
    assert ".visible .entry kernel(" in compile_ptx(control_mix_call().lower(x, target="gpu")).ptx


def test_the_scratch_accumulator_stays_in_registers():
    """matmul's scratch never becomes memory: no local memory in the PTX; its f32 dot at the
    default precision is TF32, on the tensor cores."""
    compiled = compile_ptx(lowered("matmul"))
    assert ".local" not in compiled.ptx and "mma" in compiled.ptx


def test_a_highest_precision_f32_dot_runs_as_fmas_not_on_the_tensor_cores():
    x = np.ones((32, 32), np.float32)
    compiled = compile_ptx(highest_dot_call().lower(x, x, target="gpu"))
    assert "mma" not in compiled.ptx and "fma" in compiled.ptx


def test_bf16_dot_runs_on_the_tensor_cores():
    assert "mma" in compile_ptx(lowered("bf16_matmul")).ptx  # wgmma on sm_90


def test_text_that_triton_rejects_is_a_pass_error():
    with pytest.raises(PassError, match="Triton could not compile"):
        compile_ptx("module { tt.func public @k() { tt.frobnicate tt.return } }")
