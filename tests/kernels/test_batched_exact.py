"""Exact mode's batched float reductions and dots give the loop program's and upstream's bits.

The classes passes/xla_cpu/exactness.py admits, on compiled kernels of
bench/numerics/batched_bits.py (the batched program against the loop program, two seeds) and
against upstream interpret mode; the classes it refuses stay on loops; and a masked
elementwise body batches with no transpose (the batch axes of the broadcast grid index lie where
the block's do).
"""

import re

import numpy as np
import pytest
from filecheck_util import filecheck
from kernel_helpers import assert_same_bits

import minipallas as mp
from bench.numerics import batched_bits
from bench.realistic_kernels import flash_attention, masked_tanh, realistic_cases
from minipallas.kernels.programs.grid import grid_program
from minipallas.kernels.programs.vectorized_grid import (
    vectorized_grid_plan,
    vectorized_grid_program,
)
from minipallas.tools.corpora.suite import Case, inputs, normal, softmax

R, D = batched_bits.reduction, batched_bits.dot
ADMITTED = [
    R("sum", "f32", (8, 1024), (16,), 1),
    R("max", "f32", (8, 1024), (8,), 0, zeros=True),
    R("min", "f32", (128, 128), (2, 2), 1, zeros=True),
    R("sum", "bf16", (8, 1024), (8,), 1),
    R("prod", "f32", (16, 128), (8,), 1),
    R("sum", "f32", (8, 1024), (16,), 1, fused="softmax"),
    R("sum", "f32", (128, 128), (8,), 1, fused="variance"),
    D("x@y", "f32", 32, 32, 128, (2, 2)),
    D("x@y", "bf16", 32, 32, 128, (2, 2)),
    D("q@k.T", "f32", 128, 64, 128, (4, 2), after="exp"),
    D("x@y", "f32", 8, 512, 8, (8, 1)),  # narrow, widened over rows only
    R("sum", "f32", (16, 1024), (256,), 1, fused="norm"),  # its rsqrt in two chunks
    R("sum", "f32", (16, 128), (8,), 1),  # XLA's order written out (spelled_tree)
    R("sum", "f32", (1, 1024), (64,), 1),  # likewise: one window level of 32 windows
]
REFUSED = [
    R("sum", "f32", (16, 96), (8,), 0),  # down 16 rows, under 4096 elements: not written out
    R("sum", "f32", (128, 128), (2, 2), 0),  # down 128 rows: differs on the AMD EPYC
    R("max", "f32", (16, 128), (8,), 1, zeros=True),
    R("sum", "f32", (64, 64), (2, 2), None),
    D("q@k.T", "bf16", 128, 64, 128, (2, 2)),
    D("x.T@y", "f32", 128, 128, 128, (2, 2)),
    D("x@y", "f32", 1, 128, 128, (4, 4)),
    D("x@y", "f32", 8, 512, 8, (1, 8)),  # narrow columns side by side
    D("q@k.T", "f32", 32, 256, 32, (4, 4)),
    R("sum", "f32", (16, 1024), (1024,), 1, fused="norm"),  # its rsqrt in over 4 chunks
]


@pytest.mark.parametrize("probe", ADMITTED, ids=lambda p: p.name)
def test_an_admitted_class_batches_with_the_loop_programs_bits(probe):
    kernel = probe.call().trace(*probe.inputs(0))
    batched = vectorized_grid_program(kernel)
    assert batched is not None and vectorized_grid_plan(kernel) == tuple(range(len(kernel.grid)))
    run, loop = mp.compile(batched), mp.compile(grid_program(kernel))
    for seed in (1, 2):
        args = probe.inputs(seed)
        for got, expected in zip(run(*args), loop(*args), strict=True):
            assert_same_bits(got, expected)


@pytest.mark.parametrize("probe", REFUSED, ids=lambda p: p.name)
def test_a_refused_class_stays_on_loops(probe):
    """Each differs batched (bench/numerics/batched_bits.py), so exact mode runs it per point."""
    kernel = probe.call().trace(*probe.inputs(0))
    assert vectorized_grid_plan(kernel) is None
    assert vectorized_grid_plan(kernel, exact=False) is not None


