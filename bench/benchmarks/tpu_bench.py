"""Speed on the chip: minipallas's Mosaic module vs upstream's vs ``jax.jit`` of plain jnp.

Each kernel is one source for both Pallas sides (``minipallas/tools/corpora/suite.py``'s ``ns``
form). The ways, timed in the same run:
- ``minipallas``: ``jax.jit(pallas_call)``, its own Mosaic module (the platform table's ``tpu``
  row) with the target's exact optimizations (``fuse-grid-steps``) and ``--passes`` if given;
- ``plain``: the same without them (``optimize=False``, no ``--passes``): upstream's module;
- ``fast``: the same at ``optimize="fast"``, whose passes may reorder float sums
  (``reassociate-sums``), its bits ``same`` as upstream's, or else within the ``envelope`` of
  one sum of all the terms of each output element (``reorder.bound`` against a float64
  evaluation of the kernel's plain equivalent: the fast level changes only kernels that sum
  their inputs), or ``DIFF``;
- ``upstream``: upstream's ``pallas_call(interpret=False)``;
- ``jit``: the kernel's plain ``jnp`` equivalent under ``jax.jit``.
A single synchronous call costs ~0.6 ms on a TPU VM however small, so each way is timed as
``--calls`` (50) calls issued back to back and one ``block_until_ready`` at the end, best of
``--repeat`` such runs, the ways interleaved; back to back, a call still costs ~0.11 ms however
small, so ``--large`` runs the realistic kernels over 8-16x the grid steps. The table gives ms
per call, upstream/minipallas, plain/minipallas (what the optimizations bring), the grid before
and after them, whether minipallas's and plain's bits equal upstream's, and minipallas's rate
as a share of the chip's peak (v5e: 197 TFLOP/s bf16, 819 GB/s HBM): TFLOP/s for matmuls and
attention, GB/s (bytes read and written once) for the rest, and jit/minipallas (above 1,
minipallas's kernel beats XLA's). Last, the goal lines: the geometric mean of upstream/minipallas
over the kernels of 256 or more grid steps and the least ratio; the geometric mean of
jit/minipallas over every kernel and the least row; the same at the best level whose bits are
``same`` or in the ``envelope`` (the default or ``fast``), and how many kernels reach 0.8.

    make tpu-bench [TPU_ARGS=--large] [PASSES='my-pass']   # on a TPU machine
    python -m bench.benchmarks.tpu_bench [--kernels softmax_8192] [--calls 50] [--repeat 5] \
        [--large]
    python -m bench.benchmarks.tpu_bench --passes 'fuse-grid-steps{max_unroll=8}'  # one's own pass
    python -m bench.benchmarks.tpu_bench --large --kernels reduce_1d_16777216 \
        --fast-passes 'reassociate-sums{window_bytes=1048576}'  # another fast pipeline
    python -m bench.benchmarks.tpu_bench --cpu  # tiny sizes on the CPU: the machinery only

Kernels: blocked matmul bf16 4096³ in 512-blocks, f32 2048³, softmax and layer norm of
8192×2048, flash attention S=4096 D=128, and ``bench/realistic_kernels.py``'s six (``--large``:
at its large sizes).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.realistic_kernels import REFERENCES as REALISTIC
from bench.realistic_kernels import flash_attention, realistic_cases
from minipallas.passes.registry import load as load_passes
from minipallas.tools.corpora.suite import BF16, Case, inputs, layer_norm, matmul, normal, softmax
from minipallas.tools.envelope.reorder import UNIT_ROUNDOFF, bound

PEAK_FLOPS = 197e12  # v5e, bf16
PEAK_BYTES = 819e9  # v5e HBM


def _softmax(jnp: Any, x: Any) -> Any:
    e = jnp.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _layer_norm(jnp: Any, x: Any, g: Any) -> Any:
    c = x - x.sum(axis=1, keepdims=True) / x.shape[1]
    return c * (1.0 / jnp.sqrt((c * c).sum(axis=1, keepdims=True) / x.shape[1] + 1e-5)) * g


REFERENCES: dict[str, Callable[..., Any]] = {
    "matmul": lambda jnp, x, y: jnp.dot(x, y, preferred_element_type=jnp.float32),
    "softmax": _softmax,
    "layer_norm": _layer_norm,
    "flash_attention": REALISTIC["flash_attention"],
    "reduce_1d": REALISTIC["reduce_1d"],
    "masked_tanh": REALISTIC["masked_tanh"],
}


@dataclasses.dataclass(frozen=True)
class Bench:
    case: Case
    flops: float = 0.0  # 0: the kernel is bound by memory, rated by bytes moved

    def reference(self, jnp: Any) -> Callable[..., Any]:
        fn = REFERENCES[self.case.kernel.__name__]
        return lambda *args: fn(jnp, *args)

    def bytes_moved(self, inputs: Sequence[np.ndarray] | None = None) -> int:
        """Every input read once, every output written once (``inputs``: the case's, when
        already made)."""
        outs = self.case.out_shape if self.case.multiple_outputs else (self.case.out_shape,)
        written = sum(int(np.prod(s)) * np.dtype(d).itemsize for s, d in outs)
        made = self.case.inputs() if inputs is None else inputs
        return written + sum(a.nbytes for a in made)


def _matmul(name: str, n: int, block: int, dtype: Any) -> Bench:
    spec = ((block, block), None)
    return Bench(
        Case(
            name,
            matmul,
            ((n, n), "float32"),
            inputs(normal(n, n, dtype=dtype), normal(n, n, dtype=dtype)),
            grid=(n // block,) * 3,
            in_specs=[(spec[0], lambda i, j, k: (i, k)), (spec[0], lambda i, j, k: (k, j))],
            out_specs=(spec[0], lambda i, j, k: (i, j)),
            scratch=((spec[0], "float32"),),
            dimension_semantics=("parallel", "parallel", "arbitrary"),
        ),
        flops=2.0 * n**3,
    )


def _rows(name: str, kernel: Any, rows: int, cols: int, block: int, gain: bool) -> Bench:
    makers = (normal(rows, cols), *((normal(1, cols),) if gain else ()))
    specs = [((block, cols), lambda i: (i, 0)), *((((1, cols), lambda i: (0, 0)),) if gain else ())]
    return Bench(
        Case(
            name,
            kernel,
            ((rows, cols), "float32"),
            inputs(*makers),
            grid=(rows // block,),
            in_specs=specs,
            out_specs=((block, cols), lambda i: (i, 0)),
            dimension_semantics=("parallel",),
        )
    )


def _attention(name: str, s: int, d: int, block: int) -> Bench:
    q = ((block, d), lambda i, j: (i, 0))
    kv = ((block, d), lambda i, j: (j, 0))
    return Bench(
        Case(
            name,
            flash_attention,
            ((s, d), "float32"),
            inputs(*(normal(s, d),) * 3),
            grid=(s // block, s // block),
            in_specs=[q, kv, kv],
            out_specs=q,
            scratch=(((block, 1), "float32"), ((block, 1), "float32"), ((block, d), "float32")),
            dimension_semantics=("parallel", "arbitrary"),
        ),
        flops=4.0 * s * s * d,
    )


# (matmul bf16 n, f32 n, their block, softmax/layer norm rows, cols, row block, attention S, D,
# its block) on the chip, and at the sizes the CPU runs in a second
SIZES = {False: (4096, 2048, 512, 8192, 2048, 128, 4096, 128, 256),
         True: (256, 256, 128, 64, 256, 8, 256, 128, 128)}  # fmt: skip


def benches(small: bool, large: bool = False) -> list[Bench]:
    """The chip's kernels (``small``: tiny, for ``--cpu``), then the six realistic ones
    (``large``: at ``realistic_kernels.SIZES[True]``)."""
    n16, n32, mblock, rows, cols, rblock, s, d, ablock = SIZES[small]

    def tag(name: str, size: int) -> str:
        return name if small else f"{name}_{size}"

    made = [
        _matmul(tag("matmul_bf16", n16), n16, mblock, BF16),
        _matmul(tag("matmul_f32", n32), n32, mblock, np.float32),
        _rows(tag("softmax", rows), softmax, rows, cols, rblock, False),
        _rows(tag("layer_norm", rows), layer_norm, rows, cols, rblock, True),
        _attention(tag("flash_attention", s), s, d, ablock),
    ]
    if small:
        return made

    def flops(case: Case) -> float:
        if case.kernel is matmul:
            return 2.0 * case.out_shape[0][0] ** 3
        if case.kernel is flash_attention:
            return 4.0 * case.out_shape[0][0] ** 2 * case.out_shape[0][1]
        return 0.0

    return [*made, *(Bench(c, flops(c)) for c in realistic_cases(large))]


def per_call_ms(fn: Callable[..., Any], args: list[Any], calls: int) -> float:
    """ms per call of ``calls`` calls issued back to back, one wait at the end (the device runs
    them in order, so the last done means all are)."""
    import jax

    start = time.perf_counter()
    for _ in range(calls):
        out = fn(*args)
    jax.block_until_ready(out)
    return (time.perf_counter() - start) / calls * 1e3


def ways(bench: Bench, options: argparse.Namespace) -> dict[str, Callable[..., Any]]:
    import jax
    import jax.numpy as jnp

    case = bench.case
    return {
        "minipallas": jax.jit(case.minipallas(passes=options.passes)),
        "plain": jax.jit(case.minipallas(optimize=False)),
        "fast": jax.jit(fast_level(case, options)[0]),
        "upstream": case.upstream(interpret=options.cpu),
        "jit": jax.jit(bench.reference(jnp)),
    }


def fast_level(case: Case, options: argparse.Namespace) -> tuple[Any, bool | str]:
    """The fast way's call and the level it runs at: ``optimize="fast"``, or, with
    ``--fast-passes``, those passes before the default level's (to time another fast
    pipeline in the same run)."""
    if options.fast_passes:
        passes = ",".join(p for p in (options.passes, options.fast_passes) if p)
        return case.minipallas(passes=passes), True
    return case.minipallas(passes=options.passes, optimize="fast"), "fast"


def grids(
    bench: Bench, options: argparse.Namespace, inputs: Sequence[np.ndarray]
) -> tuple[tuple, tuple, bool]:
    """The kernel's grid as written and as minipallas runs it on the chip, and whether the fast
    level runs another kernel than the default."""
    from minipallas.lowering import TARGETS
    from minipallas.passes import run

    call = bench.case.minipallas(passes=options.passes)
    kernel = call.trace(*inputs, memory_space=TARGETS["tpu"].memory_space)
    ran = run(kernel, TARGETS["tpu"].pipeline_for(kernel))
    call, level = fast_level(bench.case, options)
    fast = call.trace(*inputs, memory_space=TARGETS["tpu"].memory_space)
    fast = run(fast, TARGETS["tpu"].pipeline_for(fast, optimize=level))
    return bench.case.grid, ran.grid, str(fast) != str(ran)


def measure(bench: Bench, device: Any, options: argparse.Namespace) -> dict[str, Any]:
    import jax

    case = bench.case
    inputs = case.inputs()  # made once: at --large sizes each set is hundreds of MB
    args = [jax.device_put(a, device) for a in inputs]
    made = ways(bench, options)
    outs = {k: np.asarray(jax.block_until_ready(f(*args))) for k, f in made.items()}  # warm
    best = dict.fromkeys(made, float("inf"))
    for _ in range(options.repeat):
        for k, f in made.items():
            best[k] = min(best[k], per_call_ms(f, args, options.calls))
    seconds = best["minipallas"] / 1e3
    if bench.flops:
        rate, share = (
            f"{bench.flops / seconds / 1e12:.1f} TFLOP/s",
            bench.flops / seconds / PEAK_FLOPS,
        )
    else:
        moved = bench.bytes_moved(inputs)
        rate, share = f"{moved / seconds / 1e9:.0f} GB/s", moved / seconds / PEAK_BYTES
    written, ran, fast_changed = grids(bench, options, inputs)
    return {
        "kernel": case.name,
        "grid": list(written),
        "grid_run": list(ran),
        **{f"{k}_ms": round(v, 4) for k, v in best.items()},
        "upstream_over_minipallas": round(best["upstream"] / best["minipallas"], 3),
        "plain_over_minipallas": round(best["plain"] / best["minipallas"], 3),
        "jit_over_minipallas": round(best["jit"] / best["minipallas"], 3),
        "jit_over_fast": round(best["jit"] / best["fast"], 3),
        "same_bits": _same(outs["minipallas"], outs["upstream"]),
        "plain_same_bits": _same(outs["plain"], outs["upstream"]),
        "fast_bits": fast_verdict(bench, inputs, outs["fast"], outs["upstream"]),
        "fast_changed": fast_changed,  # else the fast level runs the default's kernel
        "rate": rate,
        "share_of_peak": round(share, 3),
    }


def _same(mine: np.ndarray, theirs: np.ndarray) -> bool:
    return bool(
        mine.dtype == theirs.dtype and mine.shape == theirs.shape
        and mine.tobytes() == theirs.tobytes()
    )  # fmt: skip


def fast_verdict(
    bench: Bench, inputs: Sequence[np.ndarray], fast: np.ndarray, upstream: np.ndarray
) -> str:
    """``same`` bits as upstream's; else ``envelope`` when each output element lies within the
    order bound of one sum of all its terms (``reorder.bound(n) * u * sum|x_i|``, ``n`` the
    inputs' elements per output element) of the float64 value of the kernel's plain
    equivalent, evaluated by numpy; else ``DIFF``."""
    if _same(fast, upstream):
        return "same"
    reference = bench.reference(np)
    wide = [np.asarray(a, np.float64) for a in inputs]
    try:
        exact = np.asarray(reference(*wide), np.float64)
        magnitude = np.asarray(reference(*[np.abs(a) for a in wide]), np.float64)
    except Exception:  # not numpy-evaluable: no envelope, so bits decide
        return "DIFF"
    terms = sum(a.size for a in inputs) // max(exact.size, 1)
    allowed = bound(terms) * UNIT_ROUNDOFF * magnitude
    inside = exact.shape == fast.shape and np.all(np.abs(fast - exact) <= allowed)
    return "envelope" if inside else "DIFF"


def _geomean(xs: Sequence[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def goal(rows: list[dict[str, Any]]) -> str:
    """The issue's goal lines: upstream/minipallas over kernels of 256 or more grid steps as
    written; jit/minipallas over every kernel."""
    chosen = [r for r in rows if math.prod(r["grid"]) >= 256]
    least = min(rows, key=lambda r: r["upstream_over_minipallas"])
    slowest = min(rows, key=lambda r: r["jit_over_minipallas"])
    same = sum(r["same_bits"] for r in rows)
    upstream = (
        f"{len(chosen)} kernels of >= 256 steps: upstream/minipallas geometric mean "
        f"{_geomean([r['upstream_over_minipallas'] for r in chosen]):.2f}; "
        if chosen
        else "no kernel of 256 or more grid steps; "
    )
    best = {r["kernel"]: best_level(r) for r in rows}
    least_best = min(rows, key=lambda r: best[r["kernel"]][1])
    reached = sum(ratio >= GOAL_RATIO for _, ratio in best.values())
    fast = [k for k, (level, _) in best.items() if level == "fast"]
    return (
        f"{upstream}least over all {least['upstream_over_minipallas']:.2f} ({least['kernel']}); "
        f"same bits as upstream {same}/{len(rows)}\n"
        f"{len(rows)} kernels: jit/minipallas geometric mean "
        f"{_geomean([r['jit_over_minipallas'] for r in rows]):.2f}; "
        f"least {slowest['jit_over_minipallas']:.2f} ({slowest['kernel']})\n"
        f"at the best level whose bits are same or in the envelope: jit/minipallas geometric "
        f"mean {_geomean([ratio for _, ratio in best.values()]):.2f}; least "
        f"{best[least_best['kernel']][1]:.2f} ({least_best['kernel']}); {reached}/{len(rows)} "
        f">= {GOAL_RATIO}; fast in {', '.join(fast) if fast else 'none'}"
    )


GOAL_RATIO = 0.8  # issue 49: every kernel this close to jax.jit at its best level


def best_level(row: dict[str, Any]) -> tuple[str, float]:
    """The level (``default`` or ``fast``) with the higher jit/minipallas whose bits are
    upstream's or within the envelope (``fast_bits``), and that ratio; ``fast`` only where it
    runs another kernel (else the two times are one kernel's, apart by noise)."""
    default = ("default", row["jit_over_minipallas"])
    fast = ("fast", row.get("jit_over_fast", 0.0))
    good = row.get("fast_changed") and row.get("fast_bits") in ("same", "envelope")
    return fast if good and fast[1] > default[1] else default


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=lambda s: s.split(","), default=None)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--cpu", "--dry-run", action="store_true", dest="cpu")
    parser.add_argument("--large", action="store_true", help="the realistic kernels, larger")
    parser.add_argument("--passes", default="", help="a pipeline run on each kernel first")
    parser.add_argument("--load", action="append", default=[], help="a file of passes")
    parser.add_argument("--fast-passes", default="", help="the fast column's passes instead of "
                        'optimize="fast" (before the default level\'s)')  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("tpu-bench.json"))
    options = parser.parse_args(argv)
    if options.cpu:
        options.calls, options.repeat = min(options.calls, 2), 1
    import jax

    for path in options.load:
        load_passes(path)
    device = jax.devices("cpu" if options.cpu else "tpu")[0]
    chosen = [
        b
        for b in benches(options.cpu, options.large)
        if not options.kernels or b.case.name in options.kernels
    ]
    rows = [measure(b, device, options) for b in chosen]
    print(f"ms per call ({options.calls} back to back, best of {options.repeat})", end=" ")
    print(f"on {device.device_kind}" + (f"; --passes '{options.passes}'" if options.passes else "")
          + (f"; fast: '{options.fast_passes}'" if options.fast_passes else ""))  # fmt: skip
    print(
        f"{'kernel':24} {'grid':>12} {'run as':>12} {'minipallas':>10} {'plain':>7} "
        f"{'upstream':>8} {'jit':>7} {'up/mp':>6} {'pl/mp':>6} {'jit/mp':>6} {'bits':>5} "
        f"{'fast':>7} {'jit/fast':>8} {'fast bits':>9}  rate (share of peak)"
    )
    for r in rows:
        bits = "same" if r["same_bits"] and r["plain_same_bits"] else "DIFF"
        print(
            f"{r['kernel']:24} {'x'.join(map(str, r['grid'])):>12} "
            f"{'x'.join(map(str, r['grid_run'])):>12} {r['minipallas_ms']:10.3f} "
            f"{r['plain_ms']:7.3f} {r['upstream_ms']:8.3f} {r['jit_ms']:7.3f} "
            f"{r['upstream_over_minipallas']:6.2f} {r['plain_over_minipallas']:6.2f} "
            f"{r['jit_over_minipallas']:6.2f} {bits:>5} {r['fast_ms']:7.3f} "
            f"{r['jit_over_fast']:8.2f} {r['fast_bits']:>9}  "
            f"{r['rate']} ({r['share_of_peak']:.0%})"
        )
    print(goal(rows))
    options.out.write_text(json.dumps({"device": device.device_kind, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
