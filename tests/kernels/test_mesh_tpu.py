"""One-core mesh kernels (upstream's ``pl.kernel`` over ``create_tensorcore_mesh("core",
num_cores=1)``) through minipallas's Mosaic lowering, checked without a chip
(``platforms/mesh_tpu.py``): for every one-core kernel of the mesh corpus
(``minipallas/tools/corpora/mesh_corpus/``, ``ONE_CORE``) the Mosaic kernel has no collective allocation
and no barrier left, its module shows the shared allocation as plain VMEM, libtpu compiles it
ahead of time for a v5e, and its CPU program gives the reference's bits. A mesh of several cores
whose cores share memory is refused with upstream's Mosaic message. ``bench/chip/tpu_mesh.py`` runs
the same kernels on the chip."""

# ruff: noqa: E501  (FileCheck patterns quote whole MLIR lines)

import pathlib
import re
import sys

import jax
import numpy as np
import pytest
from filecheck_util import filecheck

import minipallas as mp
from minipallas.ir.collectives import MOSAIC_MESSAGE, CollectiveAxesUnsupported
from minipallas.kernels.collective.mesh import mesh_kernel
from minipallas.kernels.programs.choose import cpu_program, lower_for_target
from minipallas.lowering.runtime import libtpu
from minipallas.lowering.tpu import aot, compile_check
from minipallas.platforms.mesh_tpu import (
    mesh_call_of,
    mesh_eqn,
    mosaic_kernel,
    on_tpu,
    one_core_body,
)
from minipallas.tools.difftest.mosaic import normalized_text

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "interop"))

from minipallas.tools.corpora.mesh_corpus import CASES, ONE_CORE  # noqa: E402

# ring_allreduce's exchange loop runs cores - 1 = 0 times at one core: MLIR's canonicalizer
# drops the loop, and with it the mailbox's and the semaphores' only uses
UNUSED_AT_ONE_CORE = ("ring_allreduce_x1",)
needs_libtpu = pytest.mark.skipif(
    not aot.libtpu_available(), reason="libtpu is not installed (make test installs it)"
)


def built(case):
    f, args = case.build()
    return f, args, mesh_eqn(jax.make_jaxpr(f)(*args).jaxpr)


def ops_of(fn):
    return [op for g in (fn, *fn.callees()) for op in g.walk()]


def collective(fn):
    return [op for op in ops_of(fn) if op.name == "run_scoped" and op.attrs["collective_axes"]]


def used(value, block):
    return any(value in op.operands for op in block.walk())


def text(kernel):
    return str(lower_for_target(kernel, "tpu"))


# -- every one-core kernel of the corpus -------------------------------------------------------


@needs_libtpu
@pytest.mark.parametrize("case", ONE_CORE, ids=lambda c: c.name)
def test_a_one_core_mesh_kernel_compiles_for_a_v5e_with_plain_vmem_and_no_barrier(case):
    _, args, eqn = built(case)
    source = mesh_call_of(eqn)
    shared = [  # the VMEM_SHARED allocations the body uses
        p.type
        for op in collective(source.attrs["callee"])
        for p in op.regions[0].params[: len(op.regions[0].params) - len(op.operands)]
        if str(p.type.memory_space) == "tpu.vmem_shared" and used(p, op.regions[0])
    ]
    kernel = mosaic_kernel(eqn)
    assert not collective(kernel.body)
    assert not [op for op in ops_of(kernel.body) if op.name in ("barrier", "program_id")]
    assert "vmem_shared" not in str(kernel.body)
    module = text(kernel)
    assert "vmem_shared" not in module
    plain = [  # the kernel's allocations where the shared ones were: VMEM of their shapes
        (p.type.shape, str(p.type.memory_space))
        for op in ops_of(kernel.body)
        if op.name == "run_scoped"
        for p in op.regions[0].params[: len(op.regions[0].params) - len(op.operands)]
    ]
    for t in shared:
        assert (t.shape, "tpu.vmem") in plain
        dims = "x".join(map(str, t.shape))
        if case.name not in UNUSED_AT_ONE_CORE:  # and a VMEM alloca of that shape in the module
            assert re.search(
                rf"memref\.alloca\(\) : memref<{dims}x\w+, #tpu\.memory_space<vmem>>", module
            )
    assert not re.search(r"memref\.alloca\(\) : memref<[^>]*memory_space<(?!vmem>|smem>)", module)
    # no barrier: the module waits and signals only where the kernel itself does
    body_ops = [op.name for op in ops_of(kernel.body)]
    unused = case.name in UNUSED_AT_ONE_CORE
    assert module.count("tpu.sem_wait") == (0 if unused else body_ops.count("semaphore_wait"))
    assert module.count("tpu.sem_signal") == (0 if unused else body_ops.count("semaphore_signal"))
    compile_check(kernel)


