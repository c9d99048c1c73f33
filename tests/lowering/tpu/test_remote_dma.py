# ruff: noqa: E501  (FileCheck patterns quote whole MLIR lines)
"""Kernels that span devices on the chip (issue 47, item 5): a ``pallas_call`` in a
``jax.shard_map`` with remote copies, remote signals and the barrier semaphore, emitted as one
device's Mosaic module (``lowering/tpu/rules/remote.py``) and run by ``on_tpu`` with the
shard_map kept around it (``platforms/devices_tpu.py``).

Without libtpu: the emitted remote ops (FileCheck), and ``on_tpu``'s jaxpr (traced over an
``AbstractMesh``: no devices needed). With libtpu (skipped without it): upstream's module of
the same kernel has the same remote ops, and both compile ahead of time for the multi-chip
topologies libtpu 0.0.42 describes (``v5e:2x2``, ``v6e:2x2``, ``v4:2x2x1``) with the same
custom-call config. The chip run (one v5e, a copy to itself) is ``bench/tpu_remote_v5e.py``.
"""

import re

import device_cases
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from device_cases import (
    permute_along_y,
    remote_copy,
    right_permute,
    shift_two_logical,
    whole_call,
)
from filecheck_util import filecheck
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AbstractMesh, NamedSharding
from jax.sharding import PartitionSpec as P

from bench.chip.tpu_remote import kernels as chip_kernels
from bench.chip.tpu_remote import remote_ops
from minipallas.ir.errors import MiniPallasError
from minipallas.lowering.runtime.libtpu import libtpu_available
from minipallas.platforms.devices_tpu import device_module
from minipallas.platforms.mesh_tpu import on_tpu

MESH = pl.DeviceIdType.MESH
DMA = pltpu.SemaphoreType.DMA
F32 = jnp.float32
needs_libtpu = pytest.mark.skipif(not libtpu_available(), reason="libtpu is not installed")


def ring_all_gather(n):
    """Each device's shard into its own slot (a local copy), then around the ring slot by slot
    (windows of the output, ``o_ref.at[slot]``)."""

    def kernel(x_ref, o_ref, local_sem, send_sem, recv_sem):
        me = lax.axis_index("x")
        right = lax.rem(me + 1, n)
        mine = pltpu.make_async_copy(x_ref, o_ref.at[me], local_sem)
        mine.start()
        mine.wait()
        for step in range(n - 1):
            slot = lax.rem(me + n - step, n)
            copy = pltpu.make_async_remote_copy(o_ref.at[slot], o_ref.at[slot], send_sem,
                                                recv_sem, device_id=(right,),
                                                device_id_type=MESH)  # fmt: skip
            copy.start()
            copy.wait_send()
            copy.wait_recv()

    return kernel


def scoped_permute(x_ref, o_ref):
    """The right permute with its semaphores and a staging buffer from ``pl.run_scoped``."""

    def body(stage, send_sem, recv_sem, local_sem):
        right = lax.rem(lax.axis_index("x") + 1, 4)
        local = pltpu.make_async_copy(x_ref, stage, local_sem)
        local.start()
        local.wait()
        copy = pltpu.make_async_remote_copy(stage, o_ref, send_sem, recv_sem,
                                            device_id=(right,), device_id_type=MESH)  # fmt: skip
        copy.start()
        copy.wait()

    pl.run_scoped(body, pltpu.VMEM((8, 128), F32), DMA, DMA, DMA)


def via_helper(x_ref, o_ref, send_sem, recv_sem):
    """The right permute's copy in a ``jax.jit`` helper the kernel calls (imported inline)."""

    @jax.jit
    def send(x_ref, o_ref, send_sem, recv_sem):
        right_permute(4)(x_ref, o_ref, send_sem, recv_sem)

    send(x_ref, o_ref, send_sem, recv_sem)


