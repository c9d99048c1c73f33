"""Chip scripts' worker processes: a kernel that halts the chip poisons the process holding it.

A worker runs kernels in order and notes each in a journal (a JSON line ``{"start": name}``
before it, ``{"result": {...}}`` after: ``write_journal``, the worker's side); ``run_worker``
runs one until it exits, or kills it once one kernel has run ``timeout`` s, and reads the
journal back: the results, and the kernel it was running when it died or hung (None if it
finished). A worker is a module of ``bench``
(``python -m bench.chip.tpu_check --worker``), run from the checkout's root. Standard library
only: the chip scripts run where minipallas may not be installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import ROOT

HALT_EXIT = 3  # a worker's exit status after a device failure: its process is poisoned


class DeviceFailure(Exception):
    """The device failed running a compiled kernel: this process may be poisoned."""


def write_journal(
    names: Sequence[str],
    journal: Path,
    run: Callable[[str], dict[str, Any]],
    failed: Callable[[str, Exception, bool], dict[str, Any]],
    simulate_halt: str | None = None,
) -> int:
    """The worker's side: for each of ``names``, ``{"start": name}`` then ``{"result":
    run(name)}``. When ``run`` raises, the result is ``failed(name, error, halted)``: after a
    ``DeviceFailure`` (``halted``) the worker stops with ``HALT_EXIT``; after anything else the
    next name runs. ``simulate_halt``: the name at which to die as a halted chip does (the
    isolation's test). Returns the exit status."""
    with journal.open("a") as out:

        def note(entry: dict[str, Any]) -> None:
            out.write(json.dumps(entry) + "\n")
            out.flush()

        for name in names:
            note({"start": name})
            if name == simulate_halt:
                os._exit(134)
            try:
                note({"result": run(name)})
            except DeviceFailure as e:
                note({"result": failed(name, e, True)})
                return HALT_EXIT
            except Exception as e:  # the measurement itself failed: report it, go on
                note({"result": failed(name, e, False)})
    return 0


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
