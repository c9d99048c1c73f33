"""The kernel checks (``minipallas.tools.difftest.checks``): one small TPU kernel per bug class,
each found with its kind, buffer and grid point, and correct kernels of the same shapes with none.

The realistic set, with what a v5e does with each, is ``bug_corpus`` (``test_bug_corpus``).
"""

from __future__ import annotations

import dataclasses
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from minipallas.interop.importer.rules.kernel_call import kernel_from_jaxpr
from minipallas.lowering.runtime.libtpu import libtpu_available
from minipallas.lowering.tpu.aot import MosaicCompileError
from minipallas.tools.difftest import Case, run
from minipallas.tools.difftest.checks import kernel_bugs
from minipallas.tools.difftest.checks.program import program_bugs
from minipallas.tpu import VMEM

F32 = jnp.float32
RNG = np.random.default_rng(0)
A = RNG.standard_normal((256, 256)).astype(np.float32)
TALL = RNG.standard_normal((200, 128)).astype(np.float32)
ROWS = pl.BlockSpec((128, 128), lambda i: (i, 0))
HBM = pl.BlockSpec(memory_space=pl.ANY)


def bugs(fn, *args):
    kernel = kernel_from_jaxpr(jax.make_jaxpr(fn)(*args), memory_space=VMEM)
    return kernel_bugs(kernel, args)


def call(body, out, *, grid=(1,), ins=(), outs=None, scratch=(), sem=None, **kw):
    params = pltpu.CompilerParams(dimension_semantics=sem) if sem else None
    return pl.pallas_call(
        body,
        out_shape=jax.ShapeDtypeStruct(out, F32),
        grid=grid,
        in_specs=list(ins),
        out_specs=outs if outs is not None else pl.BlockSpec(out, lambda *_: (0,) * len(out)),
        scratch_shapes=list(scratch),
        compiler_params=params,
        interpret=True,  # the CPU ways; the checks and the TPU ways lower it for the chip
        **kw,
    )


