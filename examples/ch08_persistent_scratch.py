"""Chapter 8: persistent scratch: a blocked matmul whose accumulator outlives a grid point.

``out = x @ y`` cut into (bm, bn) output blocks; the grid's third axis walks the contraction
dimension in steps of bk. Each grid point multiplies one (bm, bk) block of x by one (bk, bn)
block of y and adds it into a float32 scratch accumulator, which persists from one grid
point to the next; the last step along k writes it out. This is the kernel of the Pallas
matmul tutorial, run here by minipallas on the CPU and emitted for TPU.

Scratch given in ``scratch_shapes`` persists across the grid (unlike ``run_scoped`` scratch,
which lives for one body): so the grid points along k depend on one another through it and
run in order, while those along i and j, which share nothing, need not. The CPU program shows
it: i and j are batched (whole vectors of indices at once), k is a loop that carries the
accumulator, and the dot, which reads no scratch, is hoisted out of the loop (the pass
``hoist-invariant``; ``call.lower(x, y, after_each=hook)`` hands ``hook`` each stage by name).
What is left of a k-step is adds, and there are only four steps: so the loop is unrolled, its
steps traced one after another (``kernels/programs/unrolling.py``), and XLA fuses the adds.
"""

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
    call = matmul(mp.ArrayType(x.shape, jnp.float32), mp.ArrayType(y.shape, jnp.float32))

    chapter("1. The kernel: a body over block refs, a grid, block specs")
    kernel = call.trace(x, y)
    print(f"grid {kernel.grid}, scratch {[str(t) for t in kernel.scratch_types]}")
    for what, spec in [("x", kernel.in_specs[0]), ("y", kernel.in_specs[1])]:
        print(f"{what}: {spec.array} in blocks {spec.ref_type}; index map:")
        print(spec.index_map)
    print(kernel.body)

    chapter("2. Run it on the CPU: XLA runs the CPU program built from the kernel")
    out = call(x, y)
    expected = x.astype(np.float64) @ y.astype(np.float64)
    error = np.abs(out - expected).max() / np.abs(expected).max()
    assert error < 1e-5, error
    print(f"out {out.shape} {out.dtype} matches numpy's x @ y (max relative error {error:.1e})")

    chapter("3. The CPU program: i and j batched, the dots hoisted, the k steps in order")
    program = call.program(x, y)
    print(program)
    text = str(program)
    pre = text.split("func @matmul_kernel_pre_batched")[1].split("\n}")[0]
    steps = text.count("call @matmul_kernel_post_batched")
    assert " = for " not in text and "iota" in text and " dot " in pre and steps == K // BK
    print("i and j arrive as iota vectors (batched); the dots of every k step are one batched")
    print(f"call before them; the {steps} k steps, adds into the accumulator, are unrolled")

    chapter("4. The same kernel emitted for TPU (Mosaic), without locations")
    print(call.lower(x, y, target="tpu").as_text(debug_info=False))


if __name__ == "__main__":
    main()