@pytest.mark.parametrize("case", ONE_CORE, ids=lambda c: c.name)
def test_the_mosaic_kernels_cpu_program_gives_the_references_bits(case):
    _, args, eqn = built(case)
    kernel = mosaic_kernel(eqn)
    mp.verify(kernel.body)
    got = mp.interpret(mp.discharge(cpu_program(kernel)), *args)
    for g, want in zip(got, case.reference(*args), strict=True):
        g = np.asarray(g)
        if case.exact:
            assert g.dtype == want.dtype and np.array_equal(g.view(np.uint8), want.view(np.uint8))
        else:
            np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-5)


def test_the_kernel_op_and_equation_give_one_module():
    _, _, eqn = built(ONE_CORE[0])
    op = mesh_call_of(eqn)
    texts = {
        normalized_text(lower_for_target(mosaic_kernel(s), "tpu").module)
        for s in (eqn, op, mesh_kernel(op))
    }
    assert len(texts) == 1


def test_the_source_is_not_changed():
    _, _, eqn = built(ONE_CORE[0])
    op = mesh_call_of(eqn)
    before = str(op.attrs["callee"])
    mosaic_kernel(op)
    assert str(op.attrs["callee"]) == before and "vmem_shared" in before


# -- a barrier among one core, from text -------------------------------------------------------

BARRIER = """
func @kernel_core(%0: Ref{f32[8,128]}, %1: Ref{f32[8,128]}) -> () effects {read 0, write 1} {
  run_scoped(%0, %1) collective_axes ("core") {
  ^(%2: Ref{f32[8,128], tpu.vmem_shared}, %3: Ref{i32[1], semaphore}, %4: Ref{f32[8,128]}, %5: Ref{f32[8,128]}):
    run_scoped(%4, %2) {
    ^(%6: Ref{i32[], dma_semaphore}, %7: Ref{f32[8,128]}, %8: Ref{f32[8,128], tpu.vmem_shared}):
      dma_start %7, %8, %6
      dma_wait %7, %8, %6
      yield
    }
    barrier ("core")
    %9 = get %2[:, :] : f32[8,128]
    %10 = add %9, %9 : f32[8,128]
    %11 = swap %2[:, :], %10 : f32[8,128]
    run_scoped(%2, %5) {
    ^(%12: Ref{i32[], dma_semaphore}, %13: Ref{f32[8,128], tpu.vmem_shared}, %14: Ref{f32[8,128]}):
      dma_start %13, %14, %12
      dma_wait %13, %14, %12
      yield
    }
    yield
  }
  return
}

func @f(%0: f32[8,128]) -> (f32[8,128]) {
  %1 = mesh_call @kernel_core(%0), mesh ("core") (1) : f32[8,128]
  return %1
}
"""


@needs_libtpu
def test_a_barrier_among_one_core_vanishes_and_shared_memory_is_vmem():
    module = mp.parse_module(BARRIER)
    (op,) = [op for op in module.entry.walk() if op.name == "mesh_call"]
    kernel = mosaic_kernel(op)
    mosaic = text(kernel)
    filecheck(
        mosaic,
        """
        CHECK: func.func @kernel_core(%arg0: i32 {{.*}}, %arg1: memref<8x128xf32, #tpu.memory_space<any>> {{.*}}, %arg2: memref<8x128xf32, #tpu.memory_space<any>> {{.*}})
        CHECK: memref.alloca() : memref<8x128xf32, #tpu.memory_space<vmem>>
        CHECK: tpu.sem_alloc : memref<1x!tpu.semaphore, #tpu.memory_space<semaphore_mem>>
        CHECK: tpu.enqueue_dma source(%arg1 : memref<8x128xf32, #tpu.memory_space<any>>) target({{.*}} : memref<8x128xf32, #tpu.memory_space<vmem>>)
        CHECK: tpu.wait_dma2
        CHECK-NOT: tpu.sem_wait
        CHECK-NOT: tpu.sem_signal
        CHECK: vector.load {{.*}} : memref<8x128xf32, #tpu.memory_space<vmem>>, vector<8x128xf32>
        CHECK: arith.addf
        CHECK: tpu.vector_store {{.*}} : memref<8x128xf32, #tpu.memory_space<vmem>>, vector<8x128xf32>
        CHECK: tpu.enqueue_dma source({{.*}} : memref<8x128xf32, #tpu.memory_space<vmem>>) target(%arg2 : memref<8x128xf32, #tpu.memory_space<any>>)
        CHECK-NOT: vmem_shared
        """,
    )
    compile_check(kernel)
    x = np.arange(8 * 128, dtype=np.float32).reshape(8, 128)
    (got,) = mp.interpret(mp.discharge(cpu_program(kernel)), x)
    np.testing.assert_array_equal(got, x + x)


