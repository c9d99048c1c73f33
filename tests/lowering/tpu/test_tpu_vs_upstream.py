"""Differential check: every suite kernel's Mosaic module against upstream Pallas's.

For each kernel both sides lower for TPU on this CPU machine (upstream through the hook in
``minipallas.tools.difftest.mosaic``); then they must agree on the kernel signature, its attributes,
the multiset of op kinds and the memref types, and, once locations, names and hoisted
constants are set aside, on the whole text. The deliberate differences, each with its reason:

- ``dimension_semantics`` when the kernel gives none: upstream defaults every axis to
  ``arbitrary``; minipallas infers ``parallel`` axes (``lowering/tpu/semantics.py``);
- ``TRACE_ORDER``: minipallas.numpy traces ``%`` with its two compares in the other order, so
  the texts differ in op order only (the op multisets agree);
- ``WIDENED``: int8 vector arithmetic runs on 32 bits (``lowering/tpu/widen.py``): Mosaic
  refuses upstream's int8 ``arith.addi``; the extra ops are the extensions and truncations.

Suite kernels whose block shapes Mosaic rejects must be rejected by both sides for the same
rule; ``VARIANTS`` re-shapes them to TPU-legal blocks so their bodies are compared too.
"""

import dataclasses

import pytest
from tpu_util import BY_NAME, KERNELS, inputs, lower_case, normal, tpu_shaped, upstream_module

from minipallas.ir.errors import PassError
from minipallas.tools.difftest.mosaic import UpstreamError, compare

TRACE_ORDER = {"int_ops"}
# the extra ops of the int8 kernel: each operand of its compare and its add sign-extended, the
# sum truncated back
WIDENED = {"compare_int8": {"arith.extsi": 4, "arith.trunci": 1}}
# Kernels whose block shapes upstream's TPU lowering rejects, and the rule both sides cite.
REJECTED = {
    "matmul": "divisible by 8 and 128",
    "pick_rows": "divisible by 8 and 128",
    "transpose_blocks": "divisible by 8 and 128",
}
MATMUL_TPU = tpu_shaped(
    BY_NAME["matmul"],
    out_shape=((256, 256), "float32"),
    make_inputs=inputs(normal(256, 512), normal(512, 256)),
    in_specs=[((128, 128), lambda i, j, k: (i, k)), ((128, 128), lambda i, j, k: (k, j))],
    out_specs=((128, 128), lambda i, j, k: (i, j)),
    scratch=(((128, 128), "float32"),),
)
VARIANTS = [
    MATMUL_TPU,
    dataclasses.replace(MATMUL_TPU, name="matmul_inferred", dimension_semantics=None),
    tpu_shaped(
        BY_NAME["transpose_blocks"],
        out_shape=((512, 256), "float32"),
        make_inputs=inputs(normal(256, 512)),
        in_specs=[((128, 256), lambda i, j: (i, j))],
        out_specs=((256, 128), lambda i, j: (j, i)),
    ),
    tpu_shaped(
        BY_NAME["pick_rows"],
        grid=(3, 1, 2),
        in_specs=[((None, 8, 128), lambda b, r, j: (b, r, j))],
        out_specs=((None, 8, 128), lambda b, r, j: (b, r, j)),
    ),
]
CASES = [*KERNELS, *VARIANTS]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_module_matches_upstream(case):
    if case.name in REJECTED:
        rule = REJECTED[case.name]
        with pytest.raises(UpstreamError, match=rule):
            upstream_module(case)
        with pytest.raises(PassError, match=rule):
            lower_case(case)
        return
    ours = lower_case(case)
    assert ours.module.operation.verify()
    diff = compare(ours.module, upstream_module(case))
    assert diff.signature is None
    assert diff.memrefs == {}
    assert diff.ops == WIDENED.get(case.name, {})
    semantics = diff.attributes.pop("dimension_semantics", None)
    assert diff.attributes == {}
    if case.dimension_semantics is not None:
        assert semantics is None  # given semantics are passed through unchanged
    elif semantics is not None:  # inferred: only ever turns upstream's default into parallel
        ours_text, upstream_text = semantics
        assert upstream_text.count("arbitrary") == len(case.grid)
        assert ours_text.count("arbitrary") + ours_text.count("parallel") == len(case.grid)
    assert diff.same_text == (case.name not in TRACE_ORDER and case.name not in WIDENED)


def test_ne_on_floats_is_upstreams_one_which_mosaic_compiles():
    """Mosaic refuses ``une``; its ``one`` is the chip's not-equal (NaN != NaN is True)."""
    case = BY_NAME["padding_visible"]
    ours = lower_case(case).as_text(debug_info=False)
    theirs = str(upstream_module(case))
    assert "arith.cmpf one" in ours and "arith.cmpf une" not in ours
    assert "arith.cmpf one" in theirs


def test_inferred_matmul_semantics_differ_only_where_upstream_defaults():
    (case,) = [c for c in VARIANTS if c.name == "matmul_inferred"]
    diff = compare(lower_case(case).module, upstream_module(case))
    ours, theirs = diff.attributes["dimension_semantics"]
    assert ours.count("parallel") == 2 and ours.endswith("<arbitrary>]")
    assert theirs.count("arbitrary") == 3


def test_every_suite_kernel_is_checked():
    assert {c.name for c in KERNELS} <= {c.name for c in CASES}
    assert set(REJECTED) <= {c.name for c in KERNELS}
    assert len(CASES) >= 15
