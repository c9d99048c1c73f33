"""Kernel speed on the CPU: minipallas vs upstream Pallas interpret mode vs plain ``jax.jit``.

Ten kernels of the suite (minipallas/tools/corpora/suite.py), resized to about a million elements,
and six kernels as people write them at the sizes they run them (``realistic_kernels.py``: matmul
1024³, softmax and layer norm 4096×1024, flash attention, a 1-D sum of 2²⁰, masked tanh of 10⁶), run
three ways on the same numpy inputs, timed in the same process and interleaved (median of
``--repeat`` runs, each a block of back-to-back calls of about 5 ms, numpy arrays in and out for all
three: ``run_times``):
- ``minipallas``: ``minipallas.pallas_call(...)(*arrays)``: independent grid points batched
  (``kernels.programs.vectorized_grid``; the "batched" column names those grid axes), the rest as
  XLA loops; and ``fast``, the same with ``match_upstream=False`` (float reductions and dots
  batched too, exact only to rounding);
- ``upstream``: ``jax.jit(pl.pallas_call(..., interpret=True))`` on the same kernel source;
- ``jit``: ``jax.jit`` of the kernel's jnp equivalent (no grid at all).
Goal (issues 5 and 13): at least 10x faster than upstream interpret mode on grids of 64+
steps, never slower, within 2x of ``jax.jit`` and within 1.3x with ``match_upstream=False``.

First-call latency: a fresh call (trace, compile and first run, as a user's first call pays
it), one sample per way: minipallas in both modes, upstream interpret, and ``jax.jit`` of the jnp
equivalent. The six realistic kernels end with issue 13's goal lines, each naming its worst
kernel.

Emission latency: a fresh call traced to a verified module, minipallas vs upstream lowering:
the CPU path (minipallas StableHLO vs upstream's interpret-mode ``jit(...).lower``) and,
when the TPU emitter is present, Mosaic (minipallas vs upstream with
``lowering_platforms=("tpu",)``).

    python -m bench.benchmarks.kernels_bench [--small | --realistic] [--repeat 5] \
        [--kernels add,softmax]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import math
import time

import numpy as np

from bench.common import table
from bench.realistic_kernels import REFERENCES as REALISTIC_REFERENCES
from bench.realistic_kernels import realistic_cases
from minipallas.tools.corpora.suite import BF16, BY_NAME, KERNELS, inputs, normal

# ----- the kernels at bench size, each with its jnp equivalent -----


def _blocked(case_name, shape_in, block, grid, *, extra=(), out=None, **changes):
    """The suite's case ``case_name`` resized: input 0 of ``shape_in`` cut into ``block``."""
    case = BY_NAME[case_name]
    index = case.in_specs[0][1]
    specs = [(block, index), *extra]
    return dataclasses.replace(
        case,
        grid=grid,
        in_specs=specs,
        out_shape=out or (shape_in, case.out_shape[1]),
        out_specs=changes.pop("out_specs", (block, case.out_specs[1])),
        **changes,
    )


def bench_cases():
    """The suite's kernels resized to about a million elements."""
    n = 1024
    return [*_elementwise(n), *_reductions_and_dots(n), *_layouts(n)]


