"""Runs the device corpus (``minipallas.tools.corpora.multi_device``) both ways, in a process of its
own: jax sees 8 CPU devices only when ``XLA_FLAGS`` says so before it starts. Prints one JSON
line a case: its upstream verdict, minipallas's simulator's for each schedule and, for a
correct kernel, what ``on_devices`` compiles.

Run as ``python tests/difftest/device_corpus_run.py [CASE ...]``.
"""

import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
os.environ["JAX_PLATFORMS"] = "cpu"

import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

from minipallas.tools.corpora.multi_device import CASES, run  # noqa: E402

SCHEDULES = ("lockstep", 0)


def main(names: list[str]) -> None:
    warnings.simplefilter("ignore", DeprecationWarning)
    for case in CASES:
        if names and case.name not in names:
            continue
        start = time.perf_counter()
        line = {
            "case": case.name,
            "upstream": run.upstream(case),
            "minipallas": run.minipallas(case, SCHEDULES),
        }
        if case.expect == "ok":
            line["compiled"] = run.compiled(case)
        line["seconds"] = round(time.perf_counter() - start, 2)
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
