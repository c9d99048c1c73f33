"""Chapter 10: partial blocks: a row-wise softmax over rows that are not a whole number of blocks.

Each grid point owns a block of whole rows, so the max and the sum of a row never leave the
kernel: one read of the block, a numerically stable exp, one write. Rows past the end of the
array (the last block is partial) are padding that upstream Pallas fills with NaN; their
results are computed and then dropped, exactly as upstream's interpret mode does.

The CPU program shows how: the input is padded with NaN up to whole blocks
(``dynamic_update_slice`` into a NaN array), every block is computed, and the output is cut
back to the array's rows (a ``slice``). It is printed as XLA gets it (``call.lower(x)``: the
StableHLO target's discharge and cleanup run on the program ``call.program(x)`` builds, which
drop what the builder made and nothing read). Chapter 9's kernel masks its partial column block
itself, with an iota, because a sum over padding would not be dropped.
"""

import numpy as np

import minipallas as mp
import minipallas.numpy as jnp

ROWS, COLS, BLOCK_ROWS = 100, 256, 16


def softmax_kernel(x_ref, o_ref):
    x = x_ref[...]
    e = jnp.exp(x - x.max(axis=1, keepdims=True))
    o_ref[...] = e / e.sum(axis=1, keepdims=True)


def chapter(title: str) -> None:
    print(f"\n== {title} " + "=" * (72 - len(title)))


def main() -> None:
    x = np.random.default_rng(0).standard_normal((ROWS, COLS), dtype=np.float32) * 4
    spec = mp.BlockSpec((BLOCK_ROWS, COLS), lambda i: (i, 0))
    call = mp.pallas_call(
        softmax_kernel,
        mp.ArrayType(x.shape, jnp.float32),
        grid=(-(-ROWS // BLOCK_ROWS),),  # cdiv: the last block is partial
        in_specs=[spec],
        out_specs=spec,
    )

    chapter("1. The kernel body, traced over one (16, 256) block")
    print(call.trace(x).body)

    chapter("2. Run on the CPU, check against numpy")
    out = call(x)
    shifted = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    expected = shifted / shifted.sum(axis=1, keepdims=True)
    assert out.shape == x.shape and not np.isnan(out).any()
    assert np.abs(out - expected).max() < 1e-6
    print(f"{call.grid[0]} blocks of {BLOCK_ROWS} rows for {ROWS} rows; matches numpy: True")
    print(f"every row sums to 1: {bool(np.allclose(out.sum(axis=1), 1, atol=1e-5))}")

    chapter("3. The CPU program: padded to whole blocks, computed, cut back")
    grid = str(call.lower(x).function).split("func @softmax_kernel_grid")[1]
    print("func @softmax_kernel_grid" + grid)
    padded = -(-ROWS // BLOCK_ROWS) * BLOCK_ROWS
    assert f"f32[{padded},{COLS}]" in grid and "constant nan" in grid
    print(f"{ROWS} rows padded to {padded} with NaN; the output keeps the first {ROWS}")

    chapter("4. The same kernel emitted for TPU (Mosaic): the partial block is Mosaic's to mask")
    print(call.lower(x, target="tpu").as_text(debug_info=False))


if __name__ == "__main__":
    main()
