"""Mesh kernels of cores (``pl.kernel``, ``pl.core_map``) in a shard_map over 4 devices (issue 47
item 1, ``interop/importer/rules/devices_cores.py``): cases that ``device_mesh_cases.py`` runs in
its process of 4 CPU devices, each ``(name, case)`` as there.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from device_cases import mesh_of
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P

from minipallas.lowering.compat.jax_private import pallas_tpu_interpret

N = 4
MESH = pl.DeviceIdType.MESH
DMA, REGULAR = pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.REGULAR
F32 = jnp.float32


def _shard_map(body, out_specs=None):
    out_specs = P("x") if out_specs is None else out_specs
    return jax.shard_map(body, mesh=mesh_of((N,)), in_specs=P("x"), out_specs=out_specs,
                         check_vma=False)  # fmt: skip


CORES = pltpu.create_tensorcore_mesh("core", num_cores=2)


def _halves_kernel(core_barrier: bool):
    """Each core sends its half of the shard to the right neighbour's output (the same half),
    waits for its own half to land, meets the other core at a core barrier, then writes the
    other core's half plus one (through its VMEM: HBM is copied, not read): without the
    barrier, a read of a half still in flight."""

    def kernel(x_ref, o_ref, p_ref):
        core = lax.axis_index("core")
        right = lax.rem(lax.axis_index("x") + 1, N)
        half, other = pl.ds(core * 4, 4), pl.ds((1 - core) * 4, 4)

        def body(send, recv, sync, local, vmem):
            copy = pltpu.make_async_remote_copy(x_ref.at[half], o_ref.at[half], send, recv,
                                                device_id=(right,),
                                                device_id_type=MESH)  # fmt: skip
            copy.start()
            copy.wait()
            if core_barrier:
                pltpu.core_barrier(sync, core_axis_name="core")
            pltpu.async_copy(o_ref.at[other], vmem, local).wait()
            vmem[...] = vmem[...] + 1.0
            pltpu.async_copy(vmem, p_ref.at[half], local).wait()

        pl.run_scoped(body, DMA, DMA, REGULAR, DMA, pltpu.VMEM((4, 128), F32))

    return kernel


def core_halves(core_barrier: bool, **kernel_params):
    """A 2-core pl.kernel on every device, a psum among the devices after it."""

    def body(x):
        out = jax.ShapeDtypeStruct((8, 128), F32)
        kernel = pl.kernel(_halves_kernel(core_barrier), out_type=(out, out), mesh=CORES,
                           **kernel_params)  # fmt: skip
        o, p = kernel(x)
        return o, p * 2.0 + lax.psum(x, "x")

    return _shard_map(body, out_specs=(P("x"), P("x")))


def _core_halves_reference(shards):
    o = np.roll(shards, 1, axis=0)
    swapped = np.concatenate([o[:, 4:], o[:, :4]], axis=1)
    p = (swapped + 1.0) * 2.0 + shards.sum(axis=0)
    return o.reshape(-1, 128), p.reshape(-1, 128)


def swap_through_shared(x_ref, o_ref, shared, sem, sync):
    """Each core copies its half of the shard into the device's VMEM_SHARED scratch, signals
    the other core (a device_id dict naming the core axis: that core of this device), waits
    for its signal, and copies the other core's half out: VMEM_SHARED has a row per device."""
    core = lax.axis_index("core")
    half, other = pl.ds(core * 4, 4), pl.ds((1 - core) * 4, 4)
    pltpu.async_copy(x_ref.at[half], shared.at[half], sem).wait()
    pl.semaphore_signal(sync, 1, device_id={"core": 1 - core})
    pl.semaphore_wait(sync, 1)
    pltpu.async_copy(shared.at[other], o_ref.at[half], sem).wait()


def shared_scratch(x):
    scratch = [pltpu.VMEM_SHARED((8, 128), F32), DMA, REGULAR]
    kernel = pl.kernel(swap_through_shared, out_type=jax.ShapeDtypeStruct((8, 128), F32),
                       mesh=CORES, scratch_types=scratch)  # fmt: skip
    return kernel(x) + lax.axis_index("x").astype(F32)


