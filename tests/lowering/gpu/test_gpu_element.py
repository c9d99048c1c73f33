"""``Element`` block dims on the Triton path, against upstream Pallas's Triton lowering.

Upstream's Triton lowering takes an unpadded ``Element`` dimension's index as the block's first
element (offset alignment 1) and refuses padding ("Unblocked indexing with padding is not
supported in Triton lowering."). minipallas emits the same loads and stores (as for blocked
dims, it also clamps offsets into the array and masks what overhangs it, where upstream reads
out of bounds), and its simulation of the module gives upstream interpret mode's bits. An
output with ``Element`` dimensions is written by one program looping over the grid: windows at
element offsets may overlap, so launched programs could race.
"""

import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "kernels"))

from element_cases import BY_NAME, Calls, E  # noqa: E402

from minipallas.ir.errors import PassError  # noqa: E402
from minipallas.lowering.gpu.simulate import simulate  # noqa: E402
from minipallas.tools.difftest.triton import compare, upstream_triton  # noqa: E402

jax = pytest.importorskip("jax")


def _window_sum(x_ref, o_ref):
    o_ref[...] = x_ref[0:8] + x_ref[1:9] * 2.0 + x_ref[2:10]


def _two_halves(x_ref, o_ref):
    o_ref[...] = x_ref[0:8] + x_ref[8:16] * 2.0


def _tile(x_ref, o_ref):
    o_ref[...] = x_ref[:, 0:128] + x_ref[:, 128:256]


def _copy(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 3.0


X64 = np.arange(64, dtype=np.float32) * 0.5 + 0.25
X2 = np.arange(8 * 1024, dtype=np.float32).reshape(8, 1024) / 5
CASES = [
    Calls("halo", _window_sum, ((64,), np.float32), (8,),
          [((E(10),), lambda i: (i * 8,))], ((8,), lambda i: (i,)), (X64,)),
    Calls("halves_clamped", _two_halves, ((64,), np.float32), (8,),
          [((E(16),), lambda i: (i * 8,))], ((8,), lambda i: (i,)), (X64,)),
    Calls("tile_overlapping", _tile, ((8, 1024), np.float32), (8,),
          [((E(8), E(256)), lambda i: (0, i * 96))], ((8, 128), lambda i: (0, i)), (X2,)),
    Calls("mixed_blocked", _tile, ((8, 1024), np.float32), (8,),
          [((8, E(256)), lambda i: (0, i * 128))], ((8, 128), lambda i: (0, i)), (X2,)),
    Calls("squeezed", _two_halves, ((4, 64), np.float32), (4, 8),
          [((None, E(16)), lambda b, i: (b, i * 8 - 4))], ((None, 8), lambda b, i: (b, i)),
          (np.arange(4 * 64, dtype=np.float32).reshape(4, 64) / 3,)),
    Calls("overlapping_output", _copy, ((64,), np.float32), (8,),
          [((E(16),), lambda i: (i * 6 + 1,))], ((E(16),), lambda i: (i * 6,)), (X64,)),
]  # fmt: skip


def _lowered(case):
    return case.minipallas().lower(*case.args, target="gpu")


def _upstream_text(case):
    from jax.experimental.pallas import triton as plgpu

    call = case.upstream(interpret=False, compiler_params=plgpu.CompilerParams())
    return upstream_triton(call, *case.specs())


@pytest.mark.parametrize("case", CASES[:-1], ids=lambda c: c.name)
def test_element_blocks_make_upstreams_loads_and_stores(case):
    c = compare(_lowered(case).module, _upstream_text(case))
    assert c.same_signature and c.same_traffic, c.report()
    assert c.tt_kinds_only_ours == c.tt_kinds_only_upstream == set(), c.report()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_simulated_module_gives_upstream_interpret_modes_bits(case):
    expected = np.asarray(case.upstream()(*case.args))
    (got,) = simulate(_lowered(case), *case.args)
    assert got.tobytes() == expected.tobytes()
    assert case.minipallas()(*case.args).tobytes() == expected.tobytes()


def test_an_overhanging_element_window_is_masked_and_reads_the_fill_value():
    case = CASES[0]  # windows of 10 over 64 elements: the array padded to 70
    c = compare(_lowered(case).module, _upstream_text(case))
    assert c.masks_only_ours > 0
    (got,) = simulate(_lowered(case), *case.args)
    assert np.isnan(got[-2:]).all() and not np.isnan(got[:-2]).any()  # 64, 65 are past the end


def test_element_offsets_are_clamped_into_the_array():
    text = _lowered(CASES[1]).as_text(debug_info=False)
    assert "arith.minsi" in text and "48" in text  # the last whole window of 16 starts at 48


def test_an_element_output_is_written_by_one_looping_program():
    low = _lowered(CASES[-1])
    assert low.schedule.launched == () and low.schedule.looped == (0,)
    assert "Element dimensions" in low.schedule.why[0]
    assert low.launch_grid == (1,)


def test_padding_is_refused_as_upstream():
    case = BY_NAME["halo"]  # Element(10, padding=(1, 1))
    rule = "Unblocked indexing with padding is not supported in Triton lowering"
    with pytest.raises(NotImplementedError, match=rule):
        _upstream_text(case)
    with pytest.raises(PassError, match=rule) as e:
        _lowered(case)
    assert e.value.op == "pallas_call"
    assert "test_gpu_element.py" in str(e.value.loc)
    assert "jnp.pad" in e.value.fix


def test_an_element_kernel_compiles_to_ptx():
    pytest.importorskip("triton")
    from minipallas.lowering.gpu.ptx import compile_ptx

    assert ".visible .entry halo(" in compile_ptx(_lowered(CASES[0])).ptx
