"""Semaphores in Mosaic: scratch semaphores are kernel operands and ``run_scoped`` ones are
``tpu.sem_alloc``s, both ``memref<...x!tpu.semaphore, #tpu.memory_space<semaphore_mem>>``;
``semaphore_signal`` / ``wait`` / ``read`` are ``tpu.sem_signal`` / ``sem_wait`` / ``sem_read``
on a 0-d memref, which ``sem.at[i]`` slices out with ``tpu.memref_slice`` +
``tpu.memref_squeeze``. Each kernel is written once, against a namespace, and lowered by both
minipallas and upstream Pallas (upstream's kernel is also imported with ``kernel_from_jaxpr``);
the modules must agree."""

# ruff: noqa: E501  (FileCheck patterns quote whole MLIR lines)

import functools
import inspect
import types

import jax
import jax.numpy as jjnp
import numpy as np
import pytest
from filecheck_util import filecheck
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from tpu_util import spec

import minipallas as mp
from minipallas import tpu
from minipallas.interop.importer.rules.kernel_call import kernel_from_jaxpr
from minipallas.ir.errors import MiniPallasError, PassError
from minipallas.ir.kernel_spec import Kernel
from minipallas.ir.types import SEMAPHORE, TPU_SMEM, RefType
from minipallas.kernels.pallas_call import lower_for_target as lower_call
from minipallas.lowering.tpu import lower_to_mosaic
from minipallas.tools.difftest.mosaic import compare, upstream_mosaic

OURS = types.SimpleNamespace(
    signal=mp.semaphore_signal,
    wait=mp.semaphore_wait,
    read=mp.semaphore_read,
    run_scoped=mp.run_scoped,
    program_id=mp.program_id,
    REGULAR=tpu.SemaphoreType.REGULAR,
)
UPSTREAM = types.SimpleNamespace(
    signal=pl.semaphore_signal,
    wait=pl.semaphore_wait,
    read=pl.semaphore_read,
    run_scoped=pl.run_scoped,
    program_id=pl.program_id,
    REGULAR=pltpu.SemaphoreType.REGULAR,
)
SEM = "memref<!tpu.semaphore, #tpu.memory_space<semaphore_mem>>"
SEMS4 = "memref<4x!tpu.semaphore, #tpu.memory_space<semaphore_mem>>"
SEM1 = "memref<1x!tpu.semaphore, #tpu.memory_space<semaphore_mem>>"


def two_counters(ns, x_ref, o_ref, s0, s1):
    ns.signal(s1, 3)
    ns.signal(s0)
    ns.wait(s1, 2)
    o_ref[0] = ns.read(s1) + x_ref[0]
    o_ref[1] = ns.read(s0) + x_ref[1]


def scoped_one(ns, x_ref, o_ref):
    def body(sem):
        ns.signal(sem, x_ref[0])
        o_ref[0] = ns.read(sem)

    ns.run_scoped(body, ns.REGULAR)


def scoped_array_static(ns, x_ref, o_ref):
    def body(sems):
        ns.signal(sems.at[1], 2)
        ns.signal(sems.at[3], 5)
        ns.wait(sems.at[1], 1)
        o_ref[0] = ns.read(sems.at[1])
        o_ref[1] = ns.read(sems.at[3])

    ns.run_scoped(body, ns.REGULAR((4,)))


def per_step(ns, x_ref, o_ref, sems):
    i = ns.program_id(0)
    ns.signal(sems.at[i], 2)
    ns.wait(sems.at[i], 1)
    o_ref[i] = ns.read(sems.at[i]) + x_ref[i]


def scoped_array_loaded_index(ns, x_ref, o_ref):
    def body(sems):
        i = x_ref[0]
        ns.signal(sems.at[i], 5)
        o_ref[0] = ns.read(sems.at[i])

    ns.run_scoped(body, ns.REGULAR((4,)))


def never_decrements(ns, x_ref, o_ref, sem):
    ns.signal(sem, 2)
    ns.wait(sem, 1, decrement=False)


# name: (kernel body, output/input length, grid, scratch (a function of the namespace))
KERNELS = {
    "two_counters": (two_counters, 2, (), lambda ns: [ns.REGULAR, ns.REGULAR]),
    "scoped_one": (scoped_one, 2, (), lambda ns: []),
    "scoped_array_static": (scoped_array_static, 2, (), lambda ns: []),
    "per_step": (per_step, 4, (4,), lambda ns: [ns.REGULAR((4,))]),
    "scoped_array_loaded_index": (scoped_array_loaded_index, 2, (), lambda ns: []),
    "never_decrements": (never_decrements, 2, (), lambda ns: [ns.REGULAR]),
}


def _x(name: str) -> np.ndarray:
    n = KERNELS[name][1]
    return np.arange(10, 10 * (n + 1), 10, dtype=np.int32)


