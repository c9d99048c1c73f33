"""dimension_semantics inferred from index maps (output revisits) and from effects plus
discharge (scratch that carries state), with one reason per axis kept in the module."""

# ruff: noqa: E501  (FileCheck patterns quote whole MLIR lines)

import dataclasses

import numpy as np
import pytest
from filecheck_util import filecheck
from test_tpu_kernel import matmul_kernel
from tpu_util import kernel, spec

import minipallas as mp
import minipallas.numpy as jnp
from minipallas.ir.effects import Read, Write
from minipallas.ir.errors import PassError
from minipallas.lowering.tpu import lower_to_mosaic
from minipallas.lowering.tpu.semantics import dimension_semantics, evaluate
from minipallas.tpu import VMEM

F32 = "float32"


def elementwise(out_map, grid=(4, 2), out_shape=(32, 256)):
    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1.0

    x = spec((32, 256), F32, (8, 128), lambda i, j: (i, j))
    o = spec(out_shape, F32, (8, 128), out_map)
    return kernel(body, grid, [x], [o])


def values(k):
    return dimension_semantics(k).values


def test_each_output_block_written_once_is_parallel():
    assert values(elementwise(lambda i, j: (i, j))) == ("parallel", "parallel")


@pytest.mark.parametrize(
    "out_map, out_shape, expected",
    [
        (lambda i, j: (i, 0), (32, 128), ("parallel", "arbitrary")),  # revisited across j
        (lambda i, j: (0, j), (8, 256), ("arbitrary", "parallel")),  # revisited across i
        (lambda i, j: (i // 2, j), (16, 256), ("arbitrary", "parallel")),  # i=0,1 share a block
        (lambda i, j: ((i + j) % 4, 0), (32, 128), ("arbitrary", "arbitrary")),
        (lambda i, j: (3 - i, 1 - j), (32, 256), ("parallel", "parallel")),  # a permutation
    ],
    ids=["row", "column", "halved", "diagonal", "reversed"],
)
def test_revisited_output_blocks(out_map, out_shape, expected):
    assert values(elementwise(out_map, out_shape=out_shape)) == expected


def test_axes_of_size_one_are_parallel():
    sem = dimension_semantics(elementwise(lambda i, j: (0, 0), grid=(1, 1), out_shape=(8, 128)))
    assert sem.values == ("parallel", "parallel")
    assert sem.reasons[0] == "axis 0 parallel: it has size 1"


def test_matmul_accumulator_reset_at_k_zero_keeps_i_and_j_parallel():
    sem = dimension_semantics(matmul_kernel())
    assert sem.values == ("parallel", "parallel", "arbitrary")
    assert sem.inferred
    assert sem.reasons[2] == (
        "axis 2 arbitrary: output 0's block is revisited across it; scratch 0 carries state "
        "across it (read from the step before unless program_id(2) == 0)"
    )


def scratch_kernel(step):
    """Output block i written once per i; a persistent scratch used by ``step``."""

    def body(x_ref, o_ref, s_ref):
        step(x_ref, o_ref, s_ref)

    x = spec((32, 128), F32, (8, 128), lambda i: (i, 0))
    return kernel(body, (4,), [x], [x], [VMEM((8, 128), jnp.float32)])


def test_scratch_that_carries_a_running_sum_serializes_the_grid():
    def step(x_ref, o_ref, s_ref):
        s_ref[...] += x_ref[...]
        o_ref[...] = s_ref[...]

    sem = dimension_semantics(scratch_kernel(step))
    assert sem.values == ("arbitrary",)
    assert sem.reasons == ("axis 0 arbitrary: scratch 0 carries state across it (read from the "
                           "step before)",)  # fmt: skip


def test_scratch_written_before_read_is_only_a_temporary():
    def step(x_ref, o_ref, s_ref):
        s_ref[...] = x_ref[...] * 2.0
        o_ref[...] = s_ref[...] + 1.0

    assert values(scratch_kernel(step)) == ("parallel",)


def test_scratch_whose_old_contents_a_swap_returns_carries_state():
    # swap is a write effect only (as upstream's), but its result is the step before's value
    body = mp.parse(
        """
        func @body(%x: Ref{f32[8,128], tpu.vmem}, %o: Ref{f32[8,128], tpu.vmem},
                   %s: Ref{f32[8,128], tpu.vmem}) -> () {
          %v = get %x[:, :] : f32[8,128]
          %old = swap %s[:, :], %v : f32[8,128]
          %unused = swap %o[:, :], %old : f32[8,128]
          return
        }
        """
    )
    k = dataclasses.replace(scratch_kernel(lambda x_ref, o_ref, s_ref: None), body=body)
    assert mp.effects(body) == {Read(0), Write(1), Write(2)}
    sem = dimension_semantics(k)
    assert sem.values == ("arbitrary",)
    assert sem.reasons == ("axis 0 arbitrary: scratch 0 carries state across it (read from the "
                           "step before)",)  # fmt: skip


def test_scratch_reset_with_a_select_on_program_id():
    def step(x_ref, o_ref, s_ref):
        fresh = mp.program_id(0) == 0
        s_ref[...] = jnp.where(fresh, 0.0, s_ref[...]) + x_ref[...]
        o_ref[...] = s_ref[...]

    def body(x_ref, o_ref, s_ref):
        step(x_ref, o_ref, s_ref)

    x = spec((16, 128), F32, (8, 128), lambda i, j: (i, 0))
    o = spec((32, 128), F32, (8, 128), lambda i, j: (i * 2 + j, 0))
    k = kernel(body, (2, 2), [x], [o], [VMEM((8, 128), jnp.float32)])
    # reset whenever program_id(0) == 0 only: the state still flows along axis 1 and crosses
    # from one i to the next at j == 0, so both axes carry it
    assert values(k) == ("arbitrary", "arbitrary")

    def body_inner(x_ref, o_ref, s_ref):
        fresh = mp.program_id(1) == 0
        s_ref[...] = jnp.where(fresh, 0.0, s_ref[...]) + x_ref[...]
        o_ref[...] = s_ref[...]

    k = kernel(body_inner, (2, 2), [x], [o], [VMEM((8, 128), jnp.float32)])
    assert values(k) == ("parallel", "arbitrary")


def test_given_semantics_are_kept_and_checked():
    sem = dimension_semantics(matmul_kernel(("arbitrary", "parallel", "arbitrary")))
    assert sem.values == ("arbitrary", "parallel", "arbitrary") and not sem.inferred
    with pytest.raises(PassError, match="one of"):
        dimension_semantics(matmul_kernel(("parallel", "sideways", "arbitrary")))


def test_reasons_are_recorded_in_the_module():
    filecheck(
        str(lower_to_mosaic(matmul_kernel())),
        """
        CHECK: minipallas.dimension_semantics_reasons = ["axis 0 parallel: no output block or scratch state is shared across it", "axis 1 parallel: {{.*}}", "axis 2 arbitrary: output 0's block is revisited across it; scratch 0 carries state across it (read from the step before unless program_id(2) == 0)"]
        """,
    )


def test_evaluate_index_maps_on_every_grid_point():
    fn = mp.trace(
        lambda i, j: ((i * 3 - j) // 2, jnp.where(i > j, i % 2, -j)),
        mp.ArrayType((), "int32"),
        mp.ArrayType((), "int32"),
    )
    points = np.indices((5, 4)).reshape(2, -1)
    i, j = points
    expected = np.stack([(i * 3 - j) // 2, np.where(i > j, i % 2, -j)], axis=1)
    np.testing.assert_array_equal(evaluate(fn, points), expected)
