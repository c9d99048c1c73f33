"""Kernels that span devices, timed three ways in one run (issue 47 item 7).

The correct kernels of the device corpus (``minipallas.tools.corpora.multi_device``: upstream's
distributed tests, the guide's kernels, our own rings, collective matmuls and attention step)
in ``jax.shard_map`` over 4 and 8 CPU devices of this process:

- ``upstream``: upstream's TPU interpret mode (``pltpu.force_tpu_interpret_mode()``, its default
  ``InterpretParams``, race detector off) under ``jax.jit``: the only way upstream runs these
  kernels off a TPU;
- ``simulate``: minipallas's simulator (``mp.interpret(..., collectives="simulate")``, the
  lockstep schedule, race checks on), the imported program built once before timing;
- ``compiled``: ``jax.jit(mp.on_devices(f))``, each remote copy an XLA collective
  (``platforms/devices_xla.py``); kernels whose communication depends on data have none.

Each way is warmed up once (compilation, tracing) and then timed ``--repeat`` times; the table
gives the best in ms, the ratios upstream/compiled and upstream/simulate (above 1 minipallas is
faster), and whether the compiled bits equal the simulator's and numpy's. The goal line: the
least and the geometric mean of upstream/compiled (goal >= 10) and of upstream/simulate (goal
>= 1: the simulator no slower than upstream's interpret mode).

    python -m bench.benchmarks.devices_bench [--repeat 3] [--cases right_permute_4,...]
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental.pallas import tpu as pltpu  # noqa: E402

import minipallas as mp  # noqa: E402
from bench.common import table  # noqa: E402
from minipallas.tools.corpora.multi_device import CASES, Case  # noqa: E402

HEADER = ("kernel", "devices", "upstream", "simulate", "compiled", "up/comp", "up/sim", "bits")


def best_ms(call: Callable[[], Any], repeat: int) -> float:
    """The best of ``repeat`` timed calls after one warm-up call, in ms."""
    jax.block_until_ready(call())
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        jax.block_until_ready(call())
        times.append(time.perf_counter() - start)
    return min(times) * 1e3


def measure(case: Case, repeat: int) -> tuple:
    x = case.inputs()
    up_ms = _upstream_ms(case, x, repeat)
    fn = mp.from_jaxpr(jax.make_jaxpr(jax.jit(case.build()))(*x))
    simulated: list = []
    sim_ms = best_ms(
        lambda: simulated.append(mp.interpret(fn, *x, collectives="simulate")[0]), repeat
    )
    want = np.asarray(case.reference(*x))
    sim = np.asarray(simulated[-1])
    if not case.compilable:
        bits = "simulate = numpy" if np.array_equal(sim, want) else "simulate != numpy"
        return case.name, case.devices, up_ms, sim_ms, "-", "-", _ratio(up_ms, sim_ms), bits
    compiled = jax.jit(mp.on_devices(case.build()))
    try:
        comp_ms = best_ms(lambda: compiled(*x), repeat)
    except mp.MiniPallasError as e:  # a kernel the compiler refuses runs in the simulator
        bits = "not compiled: " + str(e).splitlines()[0].split(": ", 1)[-1][:90]
        return case.name, case.devices, up_ms, sim_ms, "-", "-", _ratio(up_ms, sim_ms), bits
    got = np.asarray(compiled(*x))
    return (case.name, case.devices, up_ms, sim_ms, comp_ms, _ratio(up_ms, comp_ms),
            _ratio(up_ms, sim_ms), _bits(case, got, sim, want))  # fmt: skip


def _bits(case: Case, got: np.ndarray, sim: np.ndarray, want: np.ndarray) -> str:
    """ "same": the compiled bits are the simulator's and numpy's; a kernel with exponentials
    (``case.atol``) may differ from the simulator by XLA's rounding of ``exp``, said with the
    largest difference."""
    if np.array_equal(got, sim) and np.array_equal(got, want):
        return "same"
    if np.array_equal(got, sim) and case.atol and np.allclose(got, want, rtol=0, atol=case.atol):
        return f"same as simulate, numpy within {case.atol:g}"
    if case.atol and np.allclose(got, want, rtol=0, atol=case.atol):
        return f"within {case.atol:g} (max {np.abs(got - sim).max():.1e})"
    return "DIFFER"


def _upstream_ms(case: Case, x: tuple, repeat: int) -> float | str:
    """Upstream's interpret mode, or "refused" where it has no rule for the kernel (the
    corpus's ``upstream`` field says which and why)."""
    if case.upstream_kinds[0] in ("error", "hangs"):  # no rule for it, or never finishes
        return {"error": "refused", "hangs": "hangs"}[case.upstream_kinds[0]]
    with pltpu.force_tpu_interpret_mode():
        upstream = jax.jit(case.build())
        return best_ms(lambda: upstream(*x), repeat)


def _ratio(up: float | str, ours: float) -> float | str:
    return up / ours if isinstance(up, float) else "-"


def _geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cases", type=lambda s: s.split(","), default=None)
    options = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    chosen = [c for c in CASES if c.expect == "ok" and c.devices in (4, 8)]
    if options.cases:
        chosen = [c for c in chosen if c.name in options.cases]
    rows = []
    for case in chosen:
        try:
            rows.append(measure(case, options.repeat))
        except mp.MiniPallasError as e:  # a case minipallas cannot run yet: said, not hidden
            rows.append((case.name, case.devices, "-", "-", "-", "-", "-",
                         "refused: " + str(e).splitlines()[0].split(": ", 1)[-1][:90]))  # fmt: skip
        print(table(HEADER, rows[-1:]).splitlines()[-1], flush=True)
    print()
    print(f"ms per call, best of {options.repeat} after a warm-up; jax {jax.__version__}, "
          f"{jax.device_count()} CPU devices")  # fmt: skip
    print(table(HEADER, rows))
    comp = [r[5] for r in rows if isinstance(r[5], float)]
    sim = [r[6] for r in rows if isinstance(r[6], float)]
    if comp:
        print(f"upstream/compiled over {len(comp)} kernels: geometric mean "
              f"{_geomean(comp):.1f}, least {min(comp):.1f} (goal >= 10)")  # fmt: skip
    if sim:
        print(f"upstream/simulate over {len(sim)} kernels: geometric mean "
              f"{_geomean(sim):.2f}, least {min(sim):.2f} (goal >= 1)")  # fmt: skip
    return 1 if any(r[-1] in ("DIFFER", "simulate != numpy") for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
