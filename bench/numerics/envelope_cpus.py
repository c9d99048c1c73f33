"""Issue 27's two kernels at the issue's sizes through the whole harness, on this machine: a
tiled matmul with an f32 scratch accumulator over a K grid axis (256x384x512 in 128-blocks) and a
row layer norm (16-row blocks of 128x256, gain and bias), each on ``--seeds`` seeds of standard
normal inputs, and the first seed's planted siblings (``minipallas/tools/corpora/plants.py``).
Prints each verdict with its distance as a fraction of the envelope, and the machine.

The envelope measured on an Intel Xeon called the seed-0 matmul a bug on an AMD EPYC (73,728
ulps, 1.3x) and the layer norm (8x); docs/numerics.md gives this script's latest results on each
CPU kind, bench/results/numerics_history.md every run's.

Run: ``.venv/bin/python -m bench.numerics.envelope_cpus [--seeds 3]`` (about 3 minutes, mostly the
matmul's perturbed samples).
"""

from __future__ import annotations

import argparse
import functools
import time

import numpy as np

from minipallas.tools.corpora.float_corpus import EPS, k_matmul, row_layer_norm
from minipallas.tools.corpora.plants import change_constant, offset_after, scale_result, sizes
from minipallas.tools.difftest import Case, run
from minipallas.tools.envelope.machine import here

KERNELS = {
    "k_matmul_256x384x512": (
        functools.partial(k_matmul, b=128),
        ((256, 512), (512, 384)),
        {"scale": scale_result()},
    ),
    "row_layer_norm_128x256": (
        row_layer_norm,
        ((128, 256), (1, 256), (1, 256)),
        {
            "scale": scale_result(),
            "eps": change_constant(EPS, 1e-6),
            "sum": offset_after("reduce_sum", sizes("float32").offset),
        },
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    seeds = parser.parse_args().seeds
    print(f"machine: {here()}")
    for name, (fn, shapes, plants) in KERNELS.items():
        for seed in range(seeds):
            rng = np.random.default_rng(seed)
            args = tuple(rng.standard_normal(s, dtype=np.float32) for s in shapes)
            cases = [Case(f"{name} seed {seed}", fn, args)]
            if seed == 0:
                cases += [Case(f"{name} planted {p}", fn, args, plant=f) for p, f in plants.items()]
            for case in cases:
                start = time.perf_counter()
                report = run(case)
                print(f"{case.name}: {report.finding} ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
