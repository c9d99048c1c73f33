"""Hardware check: every suite kernel, the six realistic kernels and the kernels marked for the
TPU (``minipallas/tools/corpora/tpu_cases.py``) run on the chip through minipallas's own Mosaic
module (``jax.jit`` of the ``pallas_call``: the platform table's ``tpu`` row) and through upstream's
``pallas_call(interpret=False)``, compared bit for bit, and against the CPU: the reference
interpreter's run of the kernel's loop program, within the chip's numerics envelope
(``minipallas.tools.envelope.measure`` with ``TPU_V5E``: its transcendentals, its one-pass bfloat16
float32 dots, its sum orders), element by element; both on the elements a TPU defines (an output
block's padding or lanes a kernel never writes hold whatever VMEM held:
``minipallas.tools.difftest.undefined``). The report gives, per kernel, the most ulps an element is
from the CPU's and the largest fraction of its envelope an element uses (above 1: outside). Writes a
JSON report and prints a table; exits 1 when a kernel that both sides run gives other bits than
upstream's, or lies outside the envelope.

    make tpu-check                          # on a TPU machine
    python -m bench.chip.tpu_check [--kernels add,softmax] [--out tpu-check.json]
    python -m bench.chip.tpu_check --passes 'fuse-grid-steps{min_steps=1,max_unroll=4}'
    python -m bench.chip.tpu_check --cpu         # the same machinery on the CPU, in seconds

Opening the chip costs ~15 s, so kernels run in one worker process, one after another. A
kernel that halts the chip (an out-of-bounds block index does: "RuntimeUnexpectedCoreHalt")
poisons that process: a worker notes each kernel before starting it, so when it dies, fails on
the device or hangs past ``--timeout``, the parent reports the kernel it was running, starts a
fresh worker and resumes after it; the kernels known to risk a halt run last, each in a worker
of its own. Nothing else is lost.

``--cpu`` (or ``--dry-run``) runs minipallas's ``jax.jit`` on the CPU (the discharged program)
against upstream's interpret mode, for the suite's small kernels, within XLA:CPU's envelope:
what CI smoke-tests.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from bench.chip.workers import HALT_EXIT, DeviceFailure, run_worker, write_journal
from bench.realistic_kernels import realistic_cases
from minipallas.kernels.programs.grid import grid_program
from minipallas.tools.corpora.suite import KERNELS
from minipallas.tools.corpora.tpu_cases import TPU_CASES
from minipallas.tools.difftest.outputs import interpret_outputs
from minipallas.tools.difftest.undefined import undefined
from minipallas.tools.envelope.chips import TPU_V5E, Chip
from minipallas.tools.envelope.measure import Distance, envelope, is_float

# Kernels whose results on a device are not defined by their inputs alone.
SKIP = {
    "grid_ids": "takes no arrays, so jax.jit runs it on the CPU when traced (a constant)",
    "input_written": "writes its input block: a custom call may not write its operands",
}
# ... and under --cpu, where minipallas's jax.jit runs the discharged program on XLA:CPU
CPU_SKIP = {
    "bf16_gelu": "XLA:CPU keeps a fusion's bf16 intermediates in f32 under jax.jit (numerics.md)",
    "staged_run_scoped": "XLA:CPU contracts x * 3 - 1 into an FMA across the scratch's store and "
    "load, which the envelope's contraction rule does not follow "
    "(minipallas/tools/envelope/perturb.py)",
}
# Kernels that may halt the chip: each runs last, in a worker of its own.
RISKY = {
    "negative_block_index": "a negative block index: out of bounds on a device",
    "clamped_block_index": "a block index past the end: out of bounds on a device",
}


def cases(names: list[str] | None, cpu: bool) -> list[Any]:
    """The kernels to check, the risky ones last; ``--cpu`` keeps the small ones."""
    every = [*KERNELS, *TPU_CASES, *([] if cpu else realistic_cases())]
    chosen = [c for c in every if names is None or c.name in names]
    return sorted(chosen, key=lambda c: c.name in RISKY)


# ----- one worker: the kernels in order, each noted before it starts -----


class Refused(str):
    """Why a side did not compile the kernel (minipallas's or Mosaic's message)."""


def _device(cpu: bool) -> Any:
    import jax

    return jax.devices("cpu" if cpu else "tpu")[0]


def run_on_device(fn: Any, args: tuple[np.ndarray, ...], device: Any) -> Any:
    """``fn``'s outputs on ``device`` as numpy arrays, or why it does not
    compile (minipallas or Mosaic refuses: a ``Refused``); ``DeviceFailure`` when the run
    fails."""
    import jax

    values = [jax.device_put(a, device) for a in args]
    try:
        compiled = jax.jit(fn).lower(*values).compile()
    except Exception as e:  # minipallas's or Mosaic's refusal, whatever its class
        return Refused(f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:300]}")
    try:
        outs = jax.block_until_ready(compiled(*values))
    except Exception as e:
        raise DeviceFailure(f"{type(e).__name__}: {e}") from e
    outs = outs if isinstance(outs, tuple | list) else (outs,)
    return tuple(np.asarray(o) for o in outs)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Same dtype, shape and bits; NaNs equal NaNs."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    same = a.reshape(-1).view(np.uint8).reshape(a.size, -1) == b.reshape(-1).view(np.uint8).reshape(
        b.size, -1
    )
    same = same.all(axis=1)
    if a.dtype.kind == "f" or a.dtype.name == "bfloat16":
        same |= np.isnan(a.astype(np.float32)).reshape(-1) & np.isnan(b.astype(np.float32)).reshape(
            -1
        )
    return bool(same.all())


def _where_defined(got: tuple, other: tuple, defined: list[np.ndarray]) -> tuple:
    """``got`` on the elements a TPU defines (``difftest.undefined``: found on the CPU by two
    fills of undefined memory), ``other``'s elsewhere, so that only defined elements compare."""
    return tuple(
        np.where(d, g, o).astype(np.asarray(o).dtype)
        for g, o, d in zip(got, other, defined, strict=True)
    )


