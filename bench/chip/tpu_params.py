"""Issue 46's parameter corpus on the chip: every one-parameter kernel of
``minipallas/tools/corpora/param_cases.py`` (``PARAM_CASES``: the primitives' parameters, the
grid's, the block specs', the compiler params and the custom call's fields) run two ways on a TPU:

- upstream: ``jax.jit(f)``, upstream's Mosaic lowering of its own ``pallas_call``;
- minipallas: ``jax.jit(on_tpu(f))``, each ``pallas_call`` as minipallas's Mosaic module in the
  same ``tpu_custom_call`` (``platforms/mesh_tpu.py``);

compared bit for bit, each against the case's float64 numpy reference (the largest distance
over the reference's largest magnitude: ``rel err``), a refusal recorded with its message. The
verdict is what happened (``same-bits``, ``other-bits``, ``both-refuse``, ``beyond-upstream``:
only minipallas runs, ``minipallas-refuses``: only upstream runs) against what the case
expects after issue 46 (``case.expect``: for a refusal, upstream's message in both). Writes a
JSON report and prints a table; exits 1 when a case is not as expected.

    make tpu-params                              # on a TPU machine (docs/guides/tpu.md)
    python -m bench.chip.tpu_params [--cases exp,dot_precision_highest] [--out tpu-params.json]
    python -m bench.chip.tpu_params --cpu        # upstream interpreted, minipallas's CPU program

Opening the chip costs ~15 s, so the cases run in one worker process, in order; each is noted
in a journal before it starts (``workers.write_journal``), so a case that halts the chip, fails
on the device or hangs past ``--timeout`` is reported ``halted`` and a fresh worker resumes
after it. The cases whose block indices a wrong lowering would send past the array (``RISKY``)
run last, each in a worker of its own.

``--cpu`` runs upstream's interpret mode against minipallas's import of the same program
(``from_jaxpr``, compiled for the CPU); the chip's expectations do not apply there (interpret
mode runs what Mosaic refuses), so only bits that differ fail it: what CI smoke-tests.
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
from minipallas.tools.corpora.param_cases import PARAM_CASES
from minipallas.tools.corpora.param_op_cases import (
    BEYOND_UPSTREAM,
    BOTH_REFUSE,
    SAME_BITS,
    ParamCase,
)

BY_NAME = {case.name: case for case in PARAM_CASES}
# Cases whose windows a wrong lowering would send past the array: each runs last, alone.
RISKY = {
    "block_element_padding": "its last window ends 8 rows past the array, in its padding",
    "grid_multiple_of_index_map": "a block index through pl.multiple_of",
    "block_scalar_prefetch": "block indices read from a scalar-prefetch array",
}
OTHER_BITS, MINIPALLAS_REFUSES = "other-bits", "minipallas-refuses"


class Refused(str):
    """Why a side did not compile or import the case: its whole message."""


def _refusal(e: BaseException) -> Refused:
    cause = f" {e.__cause__}" if e.__cause__ is not None else ""  # jax re-raises Mosaic's
    return Refused(f"{type(e).__name__}: {e}{cause}")


def run_on_device(fn: Any, args: tuple[np.ndarray, ...], device: Any) -> Any:
    """``jax.jit(fn)``'s outputs on ``device`` (numpy), or ``Refused`` when it does not compile;
    ``DeviceFailure`` when the compiled program fails on the device."""
    import jax

    values = [jax.device_put(a, device) for a in args]
    try:
        compiled = jax.jit(fn).lower(*values).compile()
    except Exception as e:  # a refusal, whatever its class: upstream's, minipallas's, Mosaic's
        return _refusal(e)
    try:
        outs = jax.block_until_ready(compiled(*values))
    except Exception as e:
        raise DeviceFailure(f"{type(e).__name__}: {e}") from e
    return tuple(np.asarray(o) for o in jax.tree.leaves(outs))


def run_imported(f: Any, args: tuple[np.ndarray, ...]) -> Any:
    """minipallas on the CPU (``--cpu``): the program imported (``from_jaxpr``) and compiled."""
    import jax

    import minipallas as mp
    from minipallas.interop import from_jaxpr

    try:
        return tuple(np.asarray(o) for o in mp.compile(from_jaxpr(jax.make_jaxpr(f)(*args)))(*args))
    except Exception as e:  # minipallas's refusal
        return _refusal(e)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Same dtype, shape and bits; NaNs equal NaNs."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    bytes_a = a.reshape(-1).view(np.uint8).reshape(a.size, -1)
    same = (bytes_a == b.reshape(-1).view(np.uint8).reshape(b.size, -1)).all(axis=1)
    if a.dtype.kind == "f" or a.dtype.name == "bfloat16":
        wide_a, wide_b = a.astype(np.float32).reshape(-1), b.astype(np.float32).reshape(-1)
        same |= np.isnan(wide_a) & np.isnan(wide_b)
    return bool(same.all())


def relative_error(outs: tuple, reference: tuple) -> float:
    """The largest distance from the reference over the reference's largest magnitude, the
    worst output's."""
    worst = 0.0
    for got, want in zip(outs, reference, strict=True):
        got, want = np.asarray(got).astype(np.float64), np.asarray(want, np.float64)
        scale = max(float(np.max(np.abs(want), initial=0.0)), 1e-30)
        worst = max(worst, float(np.max(np.abs(got - want), initial=0.0)) / scale)
    return worst


