"""Kernels that span devices on the chip, past whole shards (issue 47, item 5): a grid over
blocks smaller than the device's shard, and a semaphore one kernel makes and another signals.

Each is compiled ahead of time by libtpu for the multi-chip slices libtpu 0.0.42 describes
(``v5e:2x2``, ``v6e:2x2``, ``v4:2x2x1``), beside upstream's lowering of the same ``shard_map``:
the modules have the same remote ops (``bench.chip.tpu_remote.remote_ops``), the same grid,
windows and dimension semantics, and the custom calls the same config. The kernels are the
chip run's (``bench/chip/tpu_remote.py``, ``BODIES``), over 4 devices here.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.chip.tpu_remote import BODIES, remote_ops
from minipallas.lowering.runtime.libtpu import libtpu_available
from minipallas.platforms.devices_tpu import device_module, equations, spans_devices
from minipallas.platforms.mesh_tpu import on_tpu

pytestmark = pytest.mark.skipif(not libtpu_available(), reason="libtpu is not installed")
TOPOLOGIES = ["v5e:2x2", "v6e:2x2", "v4:2x2x1"]
WINDOW = ("dimension_semantics", "iteration_bounds", "window_params", "scratch_operands",
          "scalar_prefetch")  # fmt: skip


def _case(name, topology):
    """The case's shard_map over the slice's 4 devices, and its global input."""
    from minipallas.lowering.runtime.libtpu import topology_devices

    devices = topology_devices(topology)
    mesh = jax.sharding.Mesh(np.array(devices), ("x",))
    body, shape = BODIES[name]
    f = jax.shard_map(body(len(devices)), mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                      check_vma=False)  # fmt: skip
    spec = (shape[0] * len(devices), *shape[1:])
    return f, jax.ShapeDtypeStruct(spec, jnp.float32, sharding=NamedSharding(mesh, P("x")))


def _ours(f, x):
    """Our modules of the shard_map's kernels that span devices, in order."""
    (eqn,) = [e for e in jax.make_jaxpr(f)(x).jaxpr.eqns if e.primitive.name == "shard_map"]
    calls = [c for c in equations(eqn.params["jaxpr"])
             if c.primitive.name == "pallas_call" and spans_devices(c)]  # fmt: skip
    return [device_module(c, eqn.params["mesh"])[1].module for c in calls]


def _kernel_attrs(module):
    """The kernel function's grid, windows and semantics, as text."""
    fn = next(op for op in module.body.operations if "window_params" in op.attributes
              or "dimension_semantics" in op.attributes)  # fmt: skip
    return {k: str(fn.attributes[k]) for k in WINDOW if k in fn.attributes}


def _config(lowered):
    """Each tpu_custom_call's backend config without the module, and its kernel metadata."""
    calls = re.findall(r"tpu_custom_call\(.*?\) (.*)", lowered.as_text())
    return [re.sub(r"\\22body\\22: \\22[^\\]*\\22", "", c) for c in calls]


@pytest.mark.parametrize("name", sorted(BODIES))
def test_same_module_shape_as_upstream(name):
    """Op for op where it counts: each kernel's remote ops, grid, windows, semantics."""
    from minipallas.lowering.compat.jaxlib_shim import canonicalize
    from minipallas.tools.difftest.mosaic import _capture

    f, x = _case(name, "v5e:2x2")
    with _capture() as theirs:
        jax.jit(f).lower(x)
    mine = _ours(f, x)
    assert len(mine) == len(theirs) == (2 if name == "semaphore_between_kernels" else 1)
    for m in (*mine, *theirs):
        canonicalize(m)
    assert [remote_ops(m) for m in mine] == [remote_ops(m) for m in theirs]
    assert [_kernel_attrs(m) for m in mine] == [_kernel_attrs(m) for m in theirs]


def test_the_blocked_kernel_is_windowed():
    """The blocked input and output are (8, 128) windows Mosaic moves over a grid of 2; the
    remote copy goes from the input's window to the ANY output's rows of the step."""
    f, x = _case("blocked_to_itself", "v5e:2x2")
    (text,) = [str(m) for m in _ours(f, x)]
    assert "iteration_bounds = array<i64: 2>" in text
    assert text.count("window_bounds = array<i64: 8, 128>") == 2
    assert re.search(r"tpu.enqueue_dma source\(%arg1 : memref<8x128xf32, #tpu.memory_space"
                     r"<vmem>>\) target\(%\d+ : memref<8x128xf32, #tpu.memory_space<any>>\)"
                     r".*device_id", text)  # fmt: skip


def test_the_semaphore_is_passed_in_semaphore_memory():
    """The first kernel's result and the second's operand are one semaphore, an int32 word
    in semaphore memory in the custom calls (``output_memory_space_colors``), as upstream's."""
    f, x = _case("semaphore_between_kernels", "v5e:2x2")
    make, use = [str(m) for m in _ours(f, x)]
    assert re.search(r"func.func @make\(%arg0: memref<!tpu.semaphore, #tpu.memory_space"
                     r"<semaphore_mem>>\)", make)  # fmt: skip
    assert "tpu.sem_barrier" in make and "tpu.sem_barrier" not in use
    assert "%arg1: memref<!tpu.semaphore, #tpu.memory_space<semaphore_mem>>" in use
    mine = _config(jax.jit(on_tpu(f)).lower(x))
    assert mine == _config(jax.jit(f).lower(x))
    assert "output_memory_space_colors" in mine[0]