@functools.cache
def _upstream_core_halves(core_barrier: bool):
    """Upstream's TPU interpret mode on the same kernel, its race detection on: its results,
    and whether it found a race (the model's check: which rows a remote copy reaches)."""
    params = pltpu.InterpretParams(detect_races=True)
    x = np.arange(N * 8 * 128, dtype=np.float32).reshape(N * 8, 128)
    outs = jax.jit(core_halves(core_barrier, interpret=params))(x)
    return tuple(np.asarray(o) for o in outs), bool(pallas_tpu_interpret.races.races_found)


def _upstream_core_map_cases():
    """Upstream's test_shard_map_of_core_map (the corpus's case: 2 devices of 2 cores, a
    core_map inside run_state), and the same kernel on 4 devices of one core."""
    from minipallas.tools.corpora.multi_device import upstream_head

    case = next(c for c in upstream_head.cases() if c.name == "shard_map_of_core_map")
    (x,) = case.inputs()
    yield "upstream_shard_map_of_core_map", case.build(), x, case.reference(x)
    x = np.arange(N * 16 * 128, dtype=np.float32).reshape(N * 16, 128)
    yield (
        "core_map_one_core",
        upstream_head._core_map(N, 1)(),
        x,
        upstream_head._plus_positions(x, N, 1),
    )


def doubled_halves(x_ref, o_ref, vmem, sem):
    """Each core doubles its half of the shard (through its VMEM) and adds its number."""
    core = lax.axis_index("core")
    half = pl.ds(core * 4, 4)
    pltpu.async_copy(x_ref.at[half], vmem, sem).wait()
    vmem[...] = vmem[...] * 2.0 + core.astype(F32)
    pltpu.async_copy(vmem, o_ref.at[half], sem).wait()


def _around(permute):
    """``permute`` (a pallas_call of remote copies) before and after a 2-core kernel, one of
    its results a shard_map result, the other's only used in the body."""

    def body(x):
        scratch = [pltpu.VMEM((4, 128), F32), DMA]
        out = jax.ShapeDtypeStruct((8, 128), F32)
        y = permute(x + 1.0)
        z = pl.kernel(doubled_halves, out_type=out, mesh=CORES, scratch_types=scratch)(y)
        return permute(z), z + 0.0 * y

    return _shard_map(body, out_specs=(P("x"), P("x")))


def _around_reference(shards):
    y = np.roll(shards + 1.0, 1, axis=0)
    z = y * 2.0 + np.repeat(np.arange(2, dtype=np.float32), 4)[None, :, None]
    return np.roll(z, 1, axis=0).reshape(-1, 128), z.reshape(-1, 128)


def cases(run, permute):
    """``run(fn, x, schedule)``: ``fn`` imported and simulated (``device_mesh_cases._run``);
    ``permute``: a pallas_call sending each (8, 128) shard to the right neighbour."""
    x = np.arange(N * 8 * 128, dtype=np.float32).reshape(N * 8, 128)
    shards = x.reshape(N, 8, 128)
    for name, f, a, want in _upstream_core_map_cases():
        yield name, lambda s, f=f, a=a, want=want: (run(f, a, s), want)
    halves, halved = core_halves(True), _core_halves_reference(shards)
    yield "core_kernel_remote_halves", lambda s: (run(halves, x, s), halved)
    unsynced = core_halves(False)
    yield "core_kernel_without_core_barrier", lambda s: (run(unsynced, x, s), None)
    swapped = np.concatenate([shards[:, 4:], shards[:, :4]], axis=1)
    swapped += np.arange(N, dtype=np.float32)[:, None, None]
    shared = _shard_map(shared_scratch)
    yield "core_kernel_vmem_shared", lambda s: (run(shared, x, s), swapped.reshape(x.shape))
    yield "upstream_interpret_core_halves", lambda s: (_upstream_core_halves(True)[0], halved)
    yield "upstream_interpret_core_halves_race", lambda s: (_upstream_core_halves(False)[1], True)
    around = _around(permute)
    yield "pallas_calls_around_a_core_kernel", lambda s: (run(around, x, s),
                                                          _around_reference(shards))  # fmt: skip
