"""Chapter 12: running on a TPU: compile the Mosaic kernel with libtpu, then run it where a chip is.

A Mosaic module is checked twice before a chip ever sees it. The MLIR verifier checks its
types; libtpu's own compiler, the one that runs on a TPU machine, compiles it ahead of time
for a v5e chip on this CPU (``lowering/tpu/aot.py``, ``compile_check``): what Mosaic refuses
here it would refuse there. The tests compile every Mosaic module they emit this way.

On a machine with a TPU, the same ``pallas_call`` given JAX arrays runs as a
``tpu_custom_call`` holding our Mosaic module, as upstream's ``pallas_call`` does; under
``jax.jit`` it fuses with the code around it. Its bits are compared with minipallas's CPU
program (``make tpu-check`` does it for every suite kernel; docs/guides/tpu.md).
"""

import numpy as np

import minipallas as mp
import minipallas.numpy as jnp
from minipallas import tpu
from minipallas.lowering.runtime.libtpu import libtpu_available, tpu_chips


def scaled_sum(x_ref, o_ref, acc_ref):
    @mp.when(mp.program_id(1) == 0)
    def _():
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

    acc_ref[...] += x_ref[...] * 2.0

    @mp.when(mp.program_id(1) == mp.num_programs(1) - 1)
    def _():
        o_ref[...] = acc_ref[...]


X = mp.ArrayType((64, 512), jnp.float32)
KERNEL = mp.pallas_call(
    scaled_sum,
    mp.ArrayType((64, 128), jnp.float32),
    grid=(8, 4),
    in_specs=[mp.BlockSpec((8, 128), lambda i, k: (i, k))],
    out_specs=mp.BlockSpec((8, 128), lambda i, k: (i, 0)),
    scratch_shapes=[tpu.VMEM((8, 128), jnp.float32)],
)


def main() -> None:
    x = np.random.default_rng(0).standard_normal(X.shape, dtype=np.float32)
    on_cpu = KERNEL(x)
    expected = (x * 2).reshape(64, 4, 128).sum(axis=1)
    assert np.allclose(on_cpu, expected, rtol=1e-5, atol=1e-5)
    print(f"on the CPU: equals numpy: True; output {on_cpu.shape}")

    if libtpu_available():
        from minipallas.lowering.tpu.aot import compile_check

        compiled = compile_check(KERNEL.trace(X, memory_space=tpu.VMEM))
        print(f"libtpu compiled the Mosaic kernel for a v5e, ahead of time: {compiled is not None}")
    else:
        print("libtpu is not installed: pip install -e '.[test]' brings the compiler")

    if tpu_chips():
        import jax

        on_tpu = np.asarray(jax.jit(KERNEL)(jax.device_put(x, jax.devices("tpu")[0])))
        close = np.allclose(on_tpu, on_cpu, rtol=1e-4, atol=1e-5)
        print(f"on the TPU ({jax.devices('tpu')[0].device_kind}): equals the CPU: {close}")
        assert close
    else:
        print("no TPU chip here: on a TPU machine, jax.jit(KERNEL)(x) runs the Mosaic kernel")


if __name__ == "__main__":
    main()
