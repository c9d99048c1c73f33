"""Op counts of the cleanup with and without folding (``cleanup{fold=false}``: no constant
folding, no algebraic identities), on the tour's and the examples' programs, `i % 2 == 0`
guarding a store, the kernels' CPU programs, and the bench programs (``ir_bench``'s traced
kernel, ``discharge_bench``'s generated programs), each discharged first.

    python -m bench.benchmarks.cleanup_counts [--sizes 1000,10000,100000] [--seed 0]
"""

from __future__ import annotations

import importlib.util

import numpy as np

import minipallas as mp
import minipallas.numpy as jnp
from bench import ROOT
from bench.benchmarks.ir_bench import kernel_emitting
from bench.common import generated, op_count, parse_args, table
from minipallas.passes.cleanup import cleanup

EXAMPLES = ROOT / "examples"
F8x128 = mp.RefType((8, 128), jnp.float32)


def _example(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def even_rows(x_ref, o_ref):
    """Copies the even rows: ``when(i % 2 == 0)`` in a loop."""

    def step(i, carry):
        @mp.when(i % 2 == 0)
        def _():
            o_ref[i, :] = x_ref[i, :]

        return carry

    mp.fori_loop(0, 8, step, jnp.int32(0))


def programs(sizes, seed):
    """(name, stateful program) pairs."""
    tour, discharge = _example("tour"), _example("ch04_discharge")
    yield "tour: running_sum", mp.trace(tour.running_sum, F8x128, F8x128)
    yield "tour: scaled_add", mp.trace(tour.scaled_add, F8x128, F8x128, F8x128)
    types = (
        mp.RefType((4, 8), jnp.float32),
        mp.RefType((2, 8), jnp.float32),
        mp.RefType((8,), jnp.float32),
        mp.ArrayType((), jnp.int32),
    )
    yield "examples/ch04_discharge.py", mp.trace(discharge.program, *types)
    yield "i % 2 == 0 in a loop", mp.trace(even_rows, F8x128, F8x128)
    matmul = _example("ch08_persistent_scratch")
    x = np.zeros((256, 512), np.float32)
    y = np.zeros((512, 256), np.float32)
    call = matmul.matmul(mp.ArrayType(x.shape, "float32"), mp.ArrayType(y.shape, "float32"))
    yield "examples/ch08_persistent_scratch.py (CPU program)", call.program(x, y)
    softmax = _example("ch10_partial_blocks")
    rows = np.zeros((softmax.ROWS, softmax.COLS), np.float32)
    spec = mp.BlockSpec((softmax.BLOCK_ROWS, softmax.COLS), lambda i: (i, 0))
    grid = (-(-softmax.ROWS // softmax.BLOCK_ROWS),)
    call = mp.pallas_call(
        softmax.softmax_kernel,
        mp.ArrayType(rows.shape, "float32"),
        grid=grid,
        in_specs=[spec],
        out_specs=spec,
    )
    yield "examples/ch10_partial_blocks.py (CPU program)", call.program(rows)
    for n in sizes:
        yield f"ir_bench traced kernel, {n} ops", mp.trace(kernel_emitting(n), F8x128, F8x128)
        yield f"discharge_bench generated, {n} ops", generated(n, seed)


def main(argv=None):
    args = parse_args(__doc__.splitlines()[0], argv)
    rows = []
    for name, fn in programs(args.sizes, args.seed):
        pure = mp.discharge(fn)
        before, after = cleanup(pure, fold=False), cleanup(pure)
        b, a = op_count(before), op_count(after)
        rows.append([name, op_count(fn), op_count(pure), b, a, f"{100 * (b - a) / max(b, 1):.0f}%"])
    header = ["program", "ops", "discharged", "cleaned, fold=false", "cleaned", "fewer"]
    print(table(header, rows))
    return rows


if __name__ == "__main__":
    main()
