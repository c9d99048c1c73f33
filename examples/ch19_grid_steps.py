"""Chapter 19: an optimization pass: fuse grid steps, fuzz it against upstream, time it on a TPU.

Every grid step of a TPU kernel pays a fixed cost, about 0.2-0.35 µs on a v5e, on top of
moving its blocks; a softmax in 8-row blocks spends most of its time there. This chapter writes
a *kernel pass* (it changes the grid and the block specs, not only the body) that runs pairs of
steps as one, from the pieces ``fuse-grid-steps`` is built of (``passes/kernel/grid_fusion/``):

1. ``motion(spec, axis)``: how a block moves along the axis: it stays put, or advances one
   block a step in one dimension; anything else (None) and the pass leaves the kernel alone;
2. ``fuse_axis(kernel, axis, moves, factor)``: each moving block becomes a window ``factor``
   blocks long, and the body runs ``factor`` times over it, in the old order, each sub-step
   seeing its old ``program_id``: the same ops on the same elements, so the same bits.

Then the evidence a researcher needs, in the order they need it: the kernel before and after;
the bits against the unfused kernel and upstream's interpret mode; the fuzzer
(``fuzz-kernels --load examples/ch19_grid_steps.py --pass-pipeline fuse-pairs``), which checks
the pass on random kernels against upstream; and the time on a TPU, against upstream and
against the pipeline without the pass (``make tpu-bench PASSES=fuse-pairs
TPU_ARGS='--load examples/ch19_grid_steps.py'`` for the bench's kernels). Without a chip it
prints what it printed on a v5e.

Run: ``.venv/bin/python examples/ch19_grid_steps.py``.
"""

import time

import numpy as np

import minipallas as mp
import minipallas.numpy as mnp
from minipallas.ir.kernel_spec import Kernel
from minipallas.lowering.runtime.libtpu import tpu_chips
from minipallas.passes.kernel.grid_fusion import fuse_axis
from minipallas.passes.kernel.grid_fusion.index_maps import motion
from minipallas.passes.registry import INT, Option, register
from minipallas.tools.fuzz import kernels as fuzz_kernels


@register(
    "fuse-pairs",
    Option("factor", INT, "how many steps of the innermost axis run as one"),
    doc="runs each pair of steps of the innermost grid axis as one step",
    subject="kernel",
)
def fuse_pairs(kernel: Kernel, *, factor: int = 2) -> Kernel:
    """``kernel`` with ``factor`` steps of its innermost axis run as one; ``kernel`` itself
    when the axis's length is no multiple of ``factor`` or a block does not follow it."""
    if not kernel.grid or kernel.dynamic_axes:
        return kernel
    axis = len(kernel.grid) - 1
    moves = [motion(s, axis) for s in (*kernel.in_specs, *kernel.out_specs)]
    if kernel.grid[axis] % factor or None in moves or kernel.input_output_aliases:
        return kernel
    return fuse_axis(kernel, axis, moves, factor)


def softmax_rows(np_):
    """A row-wise softmax body for either numpy namespace (minipallas's, or jax's)."""

    def softmax(x_ref, o_ref):
        x = x_ref[...]
        e = np_.exp(x - x.max(axis=1, keepdims=True))
        o_ref[...] = e / e.sum(axis=1, keepdims=True)

    return softmax


def call(rows: int, **options):
    """The softmax of ``rows`` x 256 in 8-row blocks (``rows // 8`` grid steps)."""
    spec = mp.BlockSpec((8, 256), lambda i: (i, 0))
    return mp.pallas_call(
        softmax_rows(mnp),
        mp.ArrayType((rows, 256), "float32"),
        grid=(rows // 8,),
        in_specs=[spec],
        out_specs=spec,
        **options,
    )


def upstream(rows: int, interpret: bool):
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    spec = pl.BlockSpec((8, 256), lambda i: (i, 0))
    return jax.jit(
        pl.pallas_call(
            softmax_rows(jnp),
            jax.ShapeDtypeStruct((rows, 256), jnp.float32),
            grid=(rows // 8,),
            in_specs=[spec],
            out_specs=spec,
            interpret=interpret,
        )
    )


def per_call_ms(fn, x, calls: int = 100) -> float:
    """ms per call of ``calls`` calls back to back, best of 5 (as
    ``bench/benchmarks/tpu_bench.py``)."""
    import jax

    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            out = fn(x)
        jax.block_until_ready(out)
        best = min(best, (time.perf_counter() - start) / calls * 1e3)
    return best


# What ``on_tpu`` printed on a TPU v5e (rows = 65536: 8192 grid steps of 8 rows, 64 MiB in and
# out): ``plain`` is minipallas with ``optimize=False`` (upstream's module); ``fuse-pairs`` this
# pass alone (4096 steps of 16 rows, the target's own fusion off); ``default`` the target's
# ``fuse-grid-steps`` (256 steps of 256 rows).
V5E = """\
upstream       2.239 ms   1.00x upstream, same bits: True
plain          2.239 ms   1.00x upstream, same bits: True
fuse-pairs     1.274 ms   1.76x upstream, same bits: True
default        0.227 ms   9.88x upstream, same bits: True"""


def main() -> None:
    x = np.random.default_rng(0).standard_normal((512, 256)).astype(np.float32)
    plain, paired = call(512), call(512, passes="fuse-pairs")
    print("--- the kernel as written ---")
    print(str(plain.trace(x)))
    print("--- after fuse-pairs ---")
    fused = paired.trace(x)
    print(str(fused))
    assert fused.grid == (32,) and fused.in_specs[0].block_shape == (16, 256)

    got, want = paired(x), plain(x)
    theirs = np.asarray(upstream(512, interpret=True)(x))
    same = got.tobytes() == want.tobytes() == theirs.tobytes()
    print(f"\nsame bits as the kernel as written and as upstream's interpret mode: {same}")
    assert same

    # the pass is registered already in this process; from a shell, --load this file
    print("\n--- fuzz-kernels with the pass (random kernels, minipallas vs upstream) ---")
    status = fuzz_kernels.main(["--pass-pipeline", "fuse-pairs", "--count", "6", "--seed", "19"])
    assert status == 0

    print("\n--- on a TPU: the softmax of 65536 x 256 in 8-row blocks ---")
    if not tpu_chips():
        print("no TPU here; on a v5e this chapter printed:")
        print(V5E)
        return
    on_tpu()


def on_tpu() -> None:
    """The four ways on the chip: ms per call, the ratio to upstream, the bits."""
    import jax

    rows = 65536
    x = jax.device_put(np.random.default_rng(1).standard_normal((rows, 256)).astype(np.float32))
    ways = {
        "upstream": upstream(rows, interpret=False),
        "plain": jax.jit(call(rows, optimize=False)),
        "fuse-pairs": jax.jit(call(rows, optimize=False, passes="fuse-pairs")),
        "default": jax.jit(call(rows)),
    }
    outs = {k: np.asarray(f(x)) for k, f in ways.items()}
    times = {k: per_call_ms(f, x) for k, f in ways.items()}
    for k, ms in times.items():
        same = outs[k].tobytes() == outs["upstream"].tobytes()
        ratio = times["upstream"] / ms
        print(f"{k:12} {ms:7.3f} ms   {ratio:.2f}x upstream, same bits: {same}")


if __name__ == "__main__":
    main()
