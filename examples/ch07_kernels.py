"""Chapter 7: kernels: a pallas_call traced into a body, a grid and index maps, then a CPU program.

A Pallas kernel is a function over *block* refs, run once per point of a *grid*. Each operand
has a ``BlockSpec``: the block's shape, and an *index map* from the grid indices to which
block the kernel sees at that point. ``call.trace(...)`` gives the ``Kernel``: its body (IR
over block-shaped refs, using ``program_id``), and each index map as a small IR function.

To run on the CPU, minipallas builds one pure program from it (``call.program(...)``,
``kernels/programs/``): the arrays are cut into blocks, and the grid points that share no
state run *batched*: the body is vectorized over whole vectors of grid indices (an ``iota``
each), as ``vmap`` would; points that share state run in a loop (chapters 8 and 9). That
program is what XLA compiles. ``minipallas-opt ch07_kernels.py --emit=stablehlo
--print-ir-after-all`` shows each step as a stage: the registered passes ``bind-grid``,
``discharge``, ``cleanup``, ``drop-inputs``, ``cleanup``, then ``batch-grid`` and
``cpu-program``. The program printed below is cleaned (``mp.cleanup``), as the StableHLO
target's own pipeline cleans it before XLA sees it; ``call.program`` returns it as built, the
grid's constant offsets included. The output's blocks start as NaN (upstream's uninitialized
output) and go to the body, which never reads them here: it only writes its block.
"""

import numpy as np

import minipallas as mp
import minipallas.numpy as jnp


def add(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...] * mp.program_id(1).astype(jnp.float32)


F32 = mp.ArrayType((64, 256), jnp.float32)
SPEC = mp.BlockSpec((8, 128), lambda i, j: (i, j))
KERNEL = mp.pallas_call(add, F32, grid=(8, 2), in_specs=[SPEC, SPEC], out_specs=SPEC)
ARGS = (F32, F32)  # with KERNEL, what makes this file a kernel file for minipallas-opt


def main() -> None:
    kernel = KERNEL.trace(*ARGS)
    print(f"--- the kernel: grid {kernel.grid}, blocks {kernel.in_specs[0].ref_type} ---")
    print(kernel.body)
    print("--- the index map of input 0: grid indices (i, j) -> block indices ---")
    print(kernel.in_specs[0].index_map)

    program = mp.cleanup(KERNEL.program(*ARGS))  # as the stablehlo target's pipeline does
    print("--- the CPU program: every grid point at once, no loop ---")
    print(program)
    text = str(program)
    assert " for " not in text and "iota dimension 0 : i32[8]" in text

    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal(F32.shape, dtype=np.float32) for _ in range(2))
    out = KERNEL(x, y)  # compiled by XLA, run on the CPU
    expected = x + y * np.repeat([0.0, 1.0], 128)[None, :].astype(np.float32)
    same = np.array_equal(out, expected)
    assert same
    print(f"pallas_call on the CPU equals numpy: {same}")
    dot = mp.view(KERNEL, "dot", inputs=ARGS)  # `dot -Tsvg` draws it; format="svg" writes one
    print(f"a picture of the kernel: {dot.count('func @')} functions (body and index maps)")


if __name__ == "__main__":
    main()