def copy(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


def matmul(init=True, sem=("parallel", "parallel", "arbitrary")):
    def body(x_ref, y_ref, o_ref, acc):
        if init:

            @pl.when(pl.program_id(2) == 0)
            def _():
                acc[...] = jnp.zeros_like(acc)

        acc[...] += jnp.dot(x_ref[...], y_ref[...], precision="highest")

        @pl.when(pl.program_id(2) == 1)
        def _():
            o_ref[...] = acc[...]

    tile = (128, 128)
    return call(
        body,
        (256, 256),
        grid=(2, 2, 2),
        ins=[
            pl.BlockSpec(tile, lambda i, j, k: (i, k)),
            pl.BlockSpec(tile, lambda i, j, k: (k, j)),
        ],
        outs=pl.BlockSpec(tile, lambda i, j, k: (i, j)),
        scratch=[pltpu.VMEM(tile, F32)],
        sem=sem,
    )


def into_output(x_ref, o_ref):  # accumulates over k into o_ref, never initialized
    o_ref[...] += x_ref[...]


def column_sum(x_ref, o_ref):  # the last block's padding enters the sum
    o_ref[...] = jnp.sum(x_ref[...], axis=0, keepdims=True)


def masked_column_sum(x_ref, o_ref):
    rows = jax.lax.broadcasted_iota(jnp.int32, (128, 128), 0) + pl.program_id(0) * 128
    o_ref[...] = jnp.sum(jnp.where(rows < 200, x_ref[...], 0.0), axis=0, keepdims=True)


def dma(order):
    """An async copy of the whole input, used in ``order``."""

    def body(x_hbm, o_ref, buf, sem):
        c = pltpu.make_async_copy(x_hbm, buf, sem)
        for step in order:
            if step == "start":
                c.start()
            elif step == "wait":
                c.wait()
            elif step == "second":
                pltpu.make_async_copy(x_hbm, buf, sem).start()
            else:
                o_ref[...] = buf[...] * 2

    scratch = [pltpu.VMEM((128, 128), F32), pltpu.SemaphoreType.DMA(())]
    return call(body, (128, 128), ins=[HBM], scratch=scratch)


def flat_offset(x_hbm, o_ref, buf):  # row * 2**27 * 16 wraps int32
    row = pl.program_id(0) * (2**27) * 16
    start = jax.lax.rem(row, 128)
    pltpu.sync_copy(x_hbm.at[pl.ds(start, 8)], buf)
    o_ref[...] = buf[...]


def ds_past(x_ref, o_ref):
    o_ref[...] = x_ref[pl.ds(pl.program_id(0) + 160, 128), :]


def loop_past(x_ref, o_ref):
    def step(i, acc):
        return acc + x_ref[pl.ds(i * 8, 8), :]

    o_ref[...] = jax.lax.fori_loop(0, 17, step, jnp.zeros((8, 128), F32))


def carry(x_ref, o_ref, total):  # scratch carried from point to point along axis 0
    @pl.when(pl.program_id(0) == 0)
    def _():
        total[...] = jnp.zeros_like(total)

    total[...] += x_ref[...]
    o_ref[...] = total[...]


def gather(idx_ref, x_ref, o_ref):
    o_ref[...] = x_ref[...]


def prefetch_call(table):
    spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1,
        grid=(2,),
        in_specs=[pl.BlockSpec((8, 128), lambda i, t: (t[i], 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i, t: (i, 0)),
    )
    fn = pl.pallas_call(gather, out_shape=jax.ShapeDtypeStruct((16, 128), F32), grid_spec=spec)
    return fn, (np.asarray(table, np.int32), A[:32, :128].copy())


BUGGY = {
    "k grid one too long": (
        call(
            copy,
            (256, 128),
            grid=(3,),
            ins=[ROWS],
            outs=pl.BlockSpec((128, 128), lambda i: (i % 2, 0)),
        ),
        (A[:, :128].copy(),),
        ("out-of-bounds", "input 0", (2,)),
    ),
    "negative block index": (
        call(
            copy,
            (256, 128),
            grid=(2,),
            ins=[pl.BlockSpec((128, 128), lambda i: (i - 1, 0))],
            outs=ROWS,
        ),
        (A[:, :128].copy(),),
        ("out-of-bounds", "input 0", (0,)),
    ),
    "a prefetched table entry past the end": (
        *prefetch_call([1, 4]),
        ("out-of-bounds", "input 0", (1,)),
    ),
    "pl.ds past the ref": (
        call(ds_past, (128, 128), ins=[pl.BlockSpec((256, 128), lambda i: (0, 0))]),
        (A[:, :128].copy(),),
        ("out-of-bounds", "input 0", (0,)),
    ),
    "fori_loop past the ref": (
        call(loop_past, (8, 128), ins=[pl.BlockSpec((128, 128), lambda i: (0, 0))]),
        (A[:128, :128].copy(),),
        ("out-of-bounds", "input 0", (0,)),
    ),
    "missing pl.when init": (
        matmul(init=False),
        (A, A),
        ("undefined-read", "scratch 0", (0, 0, 0)),
    ),
    "accumulating into o_ref": (
        call(
            into_output,
            (128, 128),
            grid=(2,),
            ins=[ROWS],
            outs=pl.BlockSpec((128, 128), lambda k: (0, 0)),
        ),
        (A[:, :128].copy(),),
        ("undefined-read", "output 0", (0,)),
    ),
    "half of the output unwritten": (
        call(copy, (256, 128), grid=(1,), ins=[ROWS], outs=ROWS),
        (A[:, :128].copy(),),
        ("unwritten-output", "output 0", None),
    ),
    "padding in a sum": (
        call(
            column_sum,
            (2, 128),
            grid=(2,),
            ins=[ROWS],
            outs=pl.BlockSpec((1, 128), lambda i: (i, 0)),
        ),
        (TALL,),
        ("undefined-read", "padding of input 0", (1,)),
    ),
    "a copy read before its wait": (
        dma(["start", "use", "wait"]),
        (A[:128, :128].copy(),),
        ("dma", "scratch 0", (0,)),
    ),
    "a copy never waited for": (dma(["start"]), (A[:128, :128].copy(),), ("dma", "", None)),
    "two copies, one wait": (
        dma(["start", "second", "wait", "use"]),
        (A[:128, :128].copy(),),
        ("dma", "scratch 0", (0,)),
    ),
    "a semaphore waited twice": (
        dma(["start", "wait", "wait", "use"]),
        (A[:128, :128].copy(),),
        ("semaphore", "scratch 1", (0,)),
    ),
    "int32 wrap in an offset": (
        call(
            flat_offset,
            (8, 128),
            grid=(2,),
            ins=[HBM],
            outs=pl.BlockSpec((8, 128), lambda i: (0, 0)),
            scratch=[pltpu.VMEM((8, 128), F32)],
        ),
        (A[:128, :128].copy(),),
        ("overflow", "", (1,)),
    ),
    "parallel points write one block": (
        call(copy, (128, 128), grid=(2,), ins=[ROWS], sem=("parallel",)),
        (A[:, :128].copy(),),
        ("race", "output 0", (1,)),
    ),
    "scratch carried along a parallel axis": (
        call(
            carry,
            (256, 128),
            grid=(2,),
            ins=[ROWS],
            outs=ROWS,
            scratch=[pltpu.VMEM((128, 128), F32)],
            sem=("parallel",),
        ),
        (A[:, :128].copy(),),
        ("race", "scratch 0", (1,)),
    ),
}

CORRECT = {
    "matmul with pl.when init": (matmul(), (A, A)),
    "partial-block elementwise": (
        call(copy, (200, 128), grid=(2,), ins=[ROWS], outs=ROWS),
        (TALL,),
    ),
    "masked partial-block sum": (
        call(
            masked_column_sum,
            (2, 128),
            grid=(2,),
            ins=[ROWS],
            outs=pl.BlockSpec((1, 128), lambda i: (i, 0)),
        ),
        (TALL,),
    ),
    "a copy waited, then read": (dma(["start", "wait", "use"]), (A[:128, :128].copy(),)),
    "scratch carried along an arbitrary axis": (
        call(
            carry,
            (256, 128),
            grid=(2,),
            ins=[ROWS],
            outs=ROWS,
            scratch=[pltpu.VMEM((128, 128), F32)],
            sem=("arbitrary",),
        ),
        (A[:, :128].copy(),),
    ),
    "a prefetched gather in range": prefetch_call([1, 3]),
}


@pytest.mark.parametrize("name", BUGGY)
def test_each_bug_class_is_found_with_its_buffer_and_grid_point(name):
    fn, args, (kind, buffer, point) = BUGGY[name]
    found = bugs(fn, *args)
    assert found, f"{name}: no bug found"
    bug = found[-1]
    assert (bug.kind, bug.buffer, bug.point) == (kind, buffer, point), str(bug)
    assert bug.fix
    assert bug.latent == (kind == "race")


@pytest.mark.parametrize("name", CORRECT)
def test_a_correct_kernel_has_no_bug(name):
    fn, args = CORRECT[name]
    assert bugs(fn, *args) == []


def test_a_bug_names_the_users_line():
    (bug,) = bugs(matmul(init=False), A, A)
    assert bug.where.startswith(__file__) and bug.where.split(":")[-1].isdigit()


def test_the_difftest_reports_the_kernel_not_minipallas():
    """The CPU ways agree (interpret mode fills the scratch with NaN, both sides alike); the
    finding is the kernel's bug."""
    fn, args, _ = BUGGY["missing pl.when init"]
    report = run(Case("missing init", fn, args, expect="undefined-read"))
    assert report.finding.kind == "kernel-bug" and report.finding.name == "undefined-read"
    assert report.expected and "scratch 0" in report.text()


def copy_through(x_ref, o_ref, big):
    big[:128, :128] = x_ref[...]
    o_ref[...] = big[:128, :128]


NEEDS_LIBTPU = pytest.mark.skipif(
    not libtpu_available() and not os.environ.get("CI"),
    reason="libtpu is not installed (make test installs it)",
)


@NEEDS_LIBTPU
def test_without_a_chip_a_block_the_tpu_cannot_tile_is_the_kernels_bug():
    block = pl.BlockSpec((48, 64), lambda i, j: (i, j))  # 64 lanes: not 128, not the array's
    fn = call(copy, (96, 128), grid=(2, 2), ins=[block], outs=block)
    report = run(Case("untileable block", fn, (A[:96, :128].copy(),)), device="tpu")
    assert report.finding.name == "compile", report.text()
    assert "refuses upstream's own lowering" in str(report.kernel_bugs[0])
    assert report.tpu.kind == "no-chip", report.tpu


@NEEDS_LIBTPU
@pytest.mark.xfail(raises=MosaicCompileError, strict=True, reason="our module is refused too")
def test_without_a_chip_scratch_past_vmem_is_the_kernels_bug():
    """libtpu refuses upstream's program (the kernel's bug) and minipallas's module alike
    (which the conftest's compile of every emitted module then reports: the xfail)."""
    whole = pl.BlockSpec((128, 128), lambda i: (0, 0))
    fn = call(copy_through, (128, 128), ins=[whole], scratch=[pltpu.VMEM((4096, 12800), F32)])
    report = run(Case("scratch past VMEM", fn, (A[:128, :128].copy(),)), device="tpu")
    assert report.finding.name == "compile", report.text()
    assert "exceed memory" in str(report.kernel_bugs[0])


def _paged_attention():
    from jax.experimental.pallas.ops.tpu.paged_attention import paged_attention

    heads, dim, page, pages = 2, 128, 16, 4
    k = RNG.standard_normal((heads, 16, page, dim)).astype(np.float32)
    q = RNG.standard_normal((2, heads, dim)).astype(np.float32)
    table = RNG.permutation(16)[: 2 * pages].reshape(2, pages).astype(np.int32)
    lengths = np.array([50, 17], np.int32)
    fn = functools.partial(paged_attention, pages_per_compute_block=2)
    return fn, (q, k, k, lengths, table)


def _causal_flash_attention():
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    sizes = {f.name: 128 for f in dataclasses.fields(fa.BlockSizes)} | {"block_b": 1}
    q = RNG.standard_normal((1, 2, 256, 128)).astype(np.float32)
    fn = functools.partial(fa.flash_attention, causal=True, block_sizes=fa.BlockSizes(**sizes))
    return fn, (q, q, q)


@pytest.mark.parametrize("make", [_paged_attention, _causal_flash_attention])
def test_upstreams_shipped_kernels_have_no_bug(make):
    """Paged attention double-buffers its pages by hand across grid points, keeping its buffer
    index in a scalar-prefetch table it writes (SMEM lives for the whole grid); causal flash
    attention skips blocks with pl.when."""
    fn, args = make()
    checked = program_bugs(jax.make_jaxpr(fn)(*args), args)
    assert checked.kernels == 1 and checked.bugs == [] and not checked.notes


@NEEDS_LIBTPU
def test_without_a_chip_a_correct_kernel_compiles_on_both_sides():
    """pltpu.CompilerParams reach minipallas's custom call as upstream's (jax 0.10.2 keeps the
    object itself in the equation, not a mapping by backend)."""
    report = run(Case("tiled matmul", matmul(), (A, A)), device="tpu")
    assert report.finding.kind in ("agree", "within-envelope") and not report.kernel_bugs
    assert report.tpu.kind == "no-chip" and report.tpu.ok, report.tpu
