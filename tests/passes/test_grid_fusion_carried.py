"""``fuse-grid-steps`` on kernels that hand scratch from step to step (issue 49 item 2).

Flash attention (running max, sum and accumulator) and a kernel of three running moments,
fused four ways: sub-steps unrolled or in a loop (``looped``), their carried scratch through
VMEM or kept in values (``carried``: partial discharge). Each way gives the unfused kernel's
bits and upstream's interpret mode's; the Mosaic modules the tests emit are compiled by
libtpu after each test (``tests/mosaic_compile.py``). The FileCheck test of the fused bodies'
text is ``filecheck/grid_fusion_carried.py``.
"""

import functools
import re

import numpy as np
import pytest

import minipallas as mp
from bench.realistic_kernels import realistic_cases
from minipallas.ir.types import TPU_VMEM
from minipallas.ir.verifier import verify
from minipallas.lowering import TARGETS
from minipallas.passes.kernel.grid_fusion import fuse_grid_steps
from minipallas.passes.kernel.grid_fusion.carried import threaded
from minipallas.tools.corpora.suite import Case, inputs, normal

EAGER = "fuse-grid-steps{min_steps=1,max_unroll=4"
WAYS = {
    # chained scratch through VMEM runs its sub-steps in a loop (the default until values won)
    "loop": f"{EAGER},discharge_carried=false}}",
    "unrolled": f"{EAGER},discharge_carried=false,max_carried=3}}",
    "unrolled_values": f"{EAGER},discharge_carried=true,max_carried=0}}",
    "loop_values": f"{EAGER},discharge_carried=true,substep_loop=true,max_carried=0}}",
}


def moments(ns, x_ref, o_ref, sum_ref, squares_ref, max_ref):
    """Three running moments of each row block over the column steps, combined at the last."""
    k = ns.program_id(1)

    @ns.when(k == 0)
    def _():
        sum_ref[...] = ns.np.zeros(sum_ref.shape, ns.np.float32)
        squares_ref[...] = ns.np.zeros(squares_ref.shape, ns.np.float32)
        max_ref[...] = ns.np.full(max_ref.shape, -np.inf, ns.np.float32)

    x = x_ref[...]
    sum_ref[...] += x
    squares_ref[...] = squares_ref[...] + x * x
    max_ref[...] = ns.np.maximum(max_ref[...], x)

    @ns.when(k == ns.num_programs(1) - 1)
    def _():
        o_ref[...] = squares_ref[...] - sum_ref[...] * max_ref[...]


def _moments(steps: int) -> Case:
    return Case(
        f"moments_{steps}",
        moments,
        ((16, 128), "float32"),
        inputs(normal(16, 128 * steps)),
        grid=(2, steps),
        in_specs=[((8, 128), lambda i, k: (i, k))],
        out_specs=((8, 128), lambda i, k: (i, 0)),
        scratch=(((8, 128), "float32"),) * 3,
    )


(FLASH,) = [c for c in realistic_cases() if c.name == "flash_attention"]
CASES = {"flash_attention": FLASH, "moments": _moments(16), "moments_prime": _moments(7)}
BITS = ["flash_attention", "moments"]


@functools.cache
def _outputs(name: str, way: str) -> bytes:
    case = CASES[name]
    if way == "upstream":
        call = case.upstream()
    else:
        call = case.minipallas(optimize=False, passes=WAYS.get(way, ""))
    return np.asarray(call(*case.inputs())).tobytes()


def _fused(name: str, way: str):
    case = CASES[name]
    kernel = case.minipallas().trace(*case.inputs(), memory_space=TPU_VMEM)
    options = dict(o.split("=") for o in WAYS[way][len("fuse-grid-steps{") : -1].split(","))
    flags = {k: v == "true" if v in ("true", "false") else int(v) for k, v in options.items()}
    return kernel, fuse_grid_steps(kernel, **flags)


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("name", BITS)
def test_each_way_keeps_the_unfused_kernels_and_upstreams_bits(name, way):
    kernel, fused = _fused(name, way)
    assert np.prod(fused.grid) < np.prod(kernel.grid), "not fused: the bit test would be vacuous"
    assert (" for " in str(fused.body)) == way.startswith("loop")
    assert _outputs(name, way) == _outputs(name, "plain")
    assert _outputs(name, way) == _outputs(name, "upstream")