@pytest.mark.parametrize("topology", TOPOLOGIES)
@pytest.mark.parametrize("name", sorted(BODIES))
def test_compiles_for_topology(name, topology):
    """Both sides compile for the slice, with the same custom-call configs."""
    f, x = _case(name, topology)
    theirs, mine = jax.jit(f).lower(x), jax.jit(on_tpu(f)).lower(x)
    assert _config(mine) == _config(theirs)
    mine.compile()
    theirs.compile()


@pytest.mark.parametrize("chip", ["v6e", "v4"])
def test_corpus_kernels_on_other_chips(chip):
    """Corpus kernels with a grid (the guide's all-gather and reduce-scatter, whose waits are
    for copies started under other branches) and the semaphore passed between kernels compile
    for v6e and v4 slices with upstream's remote ops (bench/results/tpu_remote_corpus_aot.txt:
    the whole corpus on each chip), and the summary counts them."""
    from bench.chip import tpu_remote
    from minipallas.tools.corpora.multi_device import CASES

    wanted = ("guide_all_gather", "guide_reduce_scatter", "no_barrier_semaphore")
    with tpu_remote._corpus_meshes(chip):
        rows = [tpu_remote.corpus_row(c, chip) for c in CASES if c.name in wanted]
    assert [r[3:] for r in rows] == [("compiles", "compiles", "same as upstream's")] * 3
    assert tpu_remote.summary(chip, rows).endswith("both 3; 3 with upstream's remote ops op for op")


def _signal_right(*refs):
    """Signals the right neighbour's semaphore (the last ref), waits for the left's signal,
    copies the block of x to o."""
    from jax import lax
    from jax.experimental import pallas as pl

    x_ref, o_ref, sem = refs[-3:]
    pl.semaphore_signal(sem, device_id=(lax.rem(lax.axis_index("x") + 1, 4),))
    pl.semaphore_wait(sem)
    o_ref[...] = x_ref[...]


def _on_slice(call):
    """``call`` in a shard_map over a v5e:2x2 slice, and its global input."""
    from minipallas.lowering.runtime.libtpu import topology_devices

    mesh = jax.sharding.Mesh(np.array(topology_devices("v5e:2x2")), ("x",))
    f = jax.shard_map(call, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    return f, jax.ShapeDtypeStruct((64, 128), jnp.float32, sharding=NamedSharding(mesh, P("x")))


def test_given_dimension_semantics_are_upstreams():
    """A grid's ``dimension_semantics`` from the compiler params reach the module, as
    upstream's (its default, ``arbitrary``, is the blocked kernel's above)."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    from minipallas.tools.difftest.mosaic import _capture

    block = pl.BlockSpec((8, 128), lambda i: (i, 0))
    call = pl.pallas_call(
        _signal_right,
        out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32),
        grid=(2,),
        in_specs=[block],
        out_specs=block,
        scratch_shapes=[pltpu.SemaphoreType.REGULAR],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )
    f, x = _on_slice(call)
    with _capture() as theirs:
        jax.jit(f).lower(x)
    (mine,) = _ours(f, x)
    assert _kernel_attrs(mine) == _kernel_attrs(theirs[0])
    assert "parallel" in _kernel_attrs(mine)["dimension_semantics"]


def test_scalar_prefetch_reaches_the_index_map():
    """The prefetched order is the kernel's first operand after the grid index, an SMEM memref,
    and the input window's ``transform_0`` reads it (``blocked_by_prefetch``; its module's shape
    is upstream's: ``test_same_module_shape_as_upstream``)."""
    f, x = _case("blocked_by_prefetch", "v5e:2x2")
    (text,) = [str(m) for m in _ours(f, x)]
    assert re.search(r"func.func @kernel\(%arg0: i32, %arg1: memref<2xi32, #tpu.memory_space"
                     r"<smem>>", text)  # fmt: skip
    assert "scalar_prefetch = 1" in text
    transform = text[text.index("func.func @transform_0") :]
    assert "memref.load %arg1" in transform.split("return")[0]


def test_an_aliased_output_is_its_input():
    """``input_output_aliases``: the output does not start as a copy of the input (one buffer on
    the chip, as XLA aliases them); the custom call aliases them as upstream's."""
    f, x = _case("aliased_increment", "v5e:2x2")
    (text,) = [str(m) for m in _ours(f, x)]
    assert text.count("tpu.enqueue_dma") == 2  # the load into VMEM, the remote copy
    assert "vector.load %arg0" not in text and "vector.load %arg1" not in text
    (config,) = _config(jax.jit(on_tpu(f)).lower(x))
    assert "output_operand_aliases" in config and "operand_index = 0" in config


def test_a_semaphore_with_aliases_is_refused_at_its_line():
    """A kernel that takes a semaphore and aliases an output is refused with its line and a
    fix (the semaphore's move into scratch would shift the aliases)."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    from minipallas.ir.errors import MiniPallasError

    def make(_):
        pass

    def use(x_ref, sem_ref, o_ref):
        pl.semaphore_signal(sem_ref, device_id=0)
        pl.semaphore_wait(sem_ref)
        o_ref[...] = x_ref[...] + 1

    def body(x):
        sem = pl.pallas_call(make, out_specs=pl.BlockSpec(memory_space=pltpu.SEMAPHORE),
                             out_shape=pltpu.SemaphoreType.REGULAR(()))()  # fmt: skip
        vmem = pl.BlockSpec(memory_space=pltpu.VMEM)
        return pl.pallas_call(use, in_specs=[vmem, pl.BlockSpec(memory_space=pltpu.SEMAPHORE)],
                              out_specs=vmem, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              input_output_aliases={0: 0})(x, sem)  # fmt: skip

    f, x = _on_slice(body)
    with pytest.raises(MiniPallasError, match="without input_output_aliases") as info:
        _ours(f, x)
    assert "test_remote_blocks.py" in str(info.value.loc) and info.value.fix
