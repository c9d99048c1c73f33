"""How far to fuse: each kernel's time on the chip at several ``fuse-grid-steps`` settings.

For each kernel of ``tpu_bench.benches`` (``--large`` sizes by default here) and each
``max_unroll`` in ``--unrolls``, the kernel runs with the target's default optimizations off
(``optimize=False``) and ``passes="fuse-grid-steps{max_unroll=K,...}"`` instead (``K=1``: not
fused, upstream's module), timed as ``tpu_bench`` times (calls back to back, best of
``--repeat``), bits compared with the unfused run. What the pass's defaults were chosen from.
Each ``--options`` (given once or more) adds the pass's other options to a row of its own:
``--options discharge_carried=false,max_carried=3`` runs flash attention fused with its
scratch chained through VMEM, as it ran before ``carried``.

    python -m bench.benchmarks.fusion_sweep [--kernels flash_attention_d64_8192] \
        [--unrolls 1,2,4,8,16] [--options discharge_carried=false,max_carried=3]
    python -m bench.benchmarks.fusion_sweep --cpu   # tiny sizes on the CPU: the machinery only
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from bench.benchmarks.tpu_bench import benches, per_call_ms


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=lambda s: s.split(","), default=None)
    parser.add_argument("--unrolls", type=lambda s: [int(k) for k in s.split(",")],
                        default=[1, 2, 4, 8, 16, 32])  # fmt: skip
    parser.add_argument("--target-bytes", type=int, default=1 << 30)
    parser.add_argument("--options", action="append", default=None,
                        help="more fuse-grid-steps options, a row of their own")  # fmt: skip
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cpu", action="store_true")
    options = parser.parse_args(argv)
    import jax

    device = jax.devices("cpu" if options.cpu else "tpu")[0]
    chosen = [
        b
        for b in benches(options.cpu, large=not options.cpu)
        if not options.kernels or b.case.name in options.kernels
    ]
    print(f"ms per call on {device.device_kind}; fuse-grid-steps{{max_unroll=K}} for K in", end="")
    print(f" {options.unrolls}, target_bytes={options.target_bytes}")
    for bench in chosen:
        case = bench.case
        inputs = case.inputs()
        args = [jax.device_put(a, device) for a in inputs]
        want = None
        for more in options.options or [""]:
            row = []
            for k in options.unrolls:
                pipe = f"fuse-grid-steps{{max_unroll={k},target_bytes={options.target_bytes}"
                call = case.minipallas(
                    optimize=False, passes=f"{pipe}{more and ','}{more}}}" if k > 1 else ""
                )
                fn = jax.jit(call)
                out = np.asarray(jax.block_until_ready(fn(*args)))
                want = out if want is None else want
                best = min(per_call_ms(fn, args, options.calls) for _ in range(options.repeat))
                grid = "x".join(map(str, call.trace(*inputs).grid))
                same = "" if out.tobytes() == want.tobytes() else " DIFF"
                row.append(f"K={k}:{best:.3f}({grid}){same}")
            print(f"{case.name:26} {more:10} " + "  ".join(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
