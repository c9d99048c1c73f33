"""Every kernel of the suite, run by minipallas on the CPU, gives upstream Pallas's
``pallas_call(..., interpret=True)`` results bit for bit on the same inputs."""

import numpy as np
import pytest
from kernel_helpers import as_tuple, assert_same_bits

import minipallas as mp
from minipallas.tools.corpora.suite import BY_NAME, KERNELS


@pytest.mark.parametrize("case", KERNELS, ids=lambda c: c.name)
def test_matches_upstream_interpret_mode_bit_for_bit(case):
    args = case.inputs()
    got = as_tuple(case.minipallas()(*args))
    expected = as_tuple(case.upstream()(*args))
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert isinstance(g, np.ndarray)
        assert_same_bits(g, np.asarray(e))


def test_the_suite_covers_what_the_issue_asks_for():
    assert len(KERNELS) >= 15
    kernels = {case.name: case.minipallas().trace(*case.inputs()) for case in KERNELS}
    ranks = {len(k.grid) for k in kernels.values()}
    assert {0, 1, 2, 3} <= ranks
    assert any(k.scratch_types for k in kernels.values())
    assert any(op.name == "run_scoped" for k in kernels.values() for op in k.body.walk())
    assert any(s.array.dtype == "bfloat16" for k in kernels.values() for s in k.in_specs)
    assert any(any(s.squeezed) for k in kernels.values() for s in k.in_specs)
    partial = [
        name
        for name, k in kernels.items()
        for s in (*k.in_specs, *k.out_specs)
        if any(b is not None and n % b for n, b in zip(s.array.shape, s.block_shape, strict=True))
    ]
    assert partial


@pytest.mark.parametrize(
    "name", ["add_partial_blocks", "input_written", "clamped_block_index", "int_ops", "grid_ids"]
)
def test_the_reference_interpreter_agrees_with_xla_on_the_grid_program(name):
    """The CPU program means the same under the reference interpreter (exact ops only)."""
    case = BY_NAME[name]
    args = case.inputs()
    call = case.minipallas()
    for g, e in zip(as_tuple(call(*args)), mp.interpret(call.program(*args), *args), strict=True):
        assert_same_bits(g, e)