def vs_cpu(
    kernel: Any, args: tuple, got: tuple, defined: list[np.ndarray], chip: Chip | None
) -> tuple[Distance, int]:
    """How far ``got`` (the kernel's outputs on ``args``) lies from the reference interpreter's
    run of its loop program on the CPU, on the ``defined`` elements, within ``chip``'s envelope
    (None: XLA:CPU's): the worst output's ulps and fraction of its envelope (a non-float output
    is bit for bit: its ulps are integer differences, any of which is infinitely far), and
    which output that is."""
    program = grid_program(kernel)
    base = interpret_outputs(program, args)
    env = envelope(program, args, base, chip=chip)
    worst, at = Distance(0, 0.0, ()), 0
    for k, (want, value, keep) in enumerate(zip(base, got, defined, strict=True)):
        want = np.asarray(want)
        value = np.where(keep, value, want).astype(want.dtype)
        if is_float(want):
            d = env.judge(k, want, value)
        else:
            far = np.abs(value.astype(np.int64) - want.astype(np.int64))
            at_k = np.unravel_index(int(np.argmax(far)), far.shape) if far.size else ()
            d = Distance(int(far.max(initial=0)), np.inf if far.any() else 0.0, at_k)
        if (d.fraction, d.ulps) > (worst.fraction, worst.ulps):
            worst, at = d, k
    return worst, at


def check(case: Any, device: Any, cpu: bool, passes: str = "") -> dict[str, Any]:
    """One kernel on both sides, and ours against the CPU (module doc); a dict for the report.
    ``passes``: a pipeline run on our kernel first (``pallas_call(passes=...)``)."""
    skip = {**SKIP, **(CPU_SKIP if cpu else {})}
    if case.name in skip:
        return {"name": case.name, "status": "skipped", "detail": skip[case.name]}
    args = case.inputs()
    record: dict[str, Any] = {"name": case.name}
    start = time.perf_counter()
    ours = run_on_device(case.minipallas(passes=passes), args, device)
    theirs = run_on_device(case.upstream(interpret=cpu), args, device)
    sides = (("ours", ours), ("upstream", theirs))
    refused = [side for side, r in sides if isinstance(r, Refused)]
    record["seconds"] = round(time.perf_counter() - start, 3)
    if refused:
        record["status"] = "both refuse" if len(refused) == 2 else f"{refused[0]} refused"
        record["detail"] = " | ".join(r for r in (ours, theirs) if isinstance(r, Refused))
        return record
    kernel = case.minipallas().trace(*args)
    defined = [~m for m in undefined(kernel, args)]  # elsewhere the chip holds what was there
    record["undefined"] = int(sum(int((~d).sum()) for d in defined))
    mine = _where_defined(ours, theirs, defined)
    record["same_bits"] = all(same_bits(a, b) for a, b in zip(mine, theirs, strict=True))
    d, k = vs_cpu(kernel, args, ours, defined, None if cpu else TPU_V5E)
    record["ulps_vs_cpu"], record["envelope_fraction"] = d.ulps, round(d.fraction, 4)
    if not d.within:
        record["detail"] = f"output {k} at {[int(i) for i in d.at]} outside the envelope"
    record["status"] = "ok" if record["same_bits"] and d.within else "differs"
    return record