@pytest.mark.parametrize("way", WAYS)
def test_the_fused_body_verifies_and_the_input_is_left_alone(way):
    case = CASES["flash_attention"]
    kernel = case.minipallas().trace(*case.inputs(), memory_space=TPU_VMEM)
    before = str(kernel)
    _, fused = _fused("flash_attention", way)
    verify(fused.body)
    for callee in fused.body.callees():
        verify(callee)
    assert str(kernel) == before


@pytest.mark.parametrize("way", ["loop", "unrolled_values", "loop_values"])
def test_libtpu_compiles_the_fused_flash_attention(way):
    """The module is compiled by libtpu after the test; a loop is an ``scf.for``."""
    module = str(
        FLASH.minipallas(optimize=False, passes=WAYS[way]).lower(*FLASH.inputs(), target="tpu")
    )
    assert ("scf.for" in module) == way.startswith("loop")


def test_a_factor_that_does_not_divide_threads_the_values_through_the_skip():
    """7 column steps in windows of 4: the sub-steps past the end are skipped by a ``cond``
    that hands the threaded values on unchanged (a loop needs a divisor: unrolled)."""
    _, fused = _fused("moments_prime", "unrolled_values")
    assert fused.grid[1] < 7 and 7 % (-(-7 // fused.grid[1])) != 0
    body = str(fused.body)
    assert "= cond " in body and " for " not in body
    _, looped = _fused("moments_prime", "loop")
    assert " for " not in str(looped.body)  # not loopable: the column steps left as written
    assert looped.grid[1] == 7


def test_only_buffers_within_carried_bytes_and_statically_accessed_are_threaded():
    kernel = FLASH.minipallas().trace(*FLASH.inputs(), memory_space=TPU_VMEM)
    scratch = [False] * 4
    # in VMEM tiles each of the 128x1 max and sum and the 128x64 accumulator takes 64 KiB
    assert threaded(kernel, 128 * 128 * 4) == (*scratch, True, True, True)
    assert threaded(kernel, 128 * 128 * 4 - 1) == (False,) * 7
    assert threaded(kernel, 0) == (False,) * 7


def asks_inside(ns, x_ref, o_ref, sum_ref, squares_ref, max_ref):
    """Moments whose last step reads its grid position inside the ``pl.when``."""
    moments(ns, x_ref, o_ref, sum_ref, squares_ref, max_ref)

    @ns.when(ns.program_id(1) == ns.num_programs(1) - 1)
    def _():
        o_ref[...] += ns.program_id(1).astype(ns.np.float32)


def test_a_body_asking_its_step_inside_a_region_is_left_unless_unrolled():
    case = Case(**{**_moments(16).__dict__, "name": "asks_inside", "kernel": asks_inside})
    kernel = case.minipallas().trace(*case.inputs(), memory_space=TPU_VMEM)
    notes: list[str] = []
    assert fuse_grid_steps(kernel, min_steps=1, discharge_carried=False, notes=notes).grid[1] == 16
    assert any("cannot be a loop" in n for n in notes), notes
    unrolled = case.minipallas(optimize=False, passes=WAYS["unrolled_values"])
    plain = case.minipallas(optimize=False)
    assert (
        np.asarray(unrolled(*case.inputs())).tobytes()
        == np.asarray(plain(*case.inputs())).tobytes()
    )


def test_substep_loop_runs_any_loopable_kernel_with_its_bits():
    """``substep_loop=true`` asks for the loop where unrolling is the default: the blocked
    matmul, one accumulator."""
    (case,) = [c for c in realistic_cases() if c.name == "matmul_small"]
    passes = "fuse-grid-steps{min_steps=1,wide_block=1,substep_loop=true}"
    kernel = case.minipallas().trace(*case.inputs(), memory_space=TPU_VMEM)
    fused = fuse_grid_steps(kernel, min_steps=1, wide_block=1, substep_loop=True)
    assert " for " in str(fused.body) and fused.grid != kernel.grid
    looped = case.minipallas(optimize=False, passes=passes)(*case.inputs())
    plain = case.minipallas(optimize=False)(*case.inputs())
    assert np.asarray(looped).tobytes() == np.asarray(plain).tobytes()


def test_explain_says_why_the_sub_steps_run_in_a_loop():
    kernel = FLASH.minipallas().trace(*FLASH.inputs(), memory_space=TPU_VMEM)
    notes: list[str] = []
    fuse_grid_steps(kernel, discharge_carried=False, notes=notes)
    loops = [n for n in notes if re.match(r"axis 1: its \d+ sub-steps in a loop: scratch", n)]
    assert loops, notes


@pytest.mark.parametrize("way", WAYS)
def test_each_way_keeps_flash_attentions_parallel_query_axis(way):
    """Sub-step 0 stays out of the loop, so the inference still sees the ``kv == 0`` reset
    (a loop of every sub-step made the query axis ``arbitrary``)."""
    from minipallas.lowering.tpu.semantics import dimension_semantics

    kernel, fused = _fused("flash_attention", way)
    assert dimension_semantics(kernel).values == ("parallel", "arbitrary")
    assert dimension_semantics(fused).values[0] == "parallel"


REDUCE = next(c for c in realistic_cases() if c.name == "reduce_1d")


def test_an_output_that_stays_put_is_threaded_and_read_after_sub_step_0():
    """The sum of 2^20 floats adds each step's sum into its one output block. Fused, sub-step 0
    runs as written (its ``pl.when`` zeroes the block in memory), then the block is read once,
    carried through the other sub-steps in values and written once: on a v5e 0.122 ms for 2^24
    floats, where storing and loading it every sub-step took 2.26 (fusion_cost_v5e.txt)."""
    kernel = REDUCE.minipallas().trace(*REDUCE.inputs(), memory_space=TPU_VMEM)
    notes: list[str] = []
    fused = fuse_grid_steps(kernel, max_unroll=4, notes=notes)
    assert "axis 0: in values across the sub-steps: output 0" in notes  # --explain's line
    ops = [op.name for op in fused.body.body.ops]
    assert ops.count("call") == 4 and ops.count("get") == 1 and ops.count("swap") == 1
    assert ops.index("call") < ops.index("get") < ops.index("swap")
    assert str(fused.body).count("-> (f32[1])") == 3  # sub-steps 1-3 discharged of it
    kept = fuse_grid_steps(kernel, max_unroll=4, thread_outputs=False)
    assert [op.name for op in kept.body.body.ops].count("get") == 0
    args = REDUCE.inputs()
    want = np.asarray(REDUCE.minipallas(optimize=False)(*args)).tobytes()
    for passes in ("fuse-grid-steps{max_unroll=4}", "fuse-grid-steps{thread_outputs=false}"):
        got = REDUCE.minipallas(optimize=False, passes=passes)(*args)
        assert np.asarray(got).tobytes() == want
    # the TPU's check that no output is read before it is written sees the write first
    module = str(REDUCE.minipallas().lower(*args, target="tpu"))
    assert "iteration_bounds = array<i64: 5>" in module


def _accumulating(x_ref, o_ref, acc_ref):
    @mp.when(mp.program_id(0) == 0)
    def _():
        acc_ref[...] = mp.numpy.zeros(acc_ref.shape, acc_ref.dtype)

    acc_ref[...] = acc_ref[...] + x_ref[...]
    o_ref[...] = acc_ref[...]


def _accumulating_kernel(dtype: str, steps: int):
    spec = mp.BlockSpec((2048,), lambda i: (i,))
    call = mp.pallas_call(
        _accumulating,
        mp.ArrayType((2048 * steps,), dtype),
        grid=(steps,),
        in_specs=[spec],
        out_specs=spec,
        scratch_shapes=[mp.tpu.VMEM((2048,), dtype)],
    )
    return call.trace(mp.ArrayType((2048 * steps,), dtype), memory_space=TPU_VMEM)


@pytest.mark.parametrize("dtype", ["bfloat16", "int8", "float32"])
def test_a_packed_1d_buffer_past_the_axis_end_stays_in_vmem(dtype):
    """3 steps 2 a step: the cond skipping the sub-step past the end would yield the carried
    value, and Mosaic refuses a packed 1-D one ("Invalid input layout", fuzz-tpu --aot seed
    4912): a bf16 or int8 accumulator stays in VMEM there, an f32 one in values; 4 steps 2 a
    step need no cond, and keep every one in values. libtpu compiles each after the test."""
    value = f"-> ({mp.ArrayType((2048,), dtype)})"  # a sub-step returning the carried value
    guarded = fuse_grid_steps(_accumulating_kernel(dtype, 3), min_steps=1, max_unroll=2)
    assert guarded.grid == (2,)
    assert (value in str(guarded)) == (dtype == "float32")
    whole = fuse_grid_steps(_accumulating_kernel(dtype, 4), min_steps=1, max_unroll=2)
    assert whole.grid == (2,) and value in str(whole)
    for kernel in (guarded, whole):
        verify(kernel.body)
        TARGETS["tpu"].lower(kernel, optimize=False)