def test_a_barrier_among_two_cores_is_refused_with_its_allocation():
    two = mp.parse_module(BARRIER.replace("(1) :", "(2) :").replace("i32[1]", "i32[2]"))
    (op,) = [op for op in two.entry.walk() if op.name == "mesh_call"]
    with pytest.raises(CollectiveAxesUnsupported, match=re.escape(MOSAIC_MESSAGE)):
        mosaic_kernel(op)


def test_the_rewrite_keeps_what_is_over_a_longer_axis():
    """``one_core_body`` over a mesh whose other axis is long: the core's position there stays."""
    module = mp.parse_module(BARRIER)
    body = [op for op in module.entry.walk() if op.name == "mesh_call"][0].attrs["callee"]
    kept = one_core_body(body, {"core": 1}, grid=(1,))
    assert "barrier" not in str(kept) and "collective_axes" not in str(kept)


# -- several cores ------------------------------------------------------------------------------

SHARING = [
    c
    for c in CASES
    if c.expect == "ok" and c.name.split("_x")[0] not in ("double_buffer", "gather_rows")
]


@pytest.mark.parametrize(
    "case", SHARING[:3] + [c for c in CASES if c.expect != "ok"][:2], ids=lambda c: c.name
)
def test_a_mesh_whose_cores_share_memory_is_refused_with_upstreams_message(case):
    _, _, eqn = built(case)
    with pytest.raises(CollectiveAxesUnsupported) as info:
        mosaic_kernel(eqn)
    assert str(info.value) == MOSAIC_MESSAGE
    notes = "\n".join(info.value.__notes__)
    assert f"A mesh of {case.cores} cores" in notes and "TensorCores" in notes
    assert "a TPU v5e has one TensorCore" in notes


def test_upstreams_lowering_refuses_the_same_kernel_with_the_same_message():
    f, args, _ = built(SHARING[0])
    with pytest.raises(NotImplementedError, match=re.escape(MOSAIC_MESSAGE)):
        jax.jit(f).trace(*args).lower(lowering_platforms=("tpu",))


@needs_libtpu
def test_a_mesh_of_two_cores_that_share_nothing_lowers_as_upstreams_does():
    """Upstream lowers it too (a ``parallel`` grid over the mesh) and libtpu compiles both."""
    (case,) = [c for c in CASES if c.name == "double_buffer_x2"]
    _, _, eqn = built(case)
    kernel = mosaic_kernel(eqn)
    assert kernel.grid == (2,)
    compile_check(kernel)


# -- under jax.jit, for the chip ----------------------------------------------------------------


@needs_libtpu
@pytest.mark.parametrize("name", ["allreduce_sum_x1", "gather_rows_x1"])
def test_on_tpu_is_one_custom_call_that_compiles_for_a_v5e(name):
    (case,) = [c for c in ONE_CORE if c.name == name]
    f, args, _ = built(case)
    with jax.default_device(libtpu.tpu_device()):
        sharding = libtpu.tpu_sharding()
        specs = [jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding) for x in args]
        lowered = jax.jit(on_tpu(f)).lower(*specs)
        assert lowered.as_text().count("tpu_custom_call") == 1
        lowered.compile()


@needs_libtpu
def test_the_chip_script_runs_ahead_of_time(tmp_path, capsys):
    """``bench/chip/tpu_mesh.py --aot``: both sides compiled for a v5e, the bits from the
    Mosaic kernel's CPU program; upstream's refusal in the table."""
    from bench.chip import tpu_mesh

    out = tmp_path / "table.txt"
    names = "allreduce_sum_x1,double_buffer_x1"
    assert tpu_mesh.main(["--aot", "--kernels", names, "--out", str(out)]) == 0
    table = out.read_text()
    assert f"| allreduce_sum_x1 | NotImplementedError: {MOSAIC_MESSAGE} |" in table
    assert "| double_buffer_x1 | compiles (ahead of time) |" in table
    assert "upstream refuses 1" in capsys.readouterr().out