def remote_call(kernel, *, out=(8, 128), scratch=2, collective_id=None):
    """``kernel`` over whole shards in HBM."""
    return whole_call(kernel, out, [DMA] * scratch, collective_id=collective_id)


def on_mesh(kernel, mesh, *, spec=None, out=(8, 128), scratch=2, collective_id=None):
    """``remote_call(kernel, ...)`` in a ``shard_map`` over ``mesh``, split along "x"
    (``spec``)."""
    return device_cases.on_mesh(kernel, out, [DMA] * scratch, mesh=mesh, spec=spec,
                                collective_id=collective_id)  # fmt: skip


TO_ITSELF = chip_kernels()["to_itself"][0]  # a copy to itself, as on the chip

# name -> (the function over a mesh, the mesh's shape and names, the global input shape)
CASES = {
    "right_permute": (lambda m: on_mesh(right_permute(4), m), ((4,), ("x",)), (32, 128)),
    "shift_two_logical": (
        lambda m: on_mesh(shift_two_logical(4), m, collective_id=0),
        ((4,), ("x",)),
        (32, 128),
    ),
    "ring_all_gather": (
        lambda m: on_mesh(ring_all_gather(4), m, out=(4, 8, 128), scratch=3),
        ((4,), ("x",)),
        (32, 128),
    ),
    "permute_along_y": (
        lambda m: on_mesh(permute_along_y, m, spec=P(("x", "y"))),
        ((2, 2), ("x", "y")),
        (32, 128),
    ),
    "to_itself": (lambda m: on_mesh(TO_ITSELF, m, collective_id=0), ((1,), ("x",)), (8, 128)),
    "scoped_permute": (lambda m: on_mesh(scoped_permute, m, scratch=0), ((4,), ("x",)), (32, 128)),
    "via_helper": (lambda m: on_mesh(via_helper, m), ((4,), ("x",)), (32, 128)),
}


def ours(name, mesh=None):
    """Our module of the case's one kernel, as text."""
    return _module_text(*CASES[name], mesh)


def _module_text(make, mesh_shape, x, mesh=None):
    f = make(mesh or AbstractMesh(*mesh_shape))
    jaxpr = jax.make_jaxpr(f)(jax.ShapeDtypeStruct(x, F32))
    (eqn,) = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "shard_map"]
    (call,) = [e for e in eqn.params["jaxpr"].eqns if e.primitive.name == "pallas_call"]
    return str(device_module(call, eqn.params["mesh"])[1].module)


# --- what minipallas emits --------------------------------------------------------------------

