"""Upstream Pallas's own blocked matmul at several block shapes and scoped-VMEM limits.

What the chip can do with a kernel's blocks when Mosaic is given more than its default 16 MiB
of VMEM (``pltpu.CompilerParams(vmem_limit_bytes=...)``): the calibration behind the cost
model's VMEM ceiling and its MXU rates (``passes/kernel/grid_fusion/cost.py``). Each row is one
(rows, columns, depth) block shape, timed as ``tpu_bench`` times, its bits compared with the
512-block kernel's (the same when only the rows and columns grow: each output element's sums
are unchanged), beside ``jax.jit`` of the same dot.

    python -m bench.chip.upstream_blocks   # on a TPU: bench/results/upstream_blocks_v5e.txt
"""

from __future__ import annotations

import numpy as np

from bench.benchmarks.tpu_bench import per_call_ms

MIB = 1 << 20
# (rows, columns, depth) of a block and the VMEM limit asked for (None: Mosaic's default)
SHAPES = (
    (512, 512, 512, None), (1024, 512, 512, None), (1024, 512, 512, 64), (1024, 1024, 512, 64),
    (2048, 1024, 512, 100), (1024, 2048, 512, 100), (2048, 2048, 512, 120),
    (2048, 512, 512, 64), (1024, 1024, 256, 64), (2048, 2048, 256, 120), (512, 2048, 512, 64),
)  # fmt: skip


def _kernel(x_ref, y_ref, o_ref, acc_ref):  # noqa: ANN001 - upstream's refs
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    @pl.when(pl.program_id(2) == 0)
    def _() -> None:
        acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _() -> None:
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def _call(n: int, bm: int, bn: int, bk: int, limit: int | None):  # noqa: ANN202 - jax's
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    params = pltpu.CompilerParams(
        dimension_semantics=("parallel", "parallel", "arbitrary"),
        vmem_limit_bytes=None if limit is None else limit * MIB,
    )
    return jax.jit(
        pl.pallas_call(
            _kernel,
            out_shape=jax.ShapeDtypeStruct((n, n), jnp.float32),
            grid=(n // bm, n // bn, n // bk),
            in_specs=[
                pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)),
                pl.BlockSpec((bk, bn), lambda i, j, k: (k, j)),
            ],
            out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
            scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
            compiler_params=params,
        )
    )


def _best(fn, args: list, calls: int = 30, repeat: int = 3) -> tuple[float, np.ndarray]:  # noqa: ANN001
    out = np.asarray(fn(*args))
    return min(per_call_ms(fn, args, calls) for _ in range(repeat)), out


def main() -> None:
    import jax
    import jax.numpy as jnp

    for n, dtype in ((2048, jnp.float32), (4096, jnp.bfloat16)):
        rng = np.random.default_rng(0)
        x, y = (jnp.asarray(rng.standard_normal((n, n), np.float32)).astype(dtype) for _ in "xy")
        dot = jax.jit(lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32))
        jit_ms, _ = _best(dot, [x, y])
        print(f"n={n} {jnp.dtype(dtype).name} jit {jit_ms:.3f} ms", flush=True)
        base = None
        for bm, bn, bk, limit in SHAPES:
            try:
                ms, out = _best(_call(n, bm, bn, bk, limit), [x, y])
            except Exception as e:  # noqa: BLE001 - a refusal is a row of the table
                print(f"  {bm}x{bn}x{bk} limit {limit} MiB: refused: {str(e)[:200]}", flush=True)
                continue
            base = out if base is None else base
            same = np.array_equal(out.view(np.uint32), base.view(np.uint32))
            print(f"  {bm}x{bn}x{bk} limit {limit} MiB: {ms:.3f} ms, jit/this {jit_ms / ms:.2f},"
                  f" bits as 512-blocks {same}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