def worker(
    names: list[str], journal: Path, cpu: bool, simulate_halt: str | None, passes: str = ""
) -> int:
    """Checks ``names`` in order into ``journal`` (``workers.write_journal``)."""
    device = _device(cpu)
    by_name = {c.name: c for c in cases(None, cpu)}

    def failed(name: str, e: Exception, halted: bool) -> dict[str, Any]:
        if halted:
            return {"name": name, "status": "device error", "detail": str(e)}
        detail = "".join(traceback.format_exception_only(e)).strip()[:500]
        return {"name": name, "status": "error", "detail": detail}

    return write_journal(
        names, journal, lambda name: check(by_name[name], device, cpu, passes), failed,
        simulate_halt,
    )  # fmt: skip


# ----- the parent: workers, restarts, the report -----


def run_batch(names: list[str], options: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Results for ``names``, restarting a worker after the kernel that killed, poisoned or
    hung the last one (reported as such)."""
    results: dict[str, dict[str, Any]] = {}
    pending = list(names)
    while pending:
        command = [sys.executable, "-m", __spec__.name, "--worker", "--kernels", ",".join(pending)]
        command += ["--cpu"] if options.cpu else []
        command += ["--passes", options.passes] if options.passes else []
        if options.simulate_halt:
            command += ["--simulate-halt", options.simulate_halt]
        ran = run_worker(command, options.timeout, tail=2000)
        results.update(ran.results)
        started, code, stderr, timed_out = (ran.started, ran.code, ran.log, ran.timed_out)
        if started is not None:
            why = "hung" if timed_out else f"worker died (exit {code})"
            results[started] = {"name": started, "status": "halted", "detail": why, "log": stderr}
        elif code not in (0, HALT_EXIT):
            for name in pending:  # died before its first kernel: nothing ran
                results.setdefault(name, {"name": name, "status": "error", "log": stderr})
        pending = [n for n in pending if n not in results]
    return results


def table(results: list[dict[str, Any]]) -> str:
    header = f"{'kernel':26} {'status':16} {'bits=upstream':>13} {'ulps vs cpu':>11}"
    rows = [f"{header} {'of envelope':>11}  detail"]
    for r in results:
        bits = {True: "yes", False: "NO"}.get(r.get("same_bits"), "-")
        ulps, fraction = r.get("ulps_vs_cpu", "-"), r.get("envelope_fraction", "-")
        detail = (r.get("detail") or "")[:70]
        row = f"{r['name']:26} {r['status']:16} {bits:>13} {ulps!s:>11} {fraction!s:>11}"
        rows.append(f"{row}  {detail}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=lambda s: s.split(","), default=None)
    parser.add_argument("--out", type=Path, default=Path("tpu-check.json"))
    parser.add_argument("--cpu", "--dry-run", action="store_true", dest="cpu")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds one kernel may run")
    parser.add_argument("--passes", default="", help="a pipeline run on each of our kernels")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--journal", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--simulate-halt", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.worker:
        return worker(
            options.kernels, options.journal, options.cpu, options.simulate_halt, options.passes
        )
    chosen = [c.name for c in cases(options.kernels, options.cpu)]
    safe = [n for n in chosen if n not in RISKY]
    results: dict[str, dict[str, Any]] = {}
    for batch in [safe, *([n] for n in chosen if n in RISKY)]:
        results.update(run_batch(batch, options) if batch else {})
    ordered = [results[n] for n in chosen]
    counts: dict[str, int] = {}
    for r in ordered:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    import jax

    report = {
        "platform": "cpu" if options.cpu else "tpu",
        "jax": jax.__version__,
        "envelope": "XLA:CPU" if options.cpu else TPU_V5E.name,
        "summary": counts,
        "kernels": ordered,
    }
    options.out.write_text(json.dumps(report, indent=1))
    print(table(ordered))
    print(f"\n{json.dumps(counts)}; report in {options.out}")
    return 1 if counts.get("differs") or counts.get("error") else 0


if __name__ == "__main__":
    sys.exit(main())
