"""One of the two processes of ``test_device_processes.py``: jax's distributed runtime over two
processes on this machine, 2 CPU devices each, JAX's CPU collectives over gloo; compiled
kernels (``mp.on_devices``: ring all-reduce and all-gather, an all-to-all, lax collectives
around a kernel) run across the 4 global devices, and this process checks the shards it holds
against numpy, bit for bit. Prints one JSON line per shard.

Run as ``python tests/kernels/device_process_worker.py PROCESS_ID PORT``.
"""

import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
os.environ["JAX_PLATFORMS"] = "cpu"

import json  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402

jax.config.update("jax_cpu_collectives_implementation", "gloo")
PROCESS, PORT = int(sys.argv[1]), int(sys.argv[2])
jax.distributed.initialize(coordinator_address=f"localhost:{PORT}", num_processes=2,
                           process_id=PROCESS)  # fmt: skip

import device_compile_cases as cases  # noqa: E402  (its kernels span the 4 global devices)

import minipallas as mp  # noqa: E402


def run(name: str, f, x: np.ndarray, want: np.ndarray, spec) -> None:
    """``f`` compiled on the global array ``x``; each shard this process holds against numpy."""
    mesh = jax.sharding.Mesh(np.array(jax.devices()[: cases.N]), ("x",))  # on_mesh's devices
    sharding = jax.sharding.NamedSharding(mesh, spec)
    gx = jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])
    out = jax.jit(mp.on_devices(f))(gx)
    for shard in out.addressable_shards:
        got = np.asarray(shard.data)
        print(json.dumps({"case": name, "process": PROCESS, "device": shard.device.id,
                          "index": str(shard.index),
                          "ok": bool(np.array_equal(got.view(np.uint32),
                                                    want[shard.index].view(np.uint32)))}),
              flush=True)  # fmt: skip


CASES = ("ring_all_reduce", "ring_all_gather", "all_to_all", "lax_around")


def main() -> None:
    assert len(jax.devices()) == 4 and len(jax.local_devices()) == 2
    for name, f, x, want in cases.cases():  # built over the 4 global devices
        if name in CASES:
            run(name, f, x, want, cases.P("x"))
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
