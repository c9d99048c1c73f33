"""Where one call of a small kernel spends its time, against ``jax.jit`` of the jnp equivalent.

A prototyping user calls small kernels many times, so the fixed cost of a call matters as much
as XLA's kernels. Each layer of ``pallas_call(...)(*arrays)`` is timed on its own, inside out,
in the same process as ``jax.jit`` (best of ``--blocks`` blocks of ``--calls`` back-to-back
calls, the layers taking turns block by block, numpy in and out, wall time):

- ``run``: the executable on arguments already placed on the CPU, results waited for: the
  program's own kernels (the while loop over sequential grid steps, the batched blocks);
- ``dispatch``: the rest of ``Compiled.__call__``: placing the numpy arguments, starting the
  run, the results as writable numpy arrays (``jax.jit``'s C++ dispatch,
  ``lowering/runtime/jax_dispatch.py``);
- ``python``: the rest of a call: finding the compiled program for the argument types;
- ``jit run``: ``jax.jit``'s executable alone on device arrays, ``jit``: a whole ``jax.jit``
  call on the same numpy arrays.

    python -m bench.benchmarks.call_overhead [--kernels reduce_8k,matmul_small] [--calls 200]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from bench.common import table
from bench.realistic_kernels import REFERENCES, realistic_cases

SMALL = ("reduce_8k", "matmul_small", "reduce_1d", "masked_tanh")


def best_us(thunks: dict[str, Callable[[], object]], calls: int, blocks: int) -> dict[str, float]:
    """Each thunk's best mean µs per call over ``blocks`` blocks of ``calls`` calls, the
    thunks taking turns block by block, so a slow spell of the machine hits them all alike."""
    best = dict.fromkeys(thunks, float("inf"))
    for thunk in thunks.values():  # warm up: the first calls in a process pay jax's own setup
        for _ in range(calls):
            thunk()
    for _ in range(blocks):
        for name, thunk in thunks.items():
            start = time.perf_counter()
            for _ in range(calls):
                thunk()
            best[name] = min(best[name], (time.perf_counter() - start) / calls)
    return {name: t * 1e6 for name, t in best.items()}


def breakdown(case, calls: int, blocks: int) -> dict[str, float]:
    """µs per call of each layer of a minipallas call and of ``jax.jit``."""
    import jax
    import jax.numpy as jnp

    from minipallas.lowering.runtime import xla_cpu

    args = case.inputs()
    call = case.minipallas()
    call(*args)  # trace, compile
    compiled = call.compiled(*args)  # behind jax.jit's dispatch (lowering/runtime/jax_dispatch.py)
    placed = [jax.device_put(a, xla_cpu.cpu_device()) for a in args]

    def run():
        return jax.block_until_ready(compiled.jitted(*placed))

    ref = REFERENCES.get(case.name)
    if ref is None:
        from bench.benchmarks.kernels_bench import reference

        ref = reference(case)
    jit = jax.jit(lambda *xs: ref(jnp, *xs))
    jit_args = [jnp.asarray(a) for a in args]
    jax.block_until_ready(jit(*jit_args))

    def numpy_out(out):
        return [np.asarray(o) for o in (out if isinstance(out, tuple | list) else (out,))]

    thunks = {
        "call": lambda: call(*args),
        "compiled": lambda: compiled(*args),
        "run": run,
        "jit run": lambda: jax.block_until_ready(jit(*jit_args)),
        "jit": lambda: numpy_out(jit(*args)),
    }
    t = best_us(thunks, calls, blocks)
    t["python"] = max(t["call"] - t["compiled"], 0.0)
    t["dispatch"] = max(t["compiled"] - t["run"], 0.0)
    return t


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", default=",".join(SMALL))
    parser.add_argument("--calls", type=int, default=100, help="calls per timed block")
    parser.add_argument("--blocks", type=int, default=15, help="timed blocks; the best counts")
    args = parser.parse_args(argv)
    cases = {c.name: c for c in realistic_cases()}
    rows = []
    for name in args.kernels.split(","):
        t = breakdown(cases[name], args.calls, args.blocks)
        rows.append(
            [name]
            + [f"{t[k]:.1f}" for k in ("python", "dispatch", "run", "call", "jit run", "jit")]
            + [f"{t['call'] / t['jit']:.2f}"]
        )
    print("µs per call, best of blocks of back-to-back calls, numpy in and out")
    head = ["kernel", "python", "dispatch", "run", "minipallas", "jit run", "jax.jit", "ratio"]
    print(table(head, rows))


if __name__ == "__main__":
    main()