def _elementwise(n: int) -> list:
    add_small = _blocked(
        "add", (n, n), (8, 128), (n // 8, n // 128),
        extra=[((8, 128), lambda i, j: (i, j))], make_inputs=inputs(normal(n, n), normal(n, n)),
    )  # fmt: skip
    add_large = dataclasses.replace(
        add_small,
        name="add_256x512",
        grid=(n // 256, n // 512),
        in_specs=[((256, 512), lambda i, j: (i, j))] * 2,
        out_specs=((256, 512), lambda i, j: (i, j)),
    )
    return [
        dataclasses.replace(add_small, name="add_8x128"),
        add_large,
        _blocked(
            "bias_relu",
            (n, n),
            (256, 256),
            (4, 4),
            extra=[((1, 256), lambda i, j: (0, j))],
            make_inputs=inputs(normal(n, n), normal(1, n)),
        ),
    ]


def _reductions_and_dots(n: int) -> list:
    return [
        _blocked("softmax", (n, n), (64, n), (16,), make_inputs=inputs(normal(n, n))),
        _blocked(
            "row_sum",
            (n, n),
            (256, 256),
            (4, 4),
            out=((n, 1), "float32"),
            out_specs=((256, 1), lambda i, j: (i, 0)),
            make_inputs=inputs(normal(n, n)),
        ),
        _blocked(
            "matmul",
            (512, 512),
            (128, 128),
            (4, 4, 4),
            out=((512, 512), "float32"),
            extra=[((128, 128), lambda i, j, k: (k, j))],
            scratch=(((128, 128), "float32"),),
            out_specs=((128, 128), lambda i, j, k: (i, j)),
            make_inputs=inputs(normal(512, 512), normal(512, 512)),
        ),
        _blocked(
            "bf16_matmul",
            (512, 512),
            (128, 512),
            (4,),
            out=((512, 512), "float32"),
            extra=[((512, 512), lambda i: (0, 0))],
            out_specs=((128, 512), lambda i: (i, 0)),
            make_inputs=inputs(normal(512, 512, dtype=BF16), normal(512, 512, dtype=BF16)),
        ),
        _blocked(
            "layer_norm_partial",
            (1000, n),
            (64, n),
            (16,),
            name="layer_norm_partial",
            extra=[((1, n), lambda i: (0, 0))],
            make_inputs=inputs(normal(1000, n), normal(1, n)),
        ),
    ]


def _layouts(n: int) -> list:
    return [
        _blocked(
            "transpose_blocks",
            (n, n),
            (256, 128),
            (4, 8),
            out=((n, n), "float32"),
            out_specs=((128, 256), lambda i, j: (j, i)),
            make_inputs=inputs(normal(n, n)),
        ),
        _blocked(
            "batched_squeezed",
            (8, 256, 512),
            (None, 128, 256),
            (8, 2, 2),
            make_inputs=inputs(normal(8, 256, 512)),
        ),
    ]


def _layer_norm(jnp, x, g):
    mean = x.sum(axis=1, keepdims=True) / x.shape[1]
    c = x - mean
    return c * (1 / jnp.sqrt((c * c).sum(axis=1, keepdims=True) / x.shape[1] + 1e-5)) * g


def _softmax(jnp, x):
    e = jnp.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


REFERENCES = {
    "add": lambda jnp, x, y: x + y,
    "bias_relu": lambda jnp, x, b: jnp.where(x * 0.5 + b > 0, x * 0.5 + b, (x * 0.5 + b) * 0.01),
    "softmax": _softmax,
    "row_sum": lambda jnp, x: x.sum(axis=1, keepdims=True),
    "matmul": lambda jnp, x, y: jnp.dot(x, y, preferred_element_type=jnp.float32),
    "bf16_matmul": lambda jnp, x, y: jnp.dot(x, y, preferred_element_type=jnp.float32),
    "layer_norm": _layer_norm,
    "transpose_blocks": lambda jnp, x: x.T,
    "batched_squeezed": lambda jnp, x: jnp.tanh(x) + jnp.arange(x.shape[0])[:, None, None],
}


def reference(case):
    return REALISTIC_REFERENCES.get(case.name) or REFERENCES[case.kernel.__name__]


# ----- timing -----


def _ms(samples):
    """Median of the runs, in ms: the ways alternate, so a disturbance on this shared
    machine lands on all of them alike, and the median ignores the odd slow run."""
    return float(np.median(samples)) * 1e3


BLOCK_SECONDS = 0.005  # a timed run: back-to-back calls for at least this long


def run_times(case, repeat):
    """Median ms per call of minipallas (bit for bit with upstream, and with
    ``match_upstream=False``), upstream interpret and jax.jit, numpy in and out. Each run of a
    way is a block of back-to-back calls lasting about ``BLOCK_SECONDS`` (one call for a
    kernel slower than that), as a user calling a kernel many times sees it: a single call of
    a 10 µs kernel after a slow one measures the machine waking up, not the kernel. The ways
    take turns block by block."""
    import jax
    import jax.numpy as jnp

    args = case.inputs()
    ref = reference(case)
    runners = {
        "minipallas": case.minipallas(),
        "fast": case.minipallas(match_upstream=False),
        "upstream": case.upstream(),
        "jit": jax.jit(lambda *xs: ref(jnp, *xs)),
    }

    def call(run):
        out = run(*args)
        [np.asarray(o) for o in (out if isinstance(out, tuple | list) else (out,))]

    calls = {}
    for name, run in runners.items():  # compile, warm up, and size the blocks
        call(run)
        start = time.perf_counter()
        call(run)
        calls[name] = max(1, int(BLOCK_SECONDS / (time.perf_counter() - start)))
    times = {name: [] for name in runners}
    for _ in range(repeat):
        for name, run in runners.items():
            start = time.perf_counter()
            for _ in range(calls[name]):
                call(run)
            times[name].append((time.perf_counter() - start) / calls[name])
    return {name: _ms(t) for name, t in times.items()}


def first_call_times(case):
    """ms from a fresh call object to its first result (trace, compile, run, numpy out), for
    minipallas in both modes, upstream interpret and jax.jit. One sample each: a compile costs
    up to seconds, and only the first call pays it."""
    import jax
    import jax.numpy as jnp

    args = case.inputs()
    ref = reference(case)
    fresh = {
        "minipallas": lambda: case.minipallas(),
        "fast": lambda: case.minipallas(match_upstream=False),
        "upstream": lambda: case.upstream(),
        "jit": lambda: jax.jit(lambda *xs: ref(jnp, *xs)),
    }
    times = {}
    for name, make in fresh.items():
        start = time.perf_counter()
        out = make()(*args)
        [np.asarray(o) for o in (out if isinstance(out, tuple | list) else (out,))]
        times[name] = (time.perf_counter() - start) * 1e3
    return times


def goal_lines(results):
    """Issue 13's goals for the realistic kernels, from ``{name: (steps, run_times)}``, each
    line naming the kernel furthest from it. Where upstream interpret is itself within 10x of
    jax.jit, 10x faster than upstream needs minipallas faster than jit: a line says by how much.
    """
    if not results:
        return []

    def worst(ratio):
        name = max(results, key=lambda k: ratio(*results[k]))
        return name, ratio(*results[name])

    lines = []
    for what, limit, mode in [
        ("default mode", 2.0, "minipallas"),
        ("match_upstream=False", 1.3, "fast"),
    ]:
        name, r = worst(lambda steps, t, mode=mode: t[mode] / t["jit"])
        lines.append(f"{what} within {limit}x of jax.jit: {r <= limit} (worst {name}, {r:.2f}x)")
    many = {k: v for k, v in results.items() if v[0] >= 64}
    if many:
        name = min(many, key=lambda k: many[k][1]["upstream"] / many[k][1]["minipallas"])
        speedup = many[name][1]["upstream"] / many[name][1]["minipallas"]
        lines.append(
            f"default mode at least 10x faster than upstream interpret on 64+ steps: "
            f"{speedup >= 10} (worst {name}, {speedup:.1f}x)"
        )
        for k, (_, t) in many.items():
            up_jit = t["upstream"] / t["jit"]
            if up_jit < 10:
                lines.append(
                    f"  {k}: upstream interpret is only {up_jit:.1f}x slower than jax.jit, so 10x "
                    f"faster than upstream means {10 / up_jit:.1f}x faster than jit "
                    f"(minipallas is {t['minipallas'] / t['jit']:.2f}x jit)"
                )
    return lines


def emission_times(case, repeat):
    """Median ms from a fresh call to a verified module: minipallas and upstream, for the CPU
    path and (with the TPU emitter) for Mosaic. A side that refuses the kernel gives None."""
    import jax

    args = case.inputs()
    specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args]
    ways = {
        "mp_cpu": lambda: case.minipallas().lower(*args, target="stablehlo"),
        "up_cpu": lambda: case.upstream().lower(*specs),
    }
    if importlib.util.find_spec("minipallas.lowering.tpu") is not None:
        ways["mp_tpu"] = lambda: case.minipallas().lower(*args, target="tpu")
        ways["up_tpu"] = lambda: (
            case.upstream(interpret=False).trace(*specs).lower(lowering_platforms=("tpu",))
        )
    samples = {k: [] for k in ("mp_cpu", "up_cpu", "mp_tpu", "up_tpu")}
    failed = set()
    for _ in range(repeat):
        for name, thunk in ways.items():
            if name in failed:
                continue
            start = time.perf_counter()
            try:
                thunk()
            except Exception:  # noqa: BLE001 - a refused kernel is a table cell, not a crash
                failed.add(name)
                continue
            samples[name].append(time.perf_counter() - start)
    return {k: _ms(v) if v and k not in failed else None for k, v in samples.items()}


# ----- the report -----


def batched_axes(case, exact=True):
    """The grid axes minipallas runs batched ("-": the grid runs as loops), with "+pre" where
    the body's stateless part is hoisted out of the sequential loops (passes/kernel/hoisting.py),
    and "+sum" where fast mode sums the sequential axis at once
    (kernels/programs/accumulation.py)."""
    from minipallas.kernels.programs.accumulation import accumulated_program
    from minipallas.kernels.programs.vectorized_grid import (
        vectorized_grid_hoists,
        vectorized_grid_plan,
    )

    kernel = case.minipallas().trace(*case.inputs())
    if not exact and accumulated_program(kernel) is not None:
        return ",".join(map(str, vectorized_grid_plan(kernel, exact) or ())) + "+sum"
    plan = vectorized_grid_plan(kernel, exact)
    if plan is None:
        return "-"
    return ",".join(map(str, plan)) + ("+pre" if vectorized_grid_hoists(kernel, exact) else "")


def _steps(case):
    return int(np.prod(case.grid)) if case.grid else 1


def _fmt(x, digits=1):
    return "-" if x is None else f"{x:.{digits}f}"


def _time(ms):
    """A time in ms to three significant digits (a 10 µs kernel is 0.0100, not 0.01)."""
    digits = max(0, 2 - math.floor(math.log10(ms))) if ms > 0 else 0
    return f"{ms:.{digits}f}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="the suite's own (tiny) sizes")
    parser.add_argument("--realistic", action="store_true", help="the six realistic kernels only")
    parser.add_argument("--repeat", type=int, default=9, help="timed runs per kernel and way")
    parser.add_argument("--kernels", type=lambda s: s.split(","), default=None)
    args = parser.parse_args(argv)
    if args.small:
        cases = [c for c in KERNELS if c.kernel.__name__ in REFERENCES]
    elif args.realistic:
        cases = realistic_cases()
    else:
        cases = bench_cases() + realistic_cases()
    if args.kernels:
        cases = [c for c in cases if c.name in args.kernels]

    realistic = {c.name for c in realistic_cases()}
    rows, emit_rows, first_rows, speedups, vs_jit, fast_vs_jit = [], [], [], [], [], []
    goals = {}
    for case in cases:
        t = run_times(case, args.repeat)
        if case.name in realistic:
            goals[case.name] = (_steps(case), t)
        speedup, jit_ratio = t["upstream"] / t["minipallas"], t["minipallas"] / t["jit"]
        speedups.append((case, speedup))
        vs_jit.append(jit_ratio)
        fast_vs_jit.append(t["fast"] / t["jit"])
        rows.append([
            case.name, _steps(case), batched_axes(case), _time(t["minipallas"]),
            _time(t["upstream"]), _time(t["jit"]), _fmt(speedup), _fmt(jit_ratio, 2),
            batched_axes(case, exact=False), _time(t["fast"]), _fmt(fast_vs_jit[-1], 2),
        ])  # fmt: skip
        f = first_call_times(case)
        first_rows.append(
            [case.name, *(_fmt(f[k]) for k in ("minipallas", "fast", "upstream", "jit"))]
        )
        e = emission_times(case, max(1, args.repeat // 2))
        emit_rows.append([
            case.name, _fmt(e["mp_cpu"]), _fmt(e["up_cpu"]), _fmt(e["mp_tpu"]), _fmt(e["up_tpu"]),
        ])  # fmt: skip

    print("CPU run time, ms per call (median of runs of back-to-back calls; numpy in and out);")
    print("speedup = upstream / minipallas;")
    print("fast = pallas_call(..., match_upstream=False), exact only to rounding")
    print(table(
        ["kernel", "grid steps", "batched", "minipallas", "upstream interpret", "jax.jit",
         "speedup", "minipallas/jit", "fast batched", "fast", "fast/jit"],
        rows,
    ))  # fmt: skip
    print()
    print("first-call latency, ms: a fresh call traced, compiled and run once (one sample)")
    print(table(["kernel", "minipallas", "fast", "upstream interpret", "jax.jit"], first_rows))
    print()
    print("emission latency, ms: a fresh call traced to a verified module ('-': not emitted)")
    print(table(
        ["kernel", "minipallas stablehlo", "upstream interpret lower", "minipallas tpu",
         "upstream tpu lower"],
        emit_rows,
    ))  # fmt: skip
    batched = [row[2] != "-" for row in rows]
    many = [s for (case, s), b in zip(speedups, batched, strict=True) if b and _steps(case) >= 64]
    print()
    print(f"never slower than upstream interpret: {min(s for _, s in speedups) >= 1}")
    if many:
        print(f"batched grids of 64+ steps at least 10x faster: {min(many) >= 10} "
              f"(min {min(many):.1f}x)")  # fmt: skip
    for what, ratios in [
        ("batched kernels", [r for r, b in zip(vs_jit, batched, strict=True) if b]),
        ("per-block kernels (float reductions, dots)",
         [r for r, b in zip(vs_jit, batched, strict=True) if not b]),
        ("all kernels with match_upstream=False", fast_vs_jit),
    ]:  # fmt: skip
        if ratios:
            print(f"{what} within 2x of jax.jit: {max(ratios) <= 2} (worst {max(ratios):.2f}x)")
    lines = goal_lines(goals)
    if lines:
        print()
        print("issue 13's goals on the realistic kernels (one run, medians of a shared machine):")
        print("\n".join(lines))
    return rows, emit_rows, first_rows, lines


if __name__ == "__main__":
    main()
