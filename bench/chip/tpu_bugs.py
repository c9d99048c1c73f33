"""What a TPU does with each kernel of the bug corpus (``minipallas/tools/corpora/bug_corpus``,
issue 39): compiles it or not, halts, hangs, gives values that vary from run to run, wrong values,
or right ones (for a buggy kernel: latent). Needs only jax and numpy (no minipallas).

    python -m bench.chip.tpu_bugs [--only a,b] [--out tpu-bugs.json]   # on a TPU machine
    python -m bench.chip.tpu_bugs --cpu --only matmul_init              # the machinery, on the CPU

Each entry is compiled (``interpret=False``; a refusal is ``compile-error``), then run three
times, each after ``scribble``: a kernel filling most of VMEM with a constant that changes from
run to run and a large HBM array of it freed again, so that a read of stale VMEM or HBM shows
as values that vary. Runs that differ in bits: ``varies``; equal and not ``want`` within
``common.RTOL``/``ATOL``: ``wrong``; equal to ``want``: ``correct`` (``latent`` for an entry
with a bug).

Opening the chip costs ~15 s, so entries run in one worker process, which notes each before
starting it. A kernel that halts the chip ("RuntimeUnexpectedCoreHalt") fails or kills its
process; one that hangs is killed after ``--timeout`` s: the parent records the entry as
``halt`` or ``hang`` and starts a fresh worker after it (as ``bench/chip/tpu_check.py`` does). The
entries expected to halt or hang run last: together, a fresh worker after each that ends one
(~15 s each), or with ``--isolate`` each in a worker of its own, so that one that does not
halt but leaves HBM corrupted cannot change the next one's behaviour.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.chip.workers import HALT_EXIT, DeviceFailure, run_worker, write_journal
from minipallas.tools.corpora.bug_corpus import BY_NAME, ENTRIES
from minipallas.tools.corpora.bug_corpus.common import matches, outputs

RISKY = ("halt", "hang")  # expected chip behaviours that end a worker
RUNS = 3


def first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"[:300]


# ----- garbage between runs -----


def _scribbler(rows: int, chunk: int, limit: int | None, cpu: bool) -> Any:
    """A kernel writing a constant over ``rows`` x 1024 f32 of VMEM scratch, chunk by chunk."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(c_ref, o_ref, big_ref):
        def body(i, carry):
            big_ref[pl.ds(pl.multiple_of(i * chunk, chunk), chunk), :] = jnp.full(
                (chunk, 1024), c_ref[0], jnp.float32
            )
            return carry

        jax.lax.fori_loop(0, rows // chunk, body, 0)
        o_ref[...] = big_ref[0:8, 0:128] + big_ref[rows - 8 : rows, 896:1024]

    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.VMEM((rows, 1024), jnp.float32)],
        compiler_params=pltpu.CompilerParams(vmem_limit_bytes=limit),
        interpret=cpu,
    )
    return jax.jit(call)


# 96 MiB of a v5e's 128 MiB of VMEM under a raised limit; else 12 MiB under the default one
SIZES = ((24 * 1024, 512, 110 << 20), (3 * 1024, 512, None))


@functools.cache
def scribbler(device: Any, cpu: bool) -> Any:
    """The largest scribbling kernel that compiles, compiled for ``device``."""
    import jax

    constant = jax.device_put(np.zeros(1, np.float32), device)
    if cpu:
        return _scribbler(64, 8, None, True).lower(constant).compile()
    for rows, chunk, limit in SIZES:
        try:
            return _scribbler(rows, chunk, limit, False).lower(constant).compile()
        except Exception as e:  # too much VMEM for this chip: the next size
            print(f"scribbler of {rows} rows: {first_line(e)}", file=sys.stderr)
    raise RuntimeError("no scribbling kernel compiles")


def scribble(run: int, device: Any, cpu: bool) -> None:
    """Leaves VMEM and freed HBM holding a constant particular to ``run``."""
    import jax

    value = np.float32([3.25, -1.0e6, 7.5e-3, 42.0][run % 4])
    constant = jax.device_put(np.array([value], np.float32), device)
    jax.block_until_ready(scribbler(device, cpu)(constant))
    junk = jax.device_put(np.full(1 << 22, value, np.float32), device)  # 16 MiB, then freed
    jax.block_until_ready(junk)
    junk.delete()


# ----- one entry on the device -----


def same_bits(a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...]) -> bool:
    """Equal shapes, dtypes and bits (NaNs with the same bits included)."""
    return all(
        x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
        for x, y in zip(a, b, strict=True)
    )


