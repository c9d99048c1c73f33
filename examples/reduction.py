"""Kernels, chapter 3: a reduction accumulated across the grid.

Row sums of a wide matrix: grid axis 0 picks a block of rows, axis 1 walks the columns. The
output block (rows, 1) is the same for every step along axis 1, so it stays resident and
accumulates: zeroed at the first column block, added to at each. That revisiting is what
makes axis 1 sequential ("arbitrary") while axis 0 may run in parallel. The matrix is not a
whole number of column blocks; the kernel masks the padding of the last one with an iota.
"""

import importlib.util

import numpy as np

import minipallas as mp
import minipallas.numpy as jnp

ROWS, COLS = 64, 1000
BR, BC = 16, 256


def row_sum_kernel(x_ref, o_ref):
    @mp.when(mp.program_id(1) == 0)
    def _():
        o_ref[...] = jnp.zeros(o_ref.shape, jnp.float32)

    cols = jnp.broadcasted_iota(jnp.int32, x_ref.shape, 1) + mp.program_id(1) * BC
    x = jnp.where(cols < COLS, x_ref[...], 0.0)  # the last block reads past the array
    o_ref[...] += x.sum(axis=1, keepdims=True)


def chapter(title: str) -> None:
    print(f"\n== {title} " + "=" * (72 - len(title)))


def main() -> None:
    x = np.random.default_rng(0).standard_normal((ROWS, COLS), dtype=np.float32)
    call = mp.pallas_call(
        row_sum_kernel,
        mp.ArrayType((ROWS, 1), "float32"),
        grid=(ROWS // BR, -(-COLS // BC)),
        in_specs=[mp.BlockSpec((BR, BC), lambda i, j: (i, j))],
        out_specs=mp.BlockSpec((BR, 1), lambda i, j: (i, 0)),
    )

    chapter("1. The kernel and the index map of its resident output")
    kernel = call.trace(x)
    print(kernel.body)
    print(kernel.out_specs[0].index_map)

    chapter("2. Run on the CPU, check against numpy")
    out = call(x)
    expected = x.astype(np.float64).sum(axis=1, keepdims=True)
    assert np.abs(out - expected).max() < 1e-3
    print(f"grid {call.grid}: row sums match numpy: True")

    chapter("3. The same kernel emitted for TPU (Mosaic)")
    if importlib.util.find_spec("minipallas.lowering.tpu") is None:
        print("the TPU emitter (minipallas.lowering.tpu) is not part of this checkout yet")
    else:
        print(call.lower(x, target="tpu"))


if __name__ == "__main__":
    main()
