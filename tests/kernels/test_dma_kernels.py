"""Kernels with async copies agree with upstream's ``pallas_call(interpret=True)`` on the CPU,
bit for bit: HBM (ANY) -> VMEM copies of dynamic windows over a grid, manual double
buffering, VMEM -> VMEM copies in ``run_scoped``, copies out to an HBM output, several copies
in flight on one semaphore; and the DMA semaphore counts as upstream's does."""

import numpy as np
import pytest
from kernel_helpers import assert_same_bits, custom_call_ops

import minipallas as mp
from minipallas.ir.collectives import TritonSemaphoreUnsupported
from minipallas.kernels.programs.grid import grid_program
from minipallas.tools.corpora.dma_cases import DMA_CASES, SEM_COUNT


@pytest.mark.parametrize("case", [*DMA_CASES, SEM_COUNT], ids=lambda c: c.name)
def test_an_async_copy_kernel_equals_upstream_interpret(case):
    args = case.inputs()
    got, want = case.minipallas()(*args), case.upstream()(*args)
    assert_same_bits(got, np.asarray(want))


def test_the_copies_land_where_numpy_says():
    """Not just agreement: each kernel's meaning, from numpy."""
    cases = {c.name: c for c in DMA_CASES}
    x = cases["dma_hbm_rows"].inputs()[0]
    assert_same_bits(cases["dma_hbm_rows"].minipallas()(x), x * np.float32(2))
    assert_same_bits(cases["dma_double_buffer"].minipallas()(x), x + np.float32(1))
    assert_same_bits(cases["dma_to_hbm"].minipallas()(x), x * np.float32(3))
    (c,) = cases["dma_loop_chunks"].inputs()
    assert_same_bits(cases["dma_loop_chunks"].minipallas()(c), ((c[0] + c[1]) + c[2]) + c[3])
    (w,) = cases["dma_column_window"].inputs()
    assert_same_bits(cases["dma_column_window"].minipallas()(w), w[8:] - np.float32(1))
    pos, new, cache = cases["dma_update_in_place"].inputs()
    want = cache.copy()
    want[16:24] = new
    assert_same_bits(cases["dma_update_in_place"].minipallas()(pos, new, cache), want)
    (y,) = cases["dma_hbm_to_hbm"].inputs()
    assert_same_bits(cases["dma_hbm_to_hbm"].minipallas()(y), np.concatenate([y[8:], y[:8]]))
    (n,) = cases["dma_to_smem"].inputs()
    assert_same_bits(cases["dma_to_smem"].minipallas()(n), n[3:4] + n[5:6])
    idx, table = cases["dma_gather_rows"].inputs()
    assert_same_bits(cases["dma_gather_rows"].minipallas()(idx, table), table[idx])


def test_a_semaphore_counts_the_elements_of_each_copy():
    (x,) = SEM_COUNT.inputs()
    assert np.asarray(SEM_COUNT.minipallas()(x)).tolist() == [8 * 128, 0]


@pytest.mark.parametrize("case", DMA_CASES, ids=lambda c: c.name)
def test_the_interpreter_and_to_jax_agree_with_the_compiled_call(case):
    """The call runs the discharged program as XLA ops (StableHLO); the reference interpreter
    runs the grid program with its async copies (under ``checks``: no access touches a copy in
    flight), and ``to_jax`` evaluates it discharged with
    ``jax.lax``: all the same bits."""
    args = case.inputs()
    call = case.minipallas()
    want = np.asarray(call(*args))
    program = grid_program(call.trace(*args))
    assert any(op.name == "dma_start" for f in program.callees() for op in f.walk())
    (interpreted,) = mp.interpret(program, *args, checks=True)  # no access races a copy
    assert_same_bits(interpreted, want)
    (evaluated,) = mp.to_jax(program)(*args)
    assert_same_bits(np.asarray(evaluated), want)


def test_triton_refuses_an_async_copy_with_upstreams_message():
    case = next(c for c in DMA_CASES if c.name == "dma_double_buffer")
    with pytest.raises(TritonSemaphoreUnsupported) as e:
        case.minipallas().lower(*case.inputs(), target="gpu")
    assert str(e.value) == (
        "Unimplemented primitive in Pallas Triton lowering: dma_start. Please file an issue at "
        "https://github.com/jax-ml/jax/issues/new/choose."
    )
    assert "dma_cases.py" in str(e.value.loc)


def test_under_jit_for_the_tpu_the_call_is_a_mosaic_custom_call():
    case = next(c for c in DMA_CASES if c.name == "dma_double_buffer")
    args = case.inputs()
    ops = custom_call_ops(case.minipallas(), args, "tpu")
    assert [op.attributes["call_target_name"].value for op in ops] == ["tpu_custom_call"]
