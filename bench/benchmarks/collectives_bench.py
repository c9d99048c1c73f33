"""What race detection costs the multi-program interpreter (issue 15).

A kernel of ``G`` programs sharing one collective buffer: each program makes ``K`` rounds of
(write its own row, barrier, read the whole buffer, barrier), so every round is race-free and
every access is checked. Timed with and without the race detector (same schedule, same
switches), median of ``--repeat`` runs; "per access" is the detector's extra time divided by
the number of checked accesses. The goal: linear in the accesses and at most 3x the
interpreter without it.

Upstream's detector, for comparison: TPU interpret mode (``pltpu.InterpretParams(detect_races=
...)``, 2 cores, a "parallel" grid) on an (8, 128)-block add of ``steps`` grid steps, with and
without it. Upstream keeps every access in a list per buffer and scans it, so its extra cost per
step grows with the run; ours stays constant per access.

The pure program on XLA (``call.program(x)`` compiled; upstream has none: it rejects collective
axes), once with each group's epochs batched over the collective axis (the default,
``kernels/collective/batched.py``) and once with its programs one at a time: "rows", ``G``
programs each write their row of a shared ``(G, W)`` buffer, meet at a barrier and sum the
whole buffer; "tanh", each computes ``exp(-y*y) + y`` of ``y = 2 tanh(x)`` on its (8, W) block,
shares it, and after the barrier writes ``tanh`` of its neighbour's block plus its own.

    python -m bench.benchmarks.collectives_bench [--repeat 3] [--small]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import minipallas as mp
import minipallas.numpy as jnp
from bench.common import table
from minipallas import tpu
from minipallas.ir.interpret.api import _bind
from minipallas.ir.interpret.engine import Interpreter
from minipallas.ir.interpret.programs import Programs


def rounds_kernel(g: int, k: int, width: int):
    def kernel(x_ref, o_ref):
        def body(shared):
            i = mp.axis_index("x")

            def step(r, carry):
                shared[mp.ds(i, 1), :] = x_ref[mp.ds(i, 1), :] + r.astype(jnp.float32)
                mp.barrier("x")
                total = shared[...].sum(axis=0, keepdims=True)
                mp.barrier("x")
                return carry + total

            acc = mp.fori_loop(0, k, step, jnp.zeros((1, width), jnp.float32))
            o_ref[mp.ds(i, 1), :] = acc

        mp.run_scoped(body, tpu.VMEM((g, width), jnp.float32), collective_axes=("x",))

    t = mp.RefType((g, width), jnp.float32)
    return mp.trace(kernel, t, t)


def run(fn, g: int, width: int, detect: bool) -> float:
    x = np.ones((g, width), np.float32)
    out = np.zeros_like(x)
    interp = Interpreter(grid=(g,))
    bound = [_bind(interp, "x", p.type, a) for p, a in zip(fn.params, (x, out), strict=True)]
    start = time.perf_counter()
    Programs((g,), ("x",), detect_races=detect).run(fn, bound)
    return time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--small", action="store_true", help="tiny sizes (a smoke run)")
    args = parser.parse_args(argv)
    rows = []
    sizes = [(4, 16, 128), (4, 64, 128), (4, 256, 128), (16, 64, 128), (4, 64, 4096)]
    for g, k, width in [(2, 2, 8)] if args.small else sizes:
        fn = rounds_kernel(g, k, width)
        off = float(np.median([run(fn, g, width, False) for _ in range(args.repeat)]))
        on = float(np.median([run(fn, g, width, True) for _ in range(args.repeat)]))
        accesses = g * k * 3  # per round: read x (an argument: shared), write row, read buffer
        rows.append([g, k, width, accesses, f"{off * 1e3:.1f}", f"{on * 1e3:.1f}",
                     f"{on / off:.2f}", f"{(on - off) / accesses * 1e6:.1f}"])  # fmt: skip
    print("multi-program interpreter, ms (median); per access = detector's extra time, us")
    print(table(["programs", "rounds", "row width", "checked accesses", "without detector",
                 "with detector", "ratio", "per access (us)"], rows))  # fmt: skip
    upstream_rows = []
    for steps in (4,) if args.small else (16, 64, 256):
        off, on = (upstream_time(steps, d, args.repeat) for d in (False, True))
        upstream_rows.append([steps, f"{off * 1e3:.0f}", f"{on * 1e3:.0f}", f"{on / off:.2f}",
                              f"{(on - off) / steps * 1e3:.2f}"])  # fmt: skip
    print()
    print("upstream TPU interpret mode, ms (median); per step = detector's extra time, ms")
    print(table(["grid steps", "without detector", "with detector", "ratio", "per step (ms)"],
                upstream_rows))  # fmt: skip
    pure_rows = []
    shapes = [(4, 128)] if args.small else [(8, 1024), (64, 1024), (256, 1024)]
    for body, g, width in [(b, g, w) for b in ("rows", "tanh") for g, w in shapes]:
        batched, looped = (pure_time(body, g, width, b, args.repeat) for b in (True, False))
        pure_rows.append([body, g, width, f"{batched * 1e3:.3f}", f"{looped * 1e3:.3f}",
                          f"{looped / batched:.2f}x"])  # fmt: skip
    print()
    print("the pure program on XLA, ms (median): epochs batched vs programs one at a time")
    print(table(["body", "programs", "row width", "batched", "one at a time", "speedup"],
                pure_rows))  # fmt: skip
    return rows, upstream_rows, pure_rows


def pure_time(body: str, g: int, width: int, batched: bool, repeat: int) -> float:
    from minipallas.kernels.collective.program import collective_program

    rows = 1 if body == "rows" else 8

    def kernel(x_ref, o_ref):
        def share_rows(shared):
            shared[mp.ds(mp.axis_index("x"), 1), :] = x_ref[...] * 2.0
            mp.barrier("x")
            o_ref[...] = shared[...].sum(axis=0, keepdims=True)

        def share_tanh(shared):
            i = mp.axis_index("x")
            y = jnp.tanh(x_ref[...]) * 2.0
            y = jnp.exp(-y * y) + y
            shared[mp.ds(i * rows, rows), :] = y
            mp.barrier("x")
            o_ref[...] = jnp.tanh(shared[mp.ds(((i + 1) % g) * rows, rows), :] + y)

        mp.run_scoped(share_rows if body == "rows" else share_tanh,
                      tpu.VMEM((g * rows, width), jnp.float32), collective_axes=("x",))  # fmt: skip

    block = mp.BlockSpec((rows, width), lambda i: (i, 0))
    call = mp.pallas_call(kernel, mp.ArrayType((g * rows, width), jnp.float32), grid=(g,),
                          in_specs=[block], out_specs=block, grid_names=("x",),
                          collectives="simulate")  # fmt: skip
    x = np.ones((g * rows, width), np.float32)
    compiled = mp.compile(collective_program(call.trace(x), ("x",), batched))
    compiled(x)
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        compiled(x)
        samples.append(time.perf_counter() - start)
    return float(np.median(samples))


def upstream_time(steps: int, detect: bool, repeat: int) -> float:
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1.0

    block = pl.BlockSpec((8, 128), lambda i: (i, 0))
    call = jax.jit(
        pl.pallas_call(
            kernel,
            jax.ShapeDtypeStruct((8 * steps, 128), jnp.float32),
            grid=(steps,),
            in_specs=[block],
            out_specs=block,
            interpret=pltpu.InterpretParams(detect_races=detect, num_cores_or_threads=2),
            compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
        )
    )
    x = np.ones((8 * steps, 128), np.float32)
    np.asarray(call(x))
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        np.asarray(call(x))
        samples.append(time.perf_counter() - start)
    return float(np.median(samples))


if __name__ == "__main__":
    main()