SOFTMAX = Case(
    "softmax_rows", softmax, ((128, 1024), "float32"), inputs(normal(128, 1024)),
    grid=(16,), in_specs=[((8, 1024), lambda i: (i, 0))], out_specs=((8, 1024), lambda i: (i, 0)),
)  # fmt: skip
FLASH = Case(
    "flash_small", flash_attention, ((512, 64), "float32"),
    inputs(normal(512, 64), normal(512, 64), normal(512, 64)), grid=(4, 4),
    in_specs=[((128, 64), lambda i, j: (i, 0)), ((128, 64), lambda i, j: (j, 0)),
              ((128, 64), lambda i, j: (j, 0))],
    out_specs=((128, 64), lambda i, j: (i, 0)),
    scratch=(((128, 1), "float32"), ((128, 1), "float32"), ((128, 64), "float32")),
)  # fmt: skip


@pytest.mark.parametrize("case", [SOFTMAX, FLASH], ids=lambda c: c.name)
def test_softmax_and_flash_attention_batch_with_upstreams_bits(case):
    kernel = case.minipallas().trace(*case.inputs())
    assert vectorized_grid_plan(kernel) == (0,)
    for seed in (0, 1):
        args = case.inputs(seed)
        assert_same_bits(case.minipallas()(*args), np.asarray(case.upstream()(*args)))


def test_a_masked_elementwise_body_batches_without_a_transpose():
    n = 1024 * 64 - 100
    case = Case(
        "masked", masked_tanh, ((n,), "float32"), inputs(normal(n)), grid=(64,),
        in_specs=[((1024,), lambda i: (i,))], out_specs=((1024,), lambda i: (i,)),
    )  # fmt: skip
    text = case.minipallas().lower(*case.inputs(), target="stablehlo").as_text()
    filecheck(
        text,
        """
        CHECK-LABEL: func.func private @masked_batched
        CHECK-NOT:   stablehlo.transpose
        CHECK:       stablehlo.tanh %{{.*}} : tensor<64x1024xf32>
        CHECK-NOT:   stablehlo.transpose
        CHECK:       stablehlo.select {{.*}} tensor<64x1024xf32>
        CHECK-NOT:   stablehlo.transpose
        CHECK:       return
        """,
    )


def _realistic_entry(name):
    """The realistic kernel ``name`` and the entry computation of XLA's optimized program of
    its default mode (the lines after ``ENTRY``)."""
    (case,) = [c for c in realistic_cases() if c.name == name]
    hlo = case.minipallas().compiled(*case.inputs()).jitted.as_text()
    return case, hlo[hlo.index("\nENTRY") :].splitlines()[1:]


def test_a_layer_norm_past_its_rsqrt_chunks_computes_its_centered_rows_again():
    """Its rsqrt chunks break YNNPACK's graph; the output computes ``x - mean`` again
    (passes/xla_cpu/recompute.py), so XLA writes no 4096x1024 array but the result, and
    the bits are still upstream's."""
    case, entry = _realistic_entry("layer_norm_4096")
    args = case.inputs()
    full = re.compile(r"^\s*(ROOT )?%\S+ = f32\[(256,16,1024|4096,1024)\]\S* (\w[\w-]*)\(")
    made = [m for m in map(full.match, entry) if m and m[3] not in ("parameter", "bitcast")]
    assert [(m[1], m[3]) for m in made] == [("ROOT ", "fusion")], "\n".join(entry)
    assert_same_bits(case.minipallas()(*args), np.asarray(case.upstream()(*args)))


def test_a_matmuls_hoisted_dots_run_in_xlas_own_kernel_with_upstreams_bits():
    """The 256x384x512 matmul's three 128-deep dots, hoisted out of its k loop, are one dot
    with a batch dimension: XLA's own kernel runs it (exactness.own_dot), not YNNPACK."""
    case, lines = _realistic_entry("matmul_small")
    entry = "\n".join(lines)
    assert re.search(r"= f32\[3,256,512\]\S* dot\(", entry) and "__ynn_fusion" not in entry, entry
    for seed in (0, 1):
        args = case.inputs(seed)
        assert_same_bits(case.minipallas()(*args), np.asarray(case.upstream()(*args)))
