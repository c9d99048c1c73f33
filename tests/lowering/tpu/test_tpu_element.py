"""``Element`` block dims in the Mosaic module, against upstream Pallas's TPU lowering.

Upstream marks such a window ``window_kind = #tpu.element_window<[low...], [high...]>`` (each
dimension's padding) and hands the index map's element offsets to Mosaic unchanged; a block
mixing ``Element`` and blocked dimensions is refused. The modules must agree on everything
``difftest.mosaic.compare`` reads and on the whole normalized text; only inferred
``dimension_semantics`` may differ (minipallas infers ``parallel`` axes, upstream defaults to
``arbitrary``), and an output whose ``Element`` windows may overlap keeps ``arbitrary``.
"""

import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "kernels"))

from element_cases import BY_NAME, Calls, E  # noqa: E402
from tpu_util import mosaic_refuses  # noqa: E402

from minipallas.interop.importer.rules.kernel_call import kernel_from_jaxpr  # noqa: E402
from minipallas.ir.errors import PassError  # noqa: E402
from minipallas.ir.types import TPU_VMEM  # noqa: E402
from minipallas.kernels.pallas_call import lower_for_target  # noqa: E402
from minipallas.tools.difftest.mosaic import UpstreamError, compare, upstream_mosaic  # noqa: E402

jax = pytest.importorskip("jax")
LOW_PADDING = mosaic_refuses(
    "'Failed to set window params for input 0: Low padding not supported yet'"
)
UNALIGNED = mosaic_refuses(
    "'Couldn't prove that tiling (128) divides index returned by transform_indices' "
    "(upstream's too)"
)


def _slide(x_ref, o_ref):
    o_ref[...] = x_ref[0:128] + x_ref[128:256]


def _tile(x_ref, o_ref):
    o_ref[...] = x_ref[:, 0:128] + x_ref[:, 128:256]


X1 = np.arange(1024, dtype=np.float32) / 3
X2 = np.arange(8 * 1024, dtype=np.float32).reshape(8, 1024) / 5
X3 = np.arange(4 * 8 * 1024, dtype=np.float32).reshape(4, 8, 1024) / 7
CASES = [
    BY_NAME["rows_window"],  # both dimensions Element, padded on both sides
    Calls("slide_1d", _slide, ((1024,), np.float32), (8,),
          [((E(256, 64, 64),), lambda i: (i * 128,))], ((128,), lambda i: (i,)), (X1,)),
    Calls("tile_unpadded", _tile, ((8, 1024), np.float32), (8,),
          [((E(8), E(256)), lambda i: (0, i * 96))], ((8, 128), lambda i: (0, i)), (X2,)),
    Calls("squeezed_batch", _tile, ((4, 8, 1024), np.float32), (4, 8),
          [((None, E(8), E(256, 0, 128)), lambda b, i: (b, 0, i * 128))],
          ((None, 8, 128), lambda b, i: (b, 0, i)), (X3,)),
]  # fmt: skip


def _modules(case):
    ours = case.minipallas().lower(*case.args, target="tpu")
    theirs = upstream_mosaic(case.upstream(interpret=False), *case.specs())
    return ours, theirs


REFUSED = {"rows_window": LOW_PADDING, "slide_1d": LOW_PADDING, "tile_unpadded": UNALIGNED}


@pytest.mark.parametrize(
    "case", [pytest.param(c, marks=REFUSED.get(c.name, ())) for c in CASES], ids=lambda c: c.name
)
def test_element_windows_match_upstream_mosaic(case):
    ours, theirs = _modules(case)
    diff = compare(ours.module, theirs)
    semantics = diff.attributes.pop("dimension_semantics", None)
    assert diff.signature is None and diff.attributes == {}
    assert diff.ops == {} and diff.memrefs == {}
    assert diff.same_text
    if semantics is not None:
        assert semantics[1].count("arbitrary") == len(case.grid)
    assert "#tpu.element_window<" in ours.as_text(debug_info=False)


@LOW_PADDING
def test_the_window_kind_carries_each_dimensions_padding():
    ours, _ = _modules(BY_NAME["rows_window"])
    text = ours.as_text(debug_info=False)
    assert "window_kind = #tpu.element_window<[4, 64], [4, 64]>" in text
    assert text.count("window_kind") == 1  # the blocked output has none


@LOW_PADDING
def test_an_upstream_kernel_imported_lowers_to_upstreams_module():
    case = BY_NAME["rows_window"]
    kernel = kernel_from_jaxpr(jax.make_jaxpr(case.upstream())(*case.args), memory_space=TPU_VMEM)
    ours = lower_for_target(kernel, "tpu")
    theirs = upstream_mosaic(case.upstream(interpret=False), *case.specs())
    diff = compare(ours.module, theirs)
    diff.attributes.pop("dimension_semantics", None)
    assert not diff and diff.same_text


def test_mixing_element_and_blocked_dims_is_refused_as_upstream():
    case = Calls("mixed", _tile, ((8, 1024), np.float32), (8,),
                 [((8, E(256)), lambda i: (0, i * 128))], ((8, 128), lambda i: (0, i)),
                 (X2,))  # fmt: skip
    rule = "All block dimensions must be Elements or none of them can be Elements"
    with pytest.raises(UpstreamError, match=rule):
        upstream_mosaic(case.upstream(interpret=False), *case.specs())
    with pytest.raises(PassError, match=rule) as e:
        case.minipallas().lower(*case.args, target="tpu")
    assert e.value.op == "pallas_call"
    assert "test_tpu_element.py" in str(e.value.loc)
    assert "Element" in e.value.fix
    # the CPU path runs the same kernel
    assert (
        case.minipallas()(*case.args).tobytes() == np.asarray(case.upstream()(*case.args)).tobytes()
    )


def _semantics(out_map, size=128):
    case = Calls("out_elements", lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref[...]),
                 ((8, 1024), np.float32), (8,), [((8, 128), lambda i: (0, i))],
                 ((E(8), E(size)), out_map), (X2,))  # fmt: skip
    return case.minipallas().lower(*case.args, target="tpu").info["dimension_semantics"]


def test_aligned_element_output_windows_infer_parallel():
    assert _semantics(lambda i: (0, i * 128)).values == ("parallel",)


@UNALIGNED
def test_overlapping_element_output_windows_stay_arbitrary():
    semantics = _semantics(lambda i: (0, i * 64))  # windows of 128 every 64 elements
    assert semantics.values == ("arbitrary",)
    assert "output 0's block is revisited" in semantics.reasons[0]


@pytest.mark.parametrize("case", CASES[1:], ids=lambda c: c.name)
def test_the_same_kernels_run_on_the_cpu_as_upstream_interpret_mode(case):
    expected = np.asarray(case.upstream()(*case.args))
    assert case.minipallas()(*case.args).tobytes() == expected.tobytes()