CHECKS = {
    "right_permute": """
CHECK: func.func @kernel(%arg0: memref<8x128xf32, #tpu.memory_space<any>>{{.*}}, %arg1: memref<8x128xf32, #tpu.memory_space<any>>{{.*}}, %arg2: memref<!tpu.dma_semaphore, #tpu.memory_space<semaphore_mem>>{{.*}}, %arg3: memref<!tpu.dma_semaphore
CHECK-SAME: scratch_operands = 2
CHECK-NOT: tpu.sem_barrier
CHECK: %[[ID:.+]] = tpu.device_id : i32
CHECK: %[[ME:.+]] = arith.remsi %[[ID]], %c4_i32
CHECK: %[[NEXT:.+]] = arith.addi %[[ME]], %c1_i32
CHECK: %[[RIGHT:.+]] = arith.remsi %[[NEXT]], %c4_i32
CHECK: tpu.enqueue_dma source(%arg0 : {{.*}}) target(%arg1 : {{.*}}) source_semaphore(%arg2 : {{.*}}) target_semaphore(%arg3 : {{.*}}) device_id(%[[RIGHT]])
CHECK: tpu.wait_dma2 semaphore(%arg2 : {{.*}}) src(%arg1 : {{.*}}) dst(%arg0 : {{.*}}) device_id(%c0_i32) core_id(%c0_i32)
CHECK: tpu.wait_dma2 semaphore(%arg3 : {{.*}}) src(%arg0 : {{.*}}) dst(%arg1 : {{.*}}) device_id(%[[RIGHT]])
CHECK-NOT: core_id
""",
    "shift_two_logical": """
CHECK: %[[B:.+]] = tpu.sem_barrier : memref<!tpu.semaphore, #tpu.memory_space<semaphore_mem>>
CHECK: tpu.sem_signal %[[B]], %c1_i32 device_id %{{.+}} : memref<!tpu.semaphore
CHECK: tpu.sem_signal %[[B]], %c1_i32 device_id %{{.+}} : memref<!tpu.semaphore
CHECK: tpu.sem_wait %[[B]], %c2_i32
CHECK: tpu.enqueue_dma {{.*}} source_semaphore(%arg2 : {{.*}}) target_semaphore(%arg3 : {{.*}}) device_id(%{{.+}})
""",
    "ring_all_gather": """
CHECK: %arg1: memref<4x8x128xf32, #tpu.memory_space<any>>
CHECK-SAME: scratch_operands = 3
CHECK: tpu.enqueue_dma source(%arg0 : {{.*}}) target(%{{.+}} : memref<8x128xf32, #tpu.memory_space<any>>) target_semaphore(%arg2 : {{.*}})
CHECK-NOT: device_id
CHECK: tpu.wait_dma2 semaphore(%arg2
CHECK-COUNT-3: tpu.enqueue_dma source(%{{.+}} : memref<8x128xf32, #tpu.memory_space<any>>) target(%{{.+}} : memref<8x128xf32, #tpu.memory_space<any>>) source_semaphore(%arg3 : {{.*}}) target_semaphore(%arg4 : {{.*}}) device_id
""",
    "permute_along_y": """
CHECK: %[[ID:.+]] = tpu.device_id
CHECK: tpu.enqueue_dma {{.*}} device_id(%{{.+}})
""",
    "scoped_permute": """
CHECK: tpu.region
CHECK-DAG: memref.alloca() : memref<8x128xf32, #tpu.memory_space<vmem>>
CHECK-DAG: tpu.sem_alloc : memref<!tpu.dma_semaphore, #tpu.memory_space<semaphore_mem>>
CHECK: tpu.enqueue_dma source(%arg0 : {{.*}}) target(%{{.+}} : memref<8x128xf32, #tpu.memory_space<vmem>>)
CHECK: tpu.enqueue_dma source(%{{.+}} : memref<8x128xf32, #tpu.memory_space<vmem>>) target(%arg1 : {{.*}}) source_semaphore(%{{.+}}) target_semaphore(%{{.+}}) device_id(%{{.+}})
""",
    "via_helper": """
CHECK: func.func @via_helper(
CHECK: tpu.enqueue_dma {{.*}} source_semaphore(%{{.+}}) target_semaphore(%{{.+}}) device_id(%{{.+}})
CHECK: tpu.wait_dma2 {{.*}} device_id(%c0_i32) core_id(%c0_i32)
""",
    "to_itself": """
CHECK: tpu.sem_barrier
CHECK: tpu.sem_signal %{{.+}}, %c1_i32 device_id %{{.+}} :
CHECK: tpu.enqueue_dma {{.*}} source_semaphore(%arg2 : {{.*}}) device_id(%{{.+}})
""",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_remote_ops_emitted(name):
    filecheck(ours(name), CHECKS[name])


def test_wait_before_start_is_refused():
    """Mosaic's rules pair a remote copy's wait with its start in program order."""

    def kernel(x_ref, o_ref, send_sem, recv_sem):
        right = (lax.rem(lax.axis_index("x") + 1, 4),)
        copy = remote_copy(x_ref, o_ref, send_sem, recv_sem, right)
        copy.wait_recv()
        copy.start()
        copy.wait_send()

    with pytest.raises(MiniPallasError, match="comes before any start") as info:
        _module_text(lambda m: on_mesh(kernel, m), ((4,), ("x",)), (32, 128))
    assert info.value.op == "dma_wait" and "test_remote_dma.py" in str(info.value.loc)


def _plain(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0


def _traced(body):
    mesh = AbstractMesh((4,), ("x",))
    f = jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    return str(jax.make_jaxpr(on_tpu(f))(jax.ShapeDtypeStruct((32, 128), F32)))


def test_on_tpu_looks_inside_shard_map():
    """``on_tpu`` keeps the shard_map and runs its kernels as minipallas's modules (it raised
    ``KeyError: 'subfuns'``): one that spans devices as its device's program beside a plain one
    (both imported with the body), and plain ones in a ``cond`` of the body, a ``fori_loop``
    and a ``scan`` (the jaxprs they carry traced again) as any pallas_call."""
    double = pl.pallas_call(_plain, out_shape=jax.ShapeDtypeStruct((8, 128), F32))
    text = _traced(lambda x: remote_call(right_permute(4))(double(x)))
    assert "shard_map" in text and "pallas_call" not in text
    assert text.count("tpu_custom_call") == 2
    text = _traced(lambda x: lax.cond(x[0, 0] > 0, double, lambda v: v, double(x)))
    assert "shard_map" in text and "cond" in text and "pallas_call" not in text
    assert text.count("tpu_custom_call") == 2
    for loop in (lambda x: lax.fori_loop(0, 3, lambda i, v: double(v), x),
                 lambda x: lax.scan(lambda c, _: (double(c), None), x, None, length=2)[0]):  # fmt: skip
        text = str(jax.make_jaxpr(on_tpu(loop))(jax.ShapeDtypeStruct((8, 128), F32)))
        assert "pallas_call" not in text and text.count("tpu_custom_call") == 1


def test_a_remote_copy_into_another_devices_block_is_refused():
    """A block is the window Mosaic moves for one device: a remote copy into another device's
    block is refused by name with a fix (blocked kernels that copy into whole operands or
    scratch compile: tests/lowering/tpu/test_remote_blocks.py)."""
    call = pl.pallas_call(
        right_permute(4),
        out_shape=jax.ShapeDtypeStruct((16, 128), F32),
        grid=(2,),
        in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
        scratch_shapes=[DMA, DMA],
    )
    with pytest.raises(MiniPallasError, match="targets a ref with no row per device") as info:
        _traced(call)
    assert "scratch" in info.value.fix


# --- against upstream, and libtpu ahead of time --------------------------------------------


def _topology_mesh(name, topology="v5e:2x2"):
    from minipallas.lowering.runtime.libtpu import topology_devices

    shape, names = CASES[name][1]
    devices = np.array(topology_devices(topology)[: int(np.prod(shape))]).reshape(shape)
    return jax.sharding.Mesh(devices, names)


@needs_libtpu
@pytest.mark.parametrize("name", sorted(CASES))
def test_same_remote_ops_as_upstream(name):
    from minipallas.lowering.compat.jaxlib_shim import canonicalize, ir
    from minipallas.lowering.tpu.context import LoweringContext
    from minipallas.tools.difftest.mosaic import _capture

    mesh = _topology_mesh(name)
    make, _, x = CASES[name]
    spec = jax.ShapeDtypeStruct(x, F32, sharding=NamedSharding(mesh, P(*mesh.axis_names)))
    with _capture() as modules:
        jax.jit(make(mesh)).lower(spec)
    theirs = modules[0]
    canonicalize(theirs)
    ctx = LoweringContext((), {})
    with ctx.mlir:
        mine = ir.Module.parse(ours(name, mesh))
        canonicalize(mine)
        mine, theirs = remote_ops(mine), remote_ops(theirs)
    assert mine == theirs


def _config(lowered):
    """Each tpu_custom_call's backend config without the module, and its kernel metadata."""
    calls = re.findall(r"tpu_custom_call\(%\w+\) (.*)", lowered.as_text())
    return [re.sub(r"\\22body\\22: \\22[^\\]*\\22", "", c) for c in calls]


@needs_libtpu
@pytest.mark.parametrize("topology", ["v5e:2x2", "v6e:2x2", "v4:2x2x1"])
@pytest.mark.parametrize("name", ["right_permute", "shift_two_logical"])
def test_compiles_for_topology(name, topology):
    """minipallas's module and upstream's of the same kernel compile for a slice of several
    chips, under ``jax.jit`` of the shard_map, with the same custom-call config
    (``has_communication``, ``collective_id``, ``mesh_axes``)."""
    from minipallas.lowering.runtime.libtpu import topology_devices

    devices = topology_devices(topology)
    n = len(devices)
    kernel = right_permute(n) if name == "right_permute" else shift_two_logical(n)
    mesh = jax.sharding.Mesh(np.array(devices), ("x",))
    f = on_mesh(kernel, mesh, collective_id=0 if name != "right_permute" else None)
    x = jax.ShapeDtypeStruct((8 * n, 128), F32, sharding=NamedSharding(mesh, P("x")))
    theirs, mine = jax.jit(f).lower(x), jax.jit(on_tpu(f)).lower(x)
    assert _config(mine) == _config(theirs)
    assert "has_communication" in _config(mine)[0]
    mine.compile()
    theirs.compile()


@needs_libtpu
def test_the_chip_script_runs_ahead_of_time(tmp_path):
    """``bench/chip/tpu_remote.py --aot``: every kernel of the chip run compiles both ways for a
    v5e (bench/results/tpu_remote_v5e.txt is the chip's table)."""
    from bench.chip import tpu_remote

    out = tmp_path / "table.txt"
    assert tpu_remote.main(["--aot", "--out", str(out)]) == 0
    rows = [
        line for line in out.read_text().splitlines() if line.startswith("| ") and "---" not in line
    ][1:]
    assert len(rows) == len(tpu_remote.names())
    assert all(row.count("compiles (ahead of time)") == 2 for row in rows)


CORPUS = ("verification_ring_all_reduce", "dict_id_joint_axis_non_pow2", "shard_map_of_core_map",
          "ring_all_reduce_8", "all_gather_2d_2x4", "ring_attention", "token_ring",
          "shipped_all_gather_8", "guide_all_gather", "guide_reduce_scatter",
          "no_barrier_semaphore")  # fmt: skip


@needs_libtpu
def test_the_device_corpus_compiles_with_upstreams_remote_ops():
    """Kernels of the device corpus (2 to 8 devices, 1-D and 2-D meshes, fori_loop rings, dict
    and LOGICAL ids, a core_map inside the shard_map, the guide's gridded all-gather and
    reduce-scatter (whose waits are for copies started under other pl.when branches), upstream's
    shipped all-gather, a semaphore passed between kernels) compile both ways for a v5e slice of
    their size, with upstream's remote ops; the token ring names a collective_id it never uses, which
    jax refuses for upstream's module too: minipallas refuses it first, with a fix
    (bench/results/tpu_remote_corpus_aot.txt is the whole corpus)."""
    from bench.chip import tpu_remote
    from minipallas.tools.corpora.multi_device import CASES

    cases = [c for c in CASES if c.name in CORPUS]
    assert len(cases) >= 5, [c.name for c in cases]
    with tpu_remote._corpus_meshes():
        rows = {c.name: tpu_remote.corpus_row(c) for c in cases}
    for name, row in rows.items():
        if name == "token_ring":
            assert row[3].startswith("ValueError: collective_id has to be unspecified"), row
            assert row[4].startswith("MiniPallasError: 'pallas_call': collective_id has"), row
        else:
            assert row[3:] == ("compiles", "compiles", "same as upstream's"), row
