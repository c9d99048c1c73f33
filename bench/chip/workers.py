"""Chip scripts' worker processes: a kernel that halts the chip poisons the process holding it.

A worker runs kernels in order and notes each in a journal (a JSON line ``{"start": name}``
before it, ``{"result": {...}}`` after); ``run_worker`` runs one until it exits, or kills it
once one kernel has run ``timeout`` s, and reads the journal back: the results, and the kernel
it was running when it died or hung (None if it finished). A worker is a module of ``bench``
(``python -m bench.chip.tpu_check --worker``), run from the checkout's root. Standard library
only: the chip scripts run where minipallas may not be installed.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import ROOT


@dataclass
class Worker:
    """What one worker did: its results by name, the kernel it left unfinished, its exit code,
    the tail of its output, and whether it was killed for hanging."""

    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    started: str | None = None
    code: int = 0
    log: str = ""
    timed_out: bool = False


def run_worker(command: list[str], timeout: float, tail: int = 3000) -> Worker:
    """Runs ``command`` with ``--journal PATH`` added (module docstring)."""
    with tempfile.TemporaryDirectory() as tmp:
        journal = Path(tmp) / "journal.jsonl"
        journal.touch()
        worker = Worker()
        worker.code, worker.log, worker.timed_out = _supervise(
            [*command, "--journal", str(journal)], journal, timeout, tail
        )
        for line in journal.read_text().splitlines():
            entry = json.loads(line)
            if "start" in entry:
                worker.started = entry["start"]
            else:
                worker.results[entry["result"]["name"]] = entry["result"]
                worker.started = None
    return worker


def _supervise(
    command: list[str], journal: Path, timeout: float, tail: int
) -> tuple[int, str, bool]:
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        lines, since, timed_out = 0, time.monotonic(), False
        while process.poll() is None:
            time.sleep(0.2)
            now = len(journal.read_text().splitlines())
            if now != lines:
                lines, since = now, time.monotonic()
            elif time.monotonic() - since > timeout:
                process.kill()
                process.wait()
                timed_out = True
        log.seek(0)
        return process.returncode, log.read()[-tail:], timed_out
