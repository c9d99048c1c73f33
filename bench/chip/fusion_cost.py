"""Calibrating fuse-grid-steps' cost model (``passes/kernel/grid_fusion/cost.py``) on the chip.

Each row is one kernel of ``tpu_bench.benches`` (realistic and ``--large`` sizes) run with the
target's optimizations off and one ``fuse-grid-steps{...}`` setting instead (``-``: not fused,
upstream's module; ``default``: the cost model's choice), timed as ``tpu_bench`` times (calls
back to back, best of ``--repeat``), its bits compared with the unfused run's; beside it the
grid it ran as and the model's time for that grid. The settings probe what the model's
constants stand for: the cost of a step (the same bytes in fewer steps), the cost of a dot (the
128-block matmul widened to 256, 512 and 1024 rows), whether sub-steps beyond the sweep's 32
still gain (the code they unroll), and the model's choices against the old defaults'.

    python -m bench.chip.fusion_cost [--rows masked_tanh_16000000] [--calls 50] [--repeat 3]
    python -m bench.chip.fusion_cost --cpu   # tiny kernels on the CPU: the machinery only
    python -m bench.chip.fusion_cost --row 'reduce_1d_16777216:-' \
        --row 'reduce_1d_16777216:thread_outputs=false'   # rows of one's own instead
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from bench.benchmarks.tpu_bench import benches, per_call_ms

BIG = "target_bytes=1073741824"
ROWS = (
    ("masked_tanh_16000000", "-"),
    ("masked_tanh_16000000", "max_unroll=25"),
    ("masked_tanh_16000000", f"max_unroll=125,{BIG}"),
    ("masked_tanh_16000000", f"max_unroll=625,{BIG},vmem_budget=14680064"),
    ("reduce_1d_16777216", "max_unroll=32"),
    ("reduce_1d_16777216", f"max_unroll=128,{BIG}"),
    ("reduce_1d_16777216", f"max_unroll=512,{BIG}"),
    ("layer_norm_32768", "max_unroll=16"),
    ("layer_norm_32768", f"max_unroll=32,{BIG}"),
    ("softmax_32768", f"max_unroll=32,{BIG}"),
    ("matmul_2048", "wide_block=1,max_unroll=1"),
    ("matmul_2048", "wide_block=256"),
    ("matmul_2048", "wide_block=512"),
    ("matmul_2048", "wide_block=1024,vmem_budget=14680064"),
    ("matmul_2048", "wide_block=512,max_unroll=1"),
    ("matmul_2048", "wide_block=512,max_unroll=32,target_bytes=4194304"),  # the old defaults
    ("matmul_2048", "max_unroll=32"),  # the model's choice
    ("matmul_f32_2048", "-"),
    ("matmul_bf16_4096", "-"),
    ("matmul_bf16_4096", "max_unroll=2"),
    ("softmax_8192", "-"),
    ("softmax_8192", "max_unroll=2"),
    # the realistic sizes (tpu_bench without --large), the model's choice against the old ones
    ("masked_tanh", "max_unroll=32"),  # 35 steps (the old defaults: 31)
    ("masked_tanh", "default"),
    ("reduce_1d", "max_unroll=32"),  # the old defaults: 32 steps
    ("reduce_1d", "default"),
    ("matmul_1024", "wide_block=512,max_unroll=4"),  # the old defaults: 2x2x2
    ("matmul_1024", "default"),
    ("masked_tanh_16000000", "default"),
    ("layer_norm_32768", "default"),
)
CPU_ROWS = (("matmul_f32", "-"), ("matmul_f32", "default"), ("softmax", "max_unroll=2"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=lambda s: s.split(","), default=None)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cpu", action="store_true")
    parser.add_argument("--row", action="append", default=[], type=lambda s: tuple(s.split(":")),
                        help="KERNEL:SETTING, instead of the rows above (repeat it)")  # fmt: skip
    options = parser.parse_args(argv)
    import jax

    from minipallas.lowering import TARGETS
    from minipallas.passes.kernel.grid_fusion.cost import V5E, kernel_cost

    device = jax.devices("cpu" if options.cpu else "tpu")[0]
    made_at = (benches(True),) if options.cpu else (benches(False), benches(False, large=True))
    by_name = {b.case.name: b for made in made_at for b in made}
    print(f"ms per call on {device.device_kind}, fuse-grid-steps settings; model: {V5E}")
    made: dict[str, tuple] = {}
    for name, setting in options.row or (CPU_ROWS if options.cpu else ROWS):
        if options.rows and name not in options.rows:
            continue
        case = by_name[name].case
        if name not in made:
            inputs = case.inputs()
            made[name] = (inputs, [jax.device_put(a, device) for a in inputs], None)
        inputs, args, want = made[name]
        pipe = {"-": "", "default": "fuse-grid-steps"}.get(setting, f"fuse-grid-steps{{{setting}}}")
        call = case.minipallas(optimize=False, passes=pipe)
        ran = call.trace(*inputs, memory_space=TARGETS["tpu"].memory_space)  # after the passes
        try:
            fn = jax.jit(call)
            out = np.asarray(jax.block_until_ready(fn(*args)))
            best = min(per_call_ms(fn, args, options.calls) for _ in range(options.repeat))
        except Exception as e:  # noqa: BLE001 - a setting the chip refuses is a row, not a stop
            print(f"{name:24} {setting:48} refused: {str(e).splitlines()[0][:80]}", flush=True)
            continue
        want = out if want is None else want
        made[name] = (inputs, args, want)
        same = "same" if out.tobytes() == want.tobytes() else "DIFF"
        grid = "x".join(map(str, ran.grid))
        model = kernel_cost(ran).seconds * 1e3
        print(f"{name:24} {setting:48} {grid:9} {best:7.3f} ms  model {model:7.3f}  {same}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
