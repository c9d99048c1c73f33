"""Does upstream's TPU interpret mode report the bug corpus's bugs on the CPU, and how fast?
(issue 39; the corpus: ``minipallas/tools/corpora/bug_corpus``).

Each entry runs in a subprocess of its own (``--timeout`` s; a semaphore waited twice hangs
it) under ``pltpu.InterpretParams(detect_races=True, out_of_bounds_reads="raise",
uninitialized_memory="nan", num_cores_or_threads=--cores)``: two cores by default, as on a
multi-core chip, so that a parallel axis is split and the race detector can see its points
race. Per entry: the outcome, the error's own line, whether the output matches ``want``
(a NaN never does), and the seconds from ``jax.jit`` to the result. Outcomes:

- ``error``: it raised; ``race``: ``detect_races`` found one (``interpret_pallas_call.races``);
  both count as reported;
- ``hang``: killed at the timeout; ``crash``: the process died without a result;
- ``differs``: nothing reported, but the output is not ``want`` (a test against a reference
  would show it); ``silent``: nothing reported and the output is ``want``.

A correct entry raises a false alarm with any outcome but ``silent``.

``--minipallas`` runs minipallas's checks on the same entries as well (``difftest.run(Case(
name, fn, args), device="tpu")``: without a chip, the no-chip checks), reading
``report.kernel_bugs`` and ``report.finding.kind``, and prints both tools side by side.

    python -m bench.chip.bug_interpret [--only a,b] [--minipallas] [--out bug-interpret.json]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from bench import ROOT

MARK = "RESULT "
ERROR_LINE = re.compile(r"^\s*(?:[\w.]+\.)?(\w*(?:Error|Exception|Exit)):\s*(.*)$")


def error_line(e: BaseException) -> str:
    """The line that says what went wrong: the innermost ``SomeError: message`` in the
    exception's text and its causes (an interpreted kernel's error comes wrapped in a callback
    failure), else the first line."""
    texts = []
    while e is not None:
        texts.append(f"{type(e).__name__}: {e}")
        e = e.__cause__ or e.__context__
    lines = [m for t in texts for m in map(ERROR_LINE.match, t.splitlines()) if m]
    wrapped = ("JaxRuntimeError", "XlaRuntimeError")
    own = [m for m in lines if m.group(1) not in wrapped]
    if own:
        return f"{own[-1].group(1)}: {own[-1].group(2).strip()}".rstrip(": ")[:300]
    return (texts[0].splitlines() or [""])[0][:300]


# ----- a child: one entry, one tool -----


def run_upstream(entry: Any, cores: int) -> dict[str, Any]:
    import jax
    from jax.experimental.pallas import tpu as pltpu

    from minipallas.lowering.compat.jax_private import pallas_tpu_interpret as state
    from minipallas.tools.corpora.bug_corpus.common import matches

    params = pltpu.InterpretParams(
        detect_races=True,
        out_of_bounds_reads="raise",
        uninitialized_memory="nan",
        num_cores_or_threads=cores,
    )
    fn = jax.jit(functools.partial(entry.fn, interpret=params))
    start = time.perf_counter()
    result: dict[str, Any] = {}
    try:
        out = jax.block_until_ready(fn(*entry.args))
        result["matches"] = matches(out, entry.want(*entry.args))
    except Exception as e:
        result["error"] = error_line(e)
    result["seconds"] = round(time.perf_counter() - start, 3)
    result["race"] = bool(state.races is not None and state.races.races_found)
    if "error" in result:
        result["outcome"] = "error"
    elif result["race"]:
        result["outcome"] = "race"
    else:
        result["outcome"] = "silent" if result["matches"] else "differs"
    return result


def minipallas_missing() -> str | None:
    """Why ``--minipallas`` cannot run here, or None."""
    try:
        import dataclasses
        import inspect

        from minipallas.tools.difftest import Report, run
    except Exception as e:  # noqa: BLE001
        return f"minipallas.tools.difftest does not import: {e}"
    if "device" not in inspect.signature(run).parameters:
        return "minipallas.tools.difftest.run takes no device="
    if "kernel_bugs" not in {f.name for f in dataclasses.fields(Report)}:
        return "minipallas.tools.difftest.Report has no kernel_bugs"
    return None


def run_minipallas(entry: Any) -> dict[str, Any]:
    from minipallas.tools.difftest import Case, run

    fn = functools.partial(entry.fn, interpret=True)
    start = time.perf_counter()
    result: dict[str, Any] = {}
    try:
        report = run(Case(entry.name, fn, entry.args), device="tpu")
    except Exception as e:
        result.update(outcome="error", error=error_line(e))
    else:
        bugs = list(report.kernel_bugs)
        result["kinds"] = sorted({b.kind for b in bugs})
        result["bugs"] = [
            {k: str(getattr(b, k, "")) for k in ("kind", "message", "where", "point", "buffer")}
            for b in bugs
        ]
        result["finding"] = getattr(report.finding, "kind", None)
        result["check_seconds"] = round(getattr(report, "check_seconds", 0.0), 3)
        result["outcome"] = "reported" if bugs else "silent"
    result["seconds"] = round(time.perf_counter() - start, 3)
    return result


def child(name: str, tool: str, cores: int) -> int:
    from minipallas.tools.corpora.bug_corpus import BY_NAME

    entry = BY_NAME[name]
    try:
        result = run_upstream(entry, cores) if tool == "upstream" else run_minipallas(entry)
    except Exception as e:  # the harness itself failed
        result = {"outcome": "crash", "error": error_line(e), "trace": traceback.format_exc()}
    print(MARK + json.dumps(result), flush=True)
    return 0


# ----- the parent: a subprocess per entry and tool -----


def spawn(name: str, tool: str, options: argparse.Namespace) -> dict[str, Any]:
    command = [sys.executable, "-m", __spec__.name, "--child", name, "--tool", tool]
    command += ["--cores", str(options.cores)]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "3"}
    start = time.perf_counter()
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=options.timeout, env=env, cwd=ROOT
        )
    except subprocess.TimeoutExpired:
        return {"outcome": "hang", "seconds": options.timeout, "error": "timed out"}
    lines = [line for line in done.stdout.splitlines() if line.startswith(MARK)]
    if not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
        return {
            "outcome": "crash",
            "error": f"exit {done.returncode}: {tail[0][:200]}",
            "seconds": round(time.perf_counter() - start, 3),
        }
    return json.loads(lines[-1][len(MARK) :])


REPORTED = {"upstream": ("error", "race"), "minipallas": ("reported", "error")}


def summary(tool: str, entries: list[Any], results: dict[str, dict]) -> str:
    buggy = [e for e in entries if e.bug is not None]
    correct = [e for e in entries if e.bug is None]
    reported = [e for e in buggy if results[e.name]["outcome"] in REPORTED[tool]]
    alarms = [e for e in correct if results[e.name]["outcome"] != "silent"]
    seconds = [results[e.name]["seconds"] for e in entries]
    line = (
        f"{'upstream TPU interpret mode' if tool == 'upstream' else 'minipallas'} reports "
        f"{len(reported)} of {len(buggy)} bugs; false alarms on {len(alarms)} of "
        f"{len(correct)} correct kernels; median {statistics.median(seconds):.2f} s/case"
    )
    if tool == "minipallas":
        right = [e for e in reported if e.bug in results[e.name].get("kinds", ())]
        checks = [results[e.name].get("check_seconds") for e in entries]
        checks = [c for c in checks if c is not None]
        line += f" ({len(right)} with the expected kind"
        line += f"; the checks alone {statistics.median(checks):.3f} s)" if checks else ")"
    if tool == "upstream":
        shown = [
            e for e in buggy if results[e.name]["outcome"] in ("error", "race", "hang", "differs")
        ]
        line += f" (hangs or wrong output on {len(shown) - len(reported)} more)"
    return line


def cell(result: dict[str, Any] | None) -> str:
    if result is None:
        return "-"
    outcome = result["outcome"]
    if result.get("kinds"):
        outcome = ",".join(result["kinds"])
    return f"{outcome} {result['seconds']:.2f}s"


def table(entries: list[Any], results: dict[str, dict[str, dict]]) -> str:
    tools = list(results)
    head = f"{'entry':28} {'expected':16} {'chip':13}" + "".join(f" {t:22}" for t in tools)
    rows = [head + "  upstream's error"]
    for e in entries:
        row = f"{e.name:28} {e.bug or 'correct':16} {e.chip:13}"
        row += "".join(f" {cell(results[t].get(e.name)):22}" for t in tools)
        error = results.get("upstream", {}).get(e.name, {}).get("error", "")
        rows.append(row + "  " + error[:90])
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", type=lambda s: s.split(","), default=None)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per entry")
    parser.add_argument("--cores", type=int, default=2, help="interpret mode's cores per chip")
    parser.add_argument("--minipallas", action="store_true", help="run minipallas's checks too")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--tool", default="upstream", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.child:
        return child(options.child, options.tool, options.cores)
    from minipallas.tools.corpora.bug_corpus import ENTRIES

    entries = [e for e in ENTRIES if options.only is None or e.name in options.only]
    tools = ["upstream"]
    if options.minipallas:
        missing = minipallas_missing()
        if missing:
            print(f"minipallas: not available ({missing})")
        else:
            tools.append("minipallas")
    results: dict[str, dict[str, dict]] = {t: {} for t in tools}
    for e in entries:
        for t in tools:
            results[t][e.name] = spawn(e.name, t, options)
        print(f"{e.name:28} " + "  ".join(cell(results[t][e.name]) for t in tools), flush=True)
    print()
    print(table(entries, results))
    print()
    for t in tools:
        print(summary(t, entries, results[t]))
    if options.out:
        report = {"cores": options.cores, "timeout": options.timeout, "results": results}
        options.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