def ours(name: str):
    body, n, grid, scratch = KERNELS[name]
    smem = mp.BlockSpec(memory_space=tpu.SMEM)
    return mp.pallas_call(functools.partial(body, OURS), mp.ArrayType((n,), "int32"), grid=grid,
                          in_specs=[smem], out_specs=smem, scratch_shapes=scratch(OURS))  # fmt: skip


def upstream_call(name: str):
    body, n, grid, scratch = KERNELS[name]
    smem = pl.BlockSpec(memory_space=pltpu.SMEM)
    return pl.pallas_call(functools.partial(body, UPSTREAM), jax.ShapeDtypeStruct((n,), jjnp.int32),
                          grid=grid, in_specs=[smem], out_specs=smem, scratch_shapes=scratch(UPSTREAM))  # fmt: skip


def upstream(name: str):
    return upstream_mosaic(upstream_call(name), _x(name))


def lowered(name: str, **options):
    return ours(name).lower(_x(name), target="tpu", **options)


def text(name: str) -> str:
    return lowered(name).as_text(debug_info=False)


@pytest.mark.parametrize("name", ["two_counters", "scoped_one", "scoped_array_static", "per_step"])
def test_module_matches_upstreams_lowering(name):
    module = lowered(name).module
    assert module.operation.verify()
    diff = compare(module, upstream(name))
    assert (diff.signature, diff.memrefs, diff.ops, diff.attributes) == (None, {}, {}, {})
    assert diff.same_text


@pytest.mark.parametrize("name", ["two_counters", "scoped_array_static", "per_step"])
def test_imported_upstream_kernel_lowers_to_upstreams_module(name):
    """The upstream kernel itself, imported (``kernel_from_jaxpr``) rather than re-traced."""
    jaxpr = jax.make_jaxpr(upstream_call(name))(_x(name))
    module = lower_call(kernel_from_jaxpr(jaxpr, memory_space=tpu.VMEM), "tpu").module
    assert module.operation.verify()
    assert compare(module, upstream(name)).same_text


def test_scratch_semaphores_are_kernel_operands():
    np.testing.assert_array_equal(ours("two_counters")(_x("two_counters")), [11, 21])
    filecheck(
        text("two_counters"),
        f"""
        CHECK: func.func @two_counters(%arg0: memref<2xi32, #tpu.memory_space<smem>>, %arg1: memref<2xi32, #tpu.memory_space<smem>>, %arg2: {SEM}, %arg3: {SEM})
        CHECK-SAME: scratch_operands = 2
        CHECK: tpu.sem_signal %arg3, %c3_i32 : {SEM}
        CHECK-NEXT: tpu.sem_signal %arg2, %c1_i32 : {SEM}
        CHECK-NEXT: tpu.sem_wait %arg3, %c2_i32 : {SEM}
        CHECK-NEXT: %[[R:.*]] = tpu.sem_read %arg3 : {SEM} -> i32
        CHECK: arith.addi %[[R]], %{{{{.*}}}} : i32
        CHECK: tpu.sem_read %arg2 : {SEM} -> i32
        """,
    )


def test_run_scoped_semaphore_is_a_sem_alloc_in_the_region():
    filecheck(
        text("scoped_one"),
        f"""
        CHECK: "tpu.region"() ({{
        CHECK-NEXT: %[[S:.*]] = tpu.sem_alloc : {SEM}
        CHECK-NEXT: %[[N:.*]] = memref.load %arg0
        CHECK-NEXT: tpu.sem_signal %[[S]], %[[N]] : {SEM}
        CHECK-NEXT: tpu.sem_read %[[S]] : {SEM} -> i32
        CHECK: tpu.yield
        """,
    )


def test_static_at_slices_and_squeezes_one_semaphore():
    filecheck(
        text("scoped_array_static"),
        f"""
        CHECK-DAG: %[[C1:.*]] = arith.constant 1 : i32
        CHECK-DAG: %[[C3:.*]] = arith.constant 3 : i32
        CHECK: %[[S:.*]] = tpu.sem_alloc : {SEMS4}
        CHECK-NEXT: %[[A:.*]] = tpu.memref_slice %[[S]][%[[C1]]] : {SEMS4} -> {SEM1}
        CHECK-NEXT: %[[B:.*]] = tpu.memref_squeeze %[[A]] : {SEM1} -> {SEM}
        CHECK-NEXT: tpu.sem_signal %[[B]], %{{{{.*}}}} : {SEM}
        CHECK-NEXT: %[[D:.*]] = tpu.memref_slice %[[S]][%[[C3]]] : {SEMS4} -> {SEM1}
        CHECK-NEXT: %[[E:.*]] = tpu.memref_squeeze %[[D]] : {SEM1} -> {SEM}
        CHECK-NEXT: tpu.sem_signal %[[E]], %{{{{.*}}}} : {SEM}
        CHECK: tpu.sem_wait %{{{{.*}}}}, %[[C1]] : {SEM}
        """,
    )