def outcome(theirs: Any, ours: Any) -> str:
    """What happened, in the case's terms."""
    refused = (isinstance(theirs, Refused), isinstance(ours, Refused))
    if refused == (True, True):
        return BOTH_REFUSE
    if refused == (True, False):
        return BEYOND_UPSTREAM
    if refused == (False, True):
        return MINIPALLAS_REFUSES
    equal = all(same_bits(a, b) for a, b in zip(ours, theirs, strict=True))
    return SAME_BITS if equal else OTHER_BITS


def as_expected(case: ParamCase, theirs: Any, ours: Any, observed: str) -> bool:
    """Whether ``observed`` is what the case expects, refusals with the expected messages."""
    expect = case.expect
    if observed != expect.outcome:
        return False
    if observed in (BOTH_REFUSE, BEYOND_UPSTREAM) and expect.message not in theirs:
        return False
    return observed != BOTH_REFUSE or expect.our_message in ours


def check(case: ParamCase, device: Any, cpu: bool) -> dict[str, Any]:
    """One case both ways (module doc): a row of the report."""
    from minipallas.platforms.mesh_tpu import on_tpu

    args = case.inputs()
    reference = case.expected(*args)
    start = time.perf_counter()
    if cpu:
        theirs = run_on_device(case.upstream(interpret=True), args, device)
        ours = run_imported(case.upstream(), args)
    else:
        theirs = run_on_device(case.upstream(), args, device)
        ours = run_on_device(on_tpu(case.upstream()), args, device)
    observed = outcome(theirs, ours)
    row: dict[str, Any] = {
        "name": case.name, "parameter": case.parameter, "family": case.family,
        "expected": case.expect.outcome, "verdict": observed,
        "seconds": round(time.perf_counter() - start, 3),
    }  # fmt: skip
    for side, got in (("upstream", theirs), ("minipallas", ours)):
        if isinstance(got, Refused):
            row[side] = f"refused: {got[:300]}"
        else:
            row[side] = "runs"
            row[f"{side}_rel_err"] = relative_error(got, reference)
    row["ok"] = observed != OTHER_BITS if cpu else as_expected(case, theirs, ours, observed)
    if case.expect.reason:
        row["reason"] = case.expect.reason
    return row


# ----- one worker: the cases in order, each noted before it starts -----


