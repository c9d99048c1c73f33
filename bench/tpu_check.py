"""Hardware check: every suite kernel, the six realistic kernels and the kernels marked for the
TPU (``tests/kernels/tpu_cases.py``) run on the chip through minipallas's own Mosaic module
(``jax.jit`` of the ``pallas_call``: the platform table's ``tpu`` row) and through upstream's
``pallas_call(interpret=False)``, compared bit for bit, and against minipallas's CPU path
(the discharged program on XLA:CPU) within ``TOLERANCE``, on the elements a TPU defines (an
output block's padding or lanes a kernel never writes hold whatever VMEM held:
``minipallas.difftest.undefined``). Writes a JSON report and prints a table; exits 1 when a
kernel that both sides run gives other bits than upstream's, or is off the CPU beyond the
tolerance.

    make tpu-check                          # on a TPU machine
    python bench/tpu_check.py [--kernels add,softmax] [--out tpu-check.json]
    python bench/tpu_check.py --cpu         # the same machinery on the CPU, in seconds

Opening the chip costs ~15 s, so kernels run in one worker process, one after another. A
kernel that halts the chip (an out-of-bounds block index does: "RuntimeUnexpectedCoreHalt")
poisons that process: a worker notes each kernel before starting it, so when it dies, fails on
the device or hangs past ``--timeout``, the parent reports the kernel it was running, starts a
fresh worker and resumes after it; the kernels known to risk a halt run last, each in a worker
of its own. Nothing else is lost.

``--cpu`` (or ``--dry-run``) runs minipallas's ``jax.jit`` on the CPU (the discharged program)
against upstream's interpret mode, for the suite's small kernels: what CI smoke-tests.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "kernels"))
sys.path.insert(0, str(ROOT / "bench"))

from realistic_kernels import realistic_cases  # noqa: E402
from suite import KERNELS  # noqa: E402
from tpu_cases import TPU_CASES  # noqa: E402

from minipallas.difftest.undefined import undefined  # noqa: E402

# Kernels whose results on a device are not defined by their inputs alone.
SKIP = {
    "grid_ids": "takes no arrays, so jax.jit runs it on the CPU when traced (a constant)",
    "input_written": "writes its input block: a custom call may not write its operands",
}
# ... and under --cpu, where minipallas's jax.jit runs the discharged program on XLA:CPU
CPU_SKIP = {
    "bf16_gelu": "XLA:CPU keeps a fusion's bf16 intermediates in f32 under jax.jit (numerics.md)",
}
# Kernels that may halt the chip: each runs last, in a worker of its own.
RISKY = {
    "negative_block_index": "a negative block index: out of bounds on a device",
    "clamped_block_index": "a block index past the end: out of bounds on a device",
}
# Against the CPU path, |tpu - cpu| <= atol + rtol * |cpu|: transcendentals and reduction
# order differ by a few ulps; a kernel with a dot or bf16 data differs by bf16 rounding
# (the TPU's default f32 matmul precision rounds its operands to bf16).
TOLERANCE = {"float32": (1e-4, 1e-5), "rounded": (2e-2, 2e-2)}
HALT_EXIT = 3  # a worker's exit status after a device error: its process is poisoned


def cases(names: list[str] | None, cpu: bool) -> list[Any]:
    """The kernels to check, the risky ones last; ``--cpu`` keeps the small ones."""
    every = [*KERNELS, *TPU_CASES, *([] if cpu else realistic_cases())]
    chosen = [c for c in every if names is None or c.name in names]
    return sorted(chosen, key=lambda c: c.name in RISKY)


# ----- one worker: the kernels in order, each noted before it starts -----


class Refused(str):
    """Why a side did not compile the kernel (minipallas's or Mosaic's message)."""


class DeviceFailure(Exception):
    """The device failed while running a compiled kernel: this process may be poisoned."""


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


def error_vs_cpu(got: tuple, cpu: tuple, tolerance: tuple[float, float]) -> float:
    """The largest |got - cpu| / (atol + rtol |cpu|) over every output (<= 1: within)."""
    rtol, atol = tolerance
    worst = 0.0
    for g, c in zip(got, cpu, strict=True):
        g, c = np.asarray(g, np.float64), np.asarray(c, np.float64)
        both_nan = np.isnan(g) & np.isnan(c)
        diff = np.where(both_nan | (g == c), 0.0, np.abs(g - c))
        diff = np.where(np.isnan(diff), np.inf, diff)  # NaN on one side only
        scale = atol + rtol * np.abs(np.nan_to_num(c, nan=0.0, posinf=0.0, neginf=0.0))
        worst = max(worst, float(np.max(diff / scale, initial=0.0)))
    return worst


def _where_defined(got: tuple, other: tuple, defined: list[np.ndarray]) -> tuple:
    """``got`` on the elements a TPU defines (``difftest.undefined``: found on the CPU by two
    fills of undefined memory), ``other``'s elsewhere, so that only defined elements compare."""
    return tuple(
        np.where(d, g, o).astype(np.asarray(o).dtype)
        for g, o, d in zip(got, other, defined, strict=True)
    )