def test_dynamic_at_by_the_grid_index_needs_no_clamp():
    out = text("per_step")
    filecheck(
        out,
        f"""
        CHECK: func.func @per_step(%arg0: i32, {{{{.*}}}}, %arg3: {SEMS4})
        CHECK: %[[A:.*]] = tpu.memref_slice %arg3[%arg0] : {SEMS4} -> {SEM1}
        CHECK-NEXT: %[[B:.*]] = tpu.memref_squeeze %[[A]] : {SEM1} -> {SEM}
        CHECK-NEXT: tpu.sem_signal %[[B]]
        """,
    )
    assert "maxsi" not in out and "minsi" not in out


def test_dynamic_at_by_a_loaded_index_is_clamped_where_upstream_passes_it_raw():
    """minipallas defines an out-of-range index (numpy's wrap of negatives, then a clamp), as
    for every view; upstream slices at the raw index. Only that index arithmetic differs."""
    module = lowered("scoped_array_loaded_index").module
    assert module.operation.verify()
    filecheck(
        str(module),
        f"""
        CHECK: %[[I:.*]] = memref.load %arg0
        CHECK: %[[LO:.*]] = arith.maxsi %{{{{.*}}}}, %{{{{.*}}}} : i32
        CHECK-NEXT: %[[HI:.*]] = arith.minsi %[[LO]], %{{{{.*}}}} : i32
        CHECK-NEXT: %[[A:.*]] = tpu.memref_slice %{{{{.*}}}}[%[[HI]]] : {SEMS4} -> {SEM1}
        CHECK-NEXT: tpu.memref_squeeze %[[A]] : {SEM1} -> {SEM}
        """,
    )
    diff = compare(module, upstream("scoped_array_loaded_index"))
    assert (diff.signature, diff.memrefs, diff.attributes) == (None, {}, {})
    index_ops = {"arith.constant", "arith.cmpi", "arith.select", "arith.addi"}
    assert set(diff.ops) <= index_ops | {"arith.maxsi", "arith.minsi"}
    assert all(n > 0 for n in diff.ops.values())  # only ever more: the wrap and the clamp


def test_the_ops_own_indexer_slices_like_a_view():
    """Text IR may index the semaphore array in the op itself (``%sem[%i]``)."""
    fn = mp.parse(
        """func @own_index(%0: Ref{i32[2], tpu.smem}, %1: Ref{i32[2], tpu.smem}, %2: Ref{i32[4], semaphore}) -> () {
  %3 = get %0[0] : i32[]
  %4 = constant 1 : i32[]
  semaphore_signal %2[%3], %4
  semaphore_wait %2[2], %4
  %5 = semaphore_read %2[%3] : i32[]
  %6 = swap %1[0], %5 : i32[]
  return
}"""
    )
    block = spec((2,), "int32", space=TPU_SMEM)(0)
    scratch = (RefType((4,), "int32", SEMAPHORE),)
    module = lower_to_mosaic(Kernel(fn.name, fn, (), (block,), (block,), scratch, None)).module
    assert module.operation.verify()
    filecheck(
        str(module),
        f"""
        CHECK: func.func @own_index({{{{.*}}}}, %arg2: {SEMS4})
        CHECK: %[[A:.*]] = tpu.memref_slice %arg2[%{{{{.*}}}}] : {SEMS4} -> {SEM1}
        CHECK-NEXT: %[[B:.*]] = tpu.memref_squeeze %[[A]] : {SEM1} -> {SEM}
        CHECK-NEXT: tpu.sem_signal %[[B]]
        CHECK: %[[C:.*]] = tpu.memref_slice %arg2[%c2_i32] : {SEMS4} -> {SEM1}
        CHECK-NEXT: %[[D:.*]] = tpu.memref_squeeze %[[C]] : {SEM1} -> {SEM}
        CHECK-NEXT: tpu.sem_wait %[[D]]
        CHECK: tpu.sem_read
        """,
    )


def test_non_decrementing_wait_is_refused_with_upstreams_message():
    with pytest.raises(PassError, match="^.*Non-decrementing wait is not supported\\.") as e:
        lowered("never_decrements")
    assert isinstance(e.value, MiniPallasError)
    assert e.value.op == "semaphore_wait"
    line = inspect.getsourcelines(never_decrements)[1] + 2  # the wait's line
    assert f"test_tpu_semaphores.py:{line}" in str(e.value.loc)


def test_upstream_0_10_2_emits_a_decrementing_wait_for_decrement_false():
    """Upstream's rule means to refuse it too, but ``decrement`` reaches the rule as a traced
    constant (an ``ir.Value``, always true), so its check never fires and ``tpu.sem_wait``
    decrements anyway. minipallas refuses instead of emitting a wait with other semantics; if
    this test fails, upstream now refuses as well."""
    module = str(upstream("never_decrements"))
    assert "tpu.sem_wait" in module


def test_semaphores_are_not_promoted_to_registers():
    out = lowered("scoped_one", promote_scratch=True)
    assert out.info["promotion"].promoted == 0
    assert "tpu.sem_alloc" in out.as_text(debug_info=False)