def measure(entry: Any, device: Any, cpu: bool) -> dict[str, Any]:
    """The entry's behaviour on ``device`` (module doc); ``DeviceFailure`` when a run fails."""
    import jax

    record: dict[str, Any] = {"name": entry.name}
    values = [jax.device_put(a, device) for a in entry.args]
    start = time.perf_counter()
    try:
        compiled = jax.jit(functools.partial(entry.fn, interpret=cpu)).lower(*values).compile()
    except Exception as e:  # Mosaic's refusal, whatever its class
        record.update(chip="compile-error", detail=first_line(e))
        record["seconds"] = round(time.perf_counter() - start, 3)
        return record
    runs = []
    for run in range(RUNS):
        scribble(run, device, cpu)
        try:
            runs.append(outputs(jax.block_until_ready(compiled(*values))))
        except Exception as e:
            raise DeviceFailure(first_line(e)) from e
    want = entry.want(*entry.args)
    right = [matches(r, want) for r in runs]
    if not all(same_bits(runs[0], r) for r in runs[1:]):
        record["chip"] = "varies"
    elif right[0]:
        record["chip"] = "correct" if entry.bug is None else "latent"
    else:
        record["chip"] = "wrong"
    record["right_runs"] = sum(right)
    worst = max(
        (
            float(np.nanmax(np.abs(g.astype(np.float64) - w), initial=0.0))
            for g, w in zip(runs[0], outputs(want), strict=True)
            if g.shape == w.shape
        ),
        default=float("nan"),
    )
    record["max_error"] = worst if np.isfinite(worst) else str(worst)
    record["nan"] = any(bool(np.isnan(o).any()) for r in runs for o in r)
    record["seconds"] = round(time.perf_counter() - start, 3)
    return record


def worker(names: list[str], journal: Path, cpu: bool, simulate_halt: str | None = None) -> int:
    """Measures ``names`` in order into ``journal`` (``workers.write_journal``)."""
    import jax

    device = jax.devices("cpu" if cpu else "tpu")[0]

    def failed(name: str, e: Exception, halted: bool) -> dict[str, Any]:
        if halted:
            return {"name": name, "chip": "halt", "detail": str(e)}
        return {"name": name, "chip": "error", "detail": first_line(e)}

    return write_journal(
        names, journal, lambda name: measure(BY_NAME[name], device, cpu), failed, simulate_halt
    )


# ----- the parent: workers, restarts, the report -----


def run_batch(names: list[str], options: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Results for ``names``, a fresh worker after the entry that killed or hung the last."""
    results: dict[str, dict[str, Any]] = {}
    pending, retries = list(names), 0
    while pending:
        command = [sys.executable, "-m", __spec__.name, "--worker", "--only", ",".join(pending)]
        command += ["--cpu"] if options.cpu else []
        if options.simulate_halt:
            command += ["--simulate-halt", options.simulate_halt]
        ran = run_worker(command, options.timeout)
        results.update(ran.results)
        started, code, log, timed_out = ran.started, ran.code, ran.log, ran.timed_out
        if started is not None:
            chip, why = ("hang", "timed out") if timed_out else ("halt", f"worker died ({code})")
            results[started] = {"name": started, "chip": chip, "detail": why, "log": log}
        elif code not in (0, HALT_EXIT) and not any(n in results for n in pending):
            retries += 1  # the chip can refuse a program started just after another ended
            if retries > 2:
                for name in pending:
                    results[name] = {"name": name, "chip": "error", "detail": log[-300:]}
            time.sleep(5)
        pending = [n for n in pending if n not in results]
    return results


def table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'entry':28} {'bug':16} {'expected':13} {'measured':13} {'s':>6}  detail"]
    for r in rows:
        entry = BY_NAME[r["name"]]
        seconds = r.get("seconds", "-")
        mark = "" if _same(entry, r["chip"]) else " *"
        lines.append(
            f"{r['name']:28} {entry.bug or 'correct':16} {entry.chip:13} "
            f"{r['chip'] + mark:13} {seconds!s:>6}  {(r.get('detail') or '')[:80]}"
        )
    return "\n".join(lines)


def _same(entry: Any, chip: str) -> bool:
    return entry.chip == chip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", type=lambda s: s.split(","), default=None)
    parser.add_argument("--out", type=Path, default=Path("tpu-bugs.json"))
    parser.add_argument("--cpu", action="store_true", help="interpret=True on the CPU")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds one entry may run")
    parser.add_argument("--isolate", action="store_true", help="a worker per risky entry")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--journal", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--simulate-halt", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.worker:
        return worker(options.only, options.journal, options.cpu, options.simulate_halt)
    chosen = [e for e in ENTRIES if options.only is None or e.name in options.only]
    safe = [e.name for e in chosen if e.chip not in RISKY]
    risky = [e.name for c in RISKY for e in chosen if e.chip == c]  # halts, then hangs
    start = time.perf_counter()
    results: dict[str, dict[str, Any]] = {}
    for batch in [safe, *([[n] for n in risky] if options.isolate else [risky])]:
        results.update(run_batch(batch, options) if batch else {})
    ordered = [results[e.name] for e in chosen]
    counts: dict[str, int] = {}
    for r in ordered:
        counts[r["chip"]] = counts.get(r["chip"], 0) + 1
    changed = [r["name"] for r in ordered if not _same(BY_NAME[r["name"]], r["chip"])]
    import jax

    report = {
        "platform": "cpu" if options.cpu else "tpu",
        "jax": jax.__version__,
        "runs": RUNS,
        "seconds": round(time.perf_counter() - start, 1),
        "summary": counts,
        "not_as_expected": changed,
        "entries": ordered,
    }
    options.out.write_text(json.dumps(report, indent=1))
    print(table(ordered))
    print(f"\n{json.dumps(counts)}; {len(changed)} not as the corpus expects (*)")
    print(f"{report['seconds']} s; report in {options.out}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    sys.exit(main())
