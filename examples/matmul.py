"""Kernels, chapter 1: a blocked matmul with an accumulator.

``out = x @ y`` cut into (bm, bn) output blocks; the grid's third axis walks the contraction
dimension in steps of bk. Each grid point multiplies one (bm, bk) block of x by one (bk, bn)
block of y and adds it into a float32 scratch accumulator, which persists from one grid
point to the next; the last step along k writes it out. This is the kernel of the Pallas
matmul tutorial, run here by minipallas on the CPU and emitted for TPU.
"""

import importlib.util

import numpy as np

import minipallas as mp
import minipallas.numpy as jnp
from minipallas import tpu

M, N, K = 256, 256, 512
BM, BN, BK = 128, 128, 128


def matmul_kernel(x_ref, y_ref, o_ref, acc_ref):
    @mp.when(mp.program_id(2) == 0)
    def _():
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

    @mp.when(mp.program_id(2) == mp.num_programs(2) - 1)
    def _():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def matmul(x_type: mp.ArrayType, y_type: mp.ArrayType):
    return mp.pallas_call(
        matmul_kernel,
        mp.ArrayType((x_type.shape[0], y_type.shape[1]), x_type.dtype),
        grid=(x_type.shape[0] // BM, y_type.shape[1] // BN, x_type.shape[1] // BK),
        in_specs=[
            mp.BlockSpec((BM, BK), lambda i, j, k: (i, k)),
            mp.BlockSpec((BK, BN), lambda i, j, k: (k, j)),
        ],
        out_specs=mp.BlockSpec((BM, BN), lambda i, j, k: (i, j)),
        scratch_shapes=[tpu.VMEM((BM, BN), jnp.float32)],
        dimension_semantics=("parallel", "parallel", "arbitrary"),
    )


def chapter(title: str) -> None:
    print(f"\n== {title} " + "=" * (72 - len(title)))


def main() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((M, K), dtype=np.float32)
    y = rng.standard_normal((K, N), dtype=np.float32)
    call = matmul(mp.ArrayType(x.shape, "float32"), mp.ArrayType(y.shape, "float32"))

    chapter("1. The kernel: a body over block refs, a grid, block specs")
    kernel = call.trace(x, y)
    print(f"grid {kernel.grid}, scratch {[str(t) for t in kernel.scratch_types]}")
    for what, spec in [("x", kernel.in_specs[0]), ("y", kernel.in_specs[1])]:
        print(f"{what}: {spec.array} in blocks {spec.ref_type}; index map:")
        print(spec.index_map)
    print(kernel.body)

    chapter("2. Run it on the CPU: the grid becomes loops, XLA runs them")
    out = call(x, y)
    expected = x.astype(np.float64) @ y.astype(np.float64)
    error = np.abs(out - expected).max() / np.abs(expected).max()
    assert error < 1e-5, error
    print(f"out {out.shape} {out.dtype} matches numpy's x @ y (max relative error {error:.1e})")

    chapter("3. The CPU program, after discharge: loops over whole arrays")
    lowered = call.lower(x, y, target="stablehlo")
    print(f"{mp.count_ops(lowered.function)} ops; the StableHLO module has "
          f"{str(lowered).count('stablehlo.while')} while loops")  # fmt: skip

    chapter("4. The same kernel emitted for TPU (Mosaic)")
    if importlib.util.find_spec("minipallas.lowering.tpu") is None:
        print("the TPU emitter (minipallas.lowering.tpu) is not part of this checkout yet")
    else:
        print(call.lower(x, y, target="tpu"))


if __name__ == "__main__":
    main()