def worker(names: list[str], journal: Path, cpu: bool, simulate_halt: str | None) -> int:
    """Checks ``names`` in order into ``journal`` (``workers.write_journal``)."""
    import jax

    device = jax.devices("cpu" if cpu else "tpu")[0]

    def failed(name: str, e: Exception, halted: bool) -> dict[str, Any]:
        detail = str(e) if halted else "".join(traceback.format_exception_only(e)).strip()
        verdict = "device error" if halted else "error"
        return {"name": name, "verdict": verdict, "detail": detail[:500], "ok": False}

    return write_journal(
        names, journal, lambda name: check(BY_NAME[name], device, cpu), failed, simulate_halt
    )


# ----- the parent: workers, restarts, the report -----


def run_batch(names: list[str], options: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Results for ``names``, a fresh worker after the case that killed, poisoned or hung the
    last one (reported ``halted``)."""
    results: dict[str, dict[str, Any]] = {}
    pending = list(names)
    while pending:
        command = [sys.executable, "-m", __spec__.name, "--worker", "--cases", ",".join(pending)]
        command += ["--cpu"] if options.cpu else []
        command += ["--simulate-halt", options.simulate_halt] if options.simulate_halt else []
        ran = run_worker(command, options.timeout, tail=2000)
        results.update(ran.results)
        if ran.started is not None:
            why = "hung" if ran.timed_out else f"worker died (exit {ran.code})"
            results[ran.started] = {"name": ran.started, "verdict": "halted", "detail": why,
                                    "log": ran.log, "ok": False}  # fmt: skip
        elif ran.code not in (0, HALT_EXIT):
            for name in pending:  # died before its first case: nothing ran
                results.setdefault(name, {"name": name, "verdict": "error", "log": ran.log,
                                          "ok": False})  # fmt: skip
        pending = [n for n in pending if n not in results]
    return results


def _err(row: dict[str, Any], side: str) -> str:
    value = row.get(f"{side}_rel_err")
    return "-" if value is None else f"{value:.1e}"


def table(rows: list[dict[str, Any]]) -> str:
    head = ("case", "parameter", "upstream", "minipallas", "verdict", "rel err up", "rel err mp")
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in rows:
        verdict = r["verdict"] if r.get("ok") else f"{r['verdict']} (expected {r['expected']})"
        cells = (
            r["name"], BY_NAME[r["name"]].parameter,
            r.get("upstream", "-")[:60], r.get("minipallas", "-")[:60], verdict,
            _err(r, "upstream"), _err(r, "minipallas"),
        )  # fmt: skip
        lines.append("| " + " | ".join(str(c).replace("|", "/") for c in cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=lambda s: s.split(","), default=None)
    parser.add_argument("--out", type=Path, default=Path("tpu-params.json"))
    parser.add_argument("--cpu", action="store_true", help="upstream interpreted; minipallas CPU")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds one case may run")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--journal", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--simulate-halt", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.worker:
        return worker(options.cases, options.journal, options.cpu, options.simulate_halt)
    unknown = set(options.cases or ()) - set(BY_NAME)
    if unknown:
        parser.error(f"no such cases: {', '.join(sorted(unknown))}")
    chosen = [c.name for c in PARAM_CASES if options.cases is None or c.name in options.cases]
    chosen.sort(key=lambda name: name in RISKY)
    results: dict[str, dict[str, Any]] = {}
    safe = [n for n in chosen if n not in RISKY]
    for batch in [safe, *([n] for n in chosen if n in RISKY)]:
        results.update(run_batch(batch, options) if batch else {})
    rows = [results[n] for n in chosen]
    for row in rows:  # a worker's failure knows only the name
        row.setdefault("expected", BY_NAME[row["name"]].expect.outcome)
    import jax

    report = {
        "platform": "cpu" if options.cpu else "tpu",
        "jax": jax.__version__,
        "as_expected": sum(bool(r.get("ok")) for r in rows),
        "cases": len(rows),
        "rows": rows,
    }
    options.out.write_text(json.dumps(report, indent=1))
    print(table(rows))
    print(f"\n{report['as_expected']} of {len(rows)} as expected; report in {options.out}")
    return 0 if report["as_expected"] == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
