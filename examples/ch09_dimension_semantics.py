"""Chapter 9: dimension semantics: which grid axes may run in parallel, and why.

Row sums of a wide matrix: grid axis 0 picks a block of rows, axis 1 walks the columns. The
output block (rows, 1) is the same for every step along axis 1, so it stays resident and
accumulates: zeroed at the first column block, added to at each. That revisiting is what
makes axis 1 sequential ("arbitrary") while axis 0 may run in parallel. The matrix is not a
whole number of column blocks; the kernel masks the padding of the last one with an iota.

minipallas infers each axis's semantics from the kernel (``lowering/tpu/semantics.py``): an
axis is "parallel" when no output block and no scratch state is shared across it. The CPU
program follows the same facts: grid points that share nothing run batched, the others in
order: a loop, or, for a few steps, the steps traced one after another (unrolled). Given
``dimension_semantics=`` (or ``tpu.CompilerParams``), the user's choice is used.

The CPU program of section 4 is printed cleaned (``mp.cleanup``), as the StableHLO target
cleans it before XLA. Each unrolled step hands its step index to the body through an
``optimization_barrier``: traced inline the index is a constant, and XLA would fold arithmetic
on it that upstream's loop, whose index it cannot see, computes in full (``(x + 1.0) - 1.0``
to ``x`` at step 1, one rounding less); behind the barrier the bits are the loop's
(``minipallas/kernels/programs/unrolling.py``).
"""

import numpy as np

import minipallas as mp
import minipallas.numpy as jnp
from minipallas.lowering.tpu.semantics import dimension_semantics

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
        mp.ArrayType((ROWS, 1), jnp.float32),
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

    chapter("3. The inferred dimension semantics, one reason per axis")
    inferred = dimension_semantics(kernel)
    for reason in inferred.reasons:
        print(reason)
    assert inferred.values == ("parallel", "arbitrary")

    chapter("4. The CPU program: axis 0 batched, axis 1's four steps in order, unrolled")
    program = str(mp.cleanup(call.program(x)))  # as the stablehlo target's pipeline does
    print(program)
    assert " = for " not in program and program.count("call @row_sum_kernel_post_batched") == 4

    chapter("5. In the Mosaic module: its dimension_semantics attribute")
    module = call.lower(x, target="tpu").as_text(debug_info=False)
    print(next(line.strip() for line in module.splitlines() if "dimension_semantics = " in line)
          .split("dimension_semantics = ")[1].split("]")[0] + "]")  # fmt: skip


if __name__ == "__main__":
    main()
