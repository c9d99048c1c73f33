"""Chapter 16: JAX interop: the same pallas_call under jax.jit and shard_map on 4 devices.

A minipallas call given JAX arrays runs as JAX ops, so scaling it out is JAX's engine, not
minipallas's: ``shard_map`` runs the kernel on each device's rows, and ``jax.jit`` of the call
on a sharded array lets XLA's partitioner place the program. Four CPU devices stand in for
four accelerators (``--xla_force_host_platform_device_count=4``, set before jax is imported).
"""

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
)
os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the CPU devices, even where libtpu is installed

import jax  # noqa: E402  (after XLA_FLAGS: the device count is read at import)
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec  # noqa: E402

import minipallas as mp  # noqa: E402
import minipallas.numpy as mnp  # noqa: E402

ROWS, COLS, BLOCK_ROWS = 256, 128, 16


def softmax_kernel(x_ref, o_ref):
    x = x_ref[...]
    e = mnp.exp(x - x.max(axis=1, keepdims=True))
    o_ref[...] = e / e.sum(axis=1, keepdims=True)


def softmax_call(rows: int):
    """The row softmax over ``rows`` rows, one grid point per block of rows."""
    spec = mp.BlockSpec((BLOCK_ROWS, COLS), lambda i: (i, 0))
    return mp.pallas_call(
        softmax_kernel,
        mp.ArrayType((rows, COLS), mnp.float32),
        grid=(rows // BLOCK_ROWS,),
        in_specs=[spec],
        out_specs=spec,
    )


def chapter(title: str) -> None:
    print(f"\n== {title} " + "=" * (72 - len(title)))


def main() -> None:
    devices = jax.devices()
    assert len(devices) == 4, devices
    # Auto axes: XLA's partitioner places every intermediate (Explicit axes would make each
    # jax.lax op check its operands' shardings, which the grid's block updates do not carry)
    mesh = jax.make_mesh((4,), ("rows",), axis_types=(jax.sharding.AxisType.Auto,))
    rows = PartitionSpec("rows")
    x = np.random.default_rng(0).standard_normal((ROWS, COLS), dtype=np.float32) * 4
    eager = softmax_call(ROWS)(x)  # numpy in, numpy out: one XLA program on one device
    placed = jax.device_put(x, NamedSharding(mesh, rows))  # 64 rows on each device

    chapter("0. Both ways: a jaxpr imported, a minipallas function exported")
    jaxpr = jax.make_jaxpr(lambda a: jax.numpy.tanh(a) * 2)(np.zeros(4, np.float32))
    imported = mp.from_jaxpr(jaxpr)  # upstream's program as minipallas IR
    print(imported)
    v = np.linspace(-2, 2, 4, dtype=np.float32)
    (ours,) = mp.interpret(imported, v)
    print(f"the interpreter on the imported jaxpr equals jax: {np.allclose(ours, np.tanh(v) * 2)}")
    exported = mp.to_jax(imported)  # minipallas's program as a JAX function: jit, grad, vmap
    slope = jax.grad(lambda a: exported(a)[0].sum())(jax.numpy.zeros(4))
    print(f"jax.grad through the exported function at 0: {np.asarray(slope).tolist()}")
    assert np.allclose(slope, 2.0)

    chapter("1. shard_map: each device runs the kernel on its 64 rows")
    local = softmax_call(ROWS // 4)
    # check_vma=False: the grid loop's carries start as fresh (device-invariant) buffers and
    # become per-device values; minipallas does not annotate them with jax.lax.pcast
    sharded = jax.jit(
        jax.shard_map(local, mesh=mesh, in_specs=rows, out_specs=rows, check_vma=False)
    )
    out = sharded(placed)
    print(f"{len(devices)} devices: {[d.id for d in devices]}")
    print(
        f"output sharding: {out.sharding.spec}, per device {out.addressable_shards[0].data.shape}"
    )
    same = np.array_equal(np.asarray(out), eager)
    print(f"equals the eager call on all {ROWS} rows, bit for bit: {same}")
    assert same

    # the grid loop writes blocks into the whole output, so XLA's partitioner gathers it: the
    # result comes back replicated (shard_map, above, is the way to keep it per device)
    chapter("2. jax.jit on a sharded array: XLA partitions the whole-array kernel")
    out = jax.jit(lambda x: softmax_call(ROWS)(x) * 2)(placed)
    print(f"input sharding: {placed.sharding.spec}; output sharding: {out.sharding.spec}")
    same = np.array_equal(np.asarray(out), eager * 2)
    print(f"equals the eager call (times 2), bit for bit: {same}")
    assert same


if __name__ == "__main__":
    main()