def tolerance_of(kernel: Any) -> tuple[float, float]:
    """The tolerance against the CPU path for a traced kernel: rounded where a dot or bf16 data
    is in it (``TOLERANCE``)."""
    rounded = any(
        op.name == "dot" for f in (kernel.body, *kernel.body.callees()) for op in f.walk()
    )
    rounded |= any(s.array.dtype == "bfloat16" for s in (*kernel.in_specs, *kernel.out_specs))
    return TOLERANCE["rounded" if rounded else "float32"]


def check(case: Any, device: Any, cpu: bool) -> dict[str, Any]:
    """One kernel on both sides and on the CPU path (module doc); a dict for the report."""
    skip = {**SKIP, **(CPU_SKIP if cpu else {})}
    if case.name in skip:
        return {"name": case.name, "status": "skipped", "detail": skip[case.name]}
    args = case.inputs()
    record: dict[str, Any] = {"name": case.name}
    start = time.perf_counter()
    ours = run_on_device(case.minipallas(), args, device)
    theirs = run_on_device(case.upstream(interpret=cpu), args, device)
    sides = (("ours", ours), ("upstream", theirs))
    refused = [side for side, r in sides if isinstance(r, Refused)]
    record["seconds"] = round(time.perf_counter() - start, 3)
    if refused:
        record["status"] = "both refuse" if len(refused) == 2 else f"{refused[0]} refused"
        record["detail"] = " | ".join(r for r in (ours, theirs) if isinstance(r, Refused))
        return record
    call = case.minipallas()
    kernel = call.trace(*args)
    defined = [~m for m in undefined(kernel, args)]  # elsewhere the chip holds what was there
    record["undefined"] = int(sum(int((~d).sum()) for d in defined))
    mine = _where_defined(ours, theirs, defined)
    record["same_bits"] = all(same_bits(a, b) for a, b in zip(mine, theirs, strict=True))
    expected = call(*args)
    expected = tuple(expected) if isinstance(expected, tuple | list) else (expected,)
    tolerance = tolerance_of(kernel)
    record["tolerance"] = tolerance
    mine = _where_defined(ours, expected, defined)
    record["error_vs_cpu"] = round(error_vs_cpu(mine, expected, tolerance), 4)
    within = record["error_vs_cpu"] <= 1.0
    record["status"] = "ok" if record["same_bits"] and within else "differs"
    return record


