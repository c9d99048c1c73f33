"""Scratch promotion: register-sized, statically accessed run_scoped scratch becomes SSA vector
values by partial discharge; the op-count difference is reported."""

# ruff: noqa: E501  (FileCheck patterns quote whole MLIR lines)

import numpy as np
import pytest
from filecheck_util import filecheck
from tpu_util import BY_NAME, KERNELS, kernel, lower_case, spec

import minipallas as mp
import minipallas.numpy as jnp
from minipallas.ir.errors import PassError
from minipallas.ir.parser import parse_module
from minipallas.ir.printer import print_function
from minipallas.ir.types import TPU_VMEM
from minipallas.lowering.tpu import count_ops, emit_mosaic, lower_to_mosaic
from minipallas.passes.pipeline import run
from minipallas.passes.promote_scratch import REGISTER_BUDGET, promoted_count
from minipallas.tpu import VMEM


def test_staged_scratch_is_promoted_and_the_op_count_reported():
    case = BY_NAME["staged_run_scoped"]
    plain = lower_case(case)
    promoted = lower_case(case, promote_scratch=True)
    report = promoted.info["promotion"]
    assert report.promoted == 1
    assert report.ops_without == count_ops(plain.module)
    assert report.ops_with == count_ops(promoted.module) < report.ops_without
    assert str(report) == (
        f"promoted 1 scratch buffer(s) to registers: {report.ops_without} -> "
        f"{report.ops_with} ops ({report.difference:+d})"
    )
    text = promoted.as_text(debug_info=False)
    assert "memref.alloca" not in text and "tpu.region" not in text
    filecheck(
        text,
        """
        CHECK: %[[T:.*]] = arith.mulf
        CHECK: %[[LOW:.*]] = vector.extract_strided_slice %[[T]] {offsets = [8, 0], sizes = [8, 128], strides = [1, 1]}
        CHECK: %[[D:.*]] = arith.subf %[[LOW]]
        CHECK: %[[HIGH:.*]] = vector.extract_strided_slice %[[T]] {offsets = [8, 0], sizes = [8, 128], strides = [1, 1]}
        CHECK: tpu.concatenate %[[D]], %[[HIGH]] in 0
        """,
    )


def run_scoped_kernel(scratch_shape, index):
    def body(x_ref, o_ref):
        def scoped(t_ref):
            t_ref[...] = jnp.zeros(scratch_shape, jnp.float32)
            t_ref[index(), :] = x_ref[0, :]
            o_ref[...] = jnp.broadcast_to(t_ref[0:1, 0:128], (8, 128))

        mp.run_scoped(scoped, VMEM(scratch_shape, jnp.float32))

    s = spec((8, 128), "float32")
    return kernel(body, (2,), [s], [s])


def test_dynamically_indexed_or_oversized_scratch_stays_in_memory():
    def static():
        return 1

    def dynamic():
        return mp.program_id(0)

    cases = [((8, 128), dynamic), ((512, 128), static)]
    assert 512 * 128 * 4 > REGISTER_BUDGET
    for shape, index in cases:
        k = run_scoped_kernel(shape, index)
        assert promoted_count(k.body) == 0
        lowered = lower_to_mosaic(k, promote_scratch=True)
        assert lowered.info["promotion"].promoted == 0
        assert "memref.alloca" in str(lowered)
    k = run_scoped_kernel((8, 128), static)
    assert promoted_count(k.body) == 1


@pytest.mark.parametrize("case", KERNELS, ids=lambda c: c.name)
def test_promotion_never_grows_a_suite_kernel(case):
    try:
        lowered = lower_case(case, promote_scratch=True)
    except PassError as e:  # block shapes Mosaic rejects (test_tpu_vs_upstream checks why)
        assert "divisible by 8 and 128" in str(e)
        return
    assert lowered.module.operation.verify()
    report = lowered.info["promotion"]
    assert report.ops_with <= report.ops_without
    assert (report.promoted > 0) == (report.ops_with < report.ops_without)


def promotable_kernels():
    """The suite's scoped scratch, and a register-sized one read at a static row."""
    case = BY_NAME["staged_run_scoped"]
    traced = case.minipallas().trace(*case.inputs(), memory_space=TPU_VMEM)
    return [traced, run_scoped_kernel((8, 128), lambda: 1)]


@pytest.mark.parametrize("k", promotable_kernels(), ids=["staged_run_scoped", "static_row"])
def test_promote_scratch_rerun_from_the_printed_body_gives_the_emitted_kernel(k):
    """``promote_scratch=True`` runs the registered pass as the pipeline's last: run from the
    text of the stage before it (parsed, verified), it gives the same body, the same module
    (compiled ahead of time by tests/mosaic_compile.py) and the same values as the body."""
    stages = []
    lowered = lower_to_mosaic(
        k, promote_scratch=True, after_each=lambda n, f: stages.append((n, f))
    )
    assert [n for n, _ in stages] == ["collectives", "fuse-grid-steps", "promote-scratch"]
    checked = run(parse_module(print_function(k.body)).entry, "collectives{context=mosaic}")
    promoted = run(parse_module(print_function(checked)).entry, "promote-scratch", verify=True)
    assert print_function(promoted) == print_function(stages[-1][1])
    assert all(op.name != "run_scoped" for op in promoted.walk())
    again = emit_mosaic(k, promoted, promote_scratch=True)
    assert again.as_text(debug_info=False) == lowered.as_text(debug_info=False)
    assert again.info["promotion"] == lowered.info["promotion"]
    rng = np.random.default_rng(0)
    for point in range(k.grid[0]):
        blocks = [rng.standard_normal(p.type.shape).astype(np.float32) for p in k.body.params]
        before, after = [b.copy() for b in blocks], [b.copy() for b in blocks]
        mp.interpret(k.body, *before, program_ids=(point,), grid=k.grid)
        mp.interpret(promoted, *after, program_ids=(point,), grid=k.grid)
        for got, want in zip(after, before, strict=True):
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