def worker(names: list[str], journal: Path, cpu: bool, simulate_halt: str | None) -> int:
    """Checks ``names`` in order, appending ``{"start": name}`` then ``{"result": ...}`` lines
    to ``journal``; exits ``HALT_EXIT`` after a device failure."""
    device = _device(cpu)
    by_name = {c.name: c for c in cases(None, cpu)}
    with journal.open("a") as out:

        def note(entry: dict[str, Any]) -> None:
            out.write(json.dumps(entry) + "\n")
            out.flush()

        for name in names:
            note({"start": name})
            if name == simulate_halt:  # the test of the isolation: die as a halted chip does
                os._exit(134)
            try:
                note({"result": check(by_name[name], device, cpu)})
            except DeviceFailure as e:
                note({"result": {"name": name, "status": "device error", "detail": str(e)}})
                return HALT_EXIT
            except Exception as e:  # the check itself failed: report it, go on
                detail = "".join(traceback.format_exception_only(e)).strip()[:500]
                note({"result": {"name": name, "status": "error", "detail": detail}})
    return 0


# ----- the parent: workers, restarts, the report -----


def run_batch(names: list[str], options: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Results for ``names``, restarting a worker after the kernel that killed, poisoned or
    hung the last one (reported as such)."""
    results: dict[str, dict[str, Any]] = {}
    pending = list(names)
    while pending:
        with tempfile.TemporaryDirectory() as tmp:
            journal = Path(tmp) / "journal.jsonl"
            journal.touch()
            command = [sys.executable, __file__, "--worker", "--kernels", ",".join(pending)]
            command += ["--journal", str(journal)] + (["--cpu"] if options.cpu else [])
            if options.simulate_halt:
                command += ["--simulate-halt", options.simulate_halt]
            code, stderr, timed_out = _supervise(command, journal, options.timeout)
            started = None
            for line in journal.read_text().splitlines():
                entry = json.loads(line)
                if "start" in entry:
                    started = entry["start"]
                else:
                    results[entry["result"]["name"]] = entry["result"]
                    started = None
        if started is not None:
            why = "hung" if timed_out else f"worker died (exit {code})"
            results[started] = {"name": started, "status": "halted", "detail": why, "log": stderr}
        elif code not in (0, HALT_EXIT):
            for name in pending:  # died before its first kernel: nothing ran
                results.setdefault(name, {"name": name, "status": "error", "log": stderr})
        pending = [n for n in pending if n not in results]
    return results


def _supervise(command: list[str], journal: Path, timeout: float) -> tuple[int, str, bool]:
    """Runs a worker until it exits, or kills it once one kernel has run ``timeout`` s."""
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        lines, since = 0, time.monotonic()
        while process.poll() is None:
            time.sleep(0.2)
            now = len(journal.read_text().splitlines())
            if now != lines:
                lines, since = now, time.monotonic()
            elif time.monotonic() - since > timeout:
                process.kill()
                process.wait()
                log.seek(0)
                return process.returncode, log.read()[-2000:], True
        log.seek(0)
        return process.returncode, log.read()[-2000:], False


def table(results: list[dict[str, Any]]) -> str:
    rows = [f"{'kernel':26} {'status':16} {'bits=upstream':>13} {'err/tol vs cpu':>14}  detail"]
    for r in results:
        bits = {True: "yes", False: "NO"}.get(r.get("same_bits"), "-")
        error = r.get("error_vs_cpu", "-")
        detail = (r.get("detail") or "")[:70]
        rows.append(f"{r['name']:26} {r['status']:16} {bits:>13} {error!s:>14}  {detail}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=lambda s: s.split(","), default=None)
    parser.add_argument("--out", type=Path, default=Path("tpu-check.json"))
    parser.add_argument("--cpu", "--dry-run", action="store_true", dest="cpu")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds one kernel may run")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--journal", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--simulate-halt", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.worker:
        return worker(options.kernels, options.journal, options.cpu, options.simulate_halt)
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
        "tolerance": TOLERANCE,
        "summary": counts,
        "kernels": ordered,
    }
    options.out.write_text(json.dumps(report, indent=1))
    print(table(ordered))
    print(f"\n{json.dumps(counts)}; report in {options.out}")
    return 1 if counts.get("differs") or counts.get("error") else 0


if __name__ == "__main__":
    sys.exit(main())
