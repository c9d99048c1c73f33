"""Cases that span devices: a ``jax.shard_map`` over several devices around a Pallas kernel that
copies to and signals its neighbours (issue 47).

``run`` (the harness) finds them by their jaxpr (``spanned``) and runs them its own way:

1. ``upstream``: upstream's TPU interpret mode in a worker process (``device_worker``), given as
   many CPU devices as this process has (``XLA_FLAGS=--xla_force_host_platform_device_count``,
   set before the worker starts), time-boxed: the worker runs the case twice with
   ``InterpretParams()``, then with ``detect_races=True`` until upstream's detector names a
   race (``DETECT_TRIES`` at most), and a run that gives no result within ``seconds`` of the
   event before it is a hang (``UpstreamHang``; the worker is killed). The
   worker loads the case from the file that made it (``Case.origin``): a case that spans devices
   is defined at module level there, or in a list or tuple there. One worker serves every case
   of its file (``WORKERS``), so only the first pays for starting jax.
2. minipallas's ways: the simulator (``interpret(..., collectives="simulate")``) under the
   lockstep schedule (``interpret``) and ``SCHEDULES`` seeded ones, and, where minipallas has
   ``on_devices``, the kernel compiled to XLA collectives (``on-devices``), each a way compared
   bit for bit; the discharged and compiled single-device ways do not apply.

The worker starts first and loads while minipallas's ways run; its time box counts from the
moment each of its events arrives, so waiting for the simulator costs it nothing. This process
must itself see the devices the case's mesh names: ``minipallas-difftest --devices N`` sets
``jax_num_cpu_devices`` before jax starts its backend (module docstring of ``cli``).
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.experimental.pallas import tpu as pltpu

import minipallas
from minipallas.ir.errors import MiniPallasError
from minipallas.lowering.compat.jax_private import core as jax_core
from minipallas.tools.difftest.outputs import initial, interpret_outputs
from minipallas.tools.difftest.report import SCHEDULES, Case, Outcome, Report, compare, timed

PREFIX = "minipallas-device-worker "  # what starts the worker's event lines
# the worker's runs (``device_worker.plan``): twice plain, then with upstream's race detector
# until it names a race, DETECT_TRIES times at most (it misses a race now and then: upstream's
# all_gather once in 12 runs)
PLAIN = pltpu.InterpretParams()
DETECT = pltpu.InterpretParams(detect_races=True)
DETECT_TRIES = 3
STARTUP_SECONDS = 300.0  # for the worker to start jax and run the case's file (a busy machine)
UPSTREAM_SECONDS = 60.0  # the default time box of one upstream run


class UpstreamHang(Exception):  # noqa: N818  (the outcome's name in reports)
    """An upstream run gave no result within its time box; its worker was killed."""


class UpstreamError(Exception):
    """An exception upstream raised in the worker, rebuilt here with its class's name (a
    subclass made per name) and message; ``functions``: those on its traceback, which
    ``classify.recognize_crash`` reads."""

    functions: tuple[str, ...] = ()


def _rebuilt(name: str, message: str, functions: Sequence[str]) -> UpstreamError:
    error = type(name, (UpstreamError,), {})(message)
    error.functions = tuple(functions)
    return error


def use_cpu_devices(n: int) -> None:
    """Makes jax in this process see ``n`` CPU devices (``jax_num_cpu_devices``), which it can
    only before it starts its backend (at the first device query or computation)."""
    try:
        jax.config.update("jax_num_cpu_devices", n)
    except RuntimeError as e:  # jax has started: enough devices already, or a usage error
        have = len(jax.devices("cpu"))
        if have < n:
            raise MiniPallasError(
                f"jax has started with {have} CPU devices, and cannot be given {n} now",
                fix=f"ask before anything runs jax (minipallas-difftest --devices {n}), or "
                f"set XLA_FLAGS=--xla_force_host_platform_device_count={n} in the environment",
            ) from e


# -- finding a case that spans devices ------------------------------------------------------


JAXPRS = (jax_core.Jaxpr, jax_core.ClosedJaxpr)  # the parameters of an equation that hold code
KERNELS = ("pallas_call", "core_map")  # a Pallas kernel: pl.pallas_call, pl.kernel / core_map


def spanned(jaxpr: Any) -> int:  # noqa: ANN401
    """How many devices the largest ``shard_map`` of ``jaxpr`` (a ``ClosedJaxpr``) spans that
    holds a Pallas kernel (``KERNELS``); 0 when none spans more than one."""
    most = 0
    for eqn in jaxpr.jaxpr.eqns if hasattr(jaxpr, "jaxpr") else jaxpr.eqns:
        inner = [p for p in eqn.params.values() if isinstance(p, JAXPRS)]
        mesh = eqn.params.get("mesh") if eqn.primitive.name == "shard_map" else None
        if mesh is not None and mesh.size > 1 and any(_has_kernel(j) for j in inner):
            most = max(most, mesh.size)
        most = max([most, *(spanned(j) for j in inner)])
    return most


def _has_kernel(jaxpr: Any) -> bool:  # noqa: ANN401
    eqns = jaxpr.jaxpr.eqns if hasattr(jaxpr, "jaxpr") else jaxpr.eqns
    return any(
        eqn.primitive.name in KERNELS
        or any(_has_kernel(p) for p in eqn.params.values() if isinstance(p, JAXPRS))
        for eqn in eqns
    )


# -- upstream, in a worker ------------------------------------------------------------------


@dataclass
class UpstreamRuns:
    """What the worker found: each run's ``Outcome`` (named after its label), whether
    one hung, and what upstream's race detector said (``races``: None when it did not run)."""

    devices: int
    seconds: float
    runs: list[Outcome] = field(default_factory=list)
    hung: bool = False
    races: bool | None = None
    race_report: str = ""

    def varies(self) -> str | None:
        """How two runs that finished differ (the first output that does), or None."""
        done = [r for r in self.runs if r.ok]
        for other in done[1:]:
            for k, (a, b) in enumerate(zip(done[0].outputs, other.outputs, strict=True)):
                message = compare(a, b)
                if message is not None:
                    return f"'{done[0].way}' and '{other.way}' differ in output {k}: {message}"
        return None

    def first_race(self) -> str:
        """The first race upstream's detector printed (it prints each it finds)."""
        return self.race_report.strip().split("\n\n")[0]

    def text(self) -> str:
        runs = ", ".join(f"{r.way}: {_status(r)}" for r in self.runs)
        race = {None: "did not run", True: "names a race", False: "names none"}[self.races]
        varies = self.varies()
        same = "" if varies is None else f"; its results vary: {varies}"
        return (f"upstream's TPU interpret mode on {self.devices} CPU devices, time box "
                f"{self.seconds:g} s a run: {runs}; its race detector {race}{same}")  # fmt: skip


def _status(o: Outcome) -> str:
    if o.ok:
        return f"ok in {o.seconds:.2f} s"
    return f"{type(o.error).__name__}: {str(o.error).splitlines()[0][:200]}"


class UpstreamWorker:
    """A worker process (``device_worker``) running the cases of one file upstream, one at a
    time (``ask``, then ``collect``), kept for the file's next case unless a run hung."""

    def __init__(self, origin: str, count: int) -> None:
        self.key = (origin, count)
        self.folder = tempfile.TemporaryDirectory(prefix="minipallas-devices-")
        flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={count}"
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": flags}
        command = [sys.executable, "-m", "minipallas.tools.difftest.device_worker", origin,
                   self.folder.name]  # fmt: skip
        # its stdin stays open while this process lives: the worker ends when it closes
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
        self.events: queue.Queue = queue.Queue()
        self.loaded = False  # the file has loaded: the time box applies from now on
        self.label = "loading the case"  # the run under way
        self.stderr: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        errors = self.process.stderr
        threading.Thread(target=self.stderr.extend, args=(errors,), daemon=True).start()

    def ask(self, name: str) -> None:
        """Asks for the case ``name``'s runs."""
        self.label = "loading the case"
        self.process.stdin.write(name + "\n")
        self.process.stdin.flush()

    def _read(self) -> None:
        """Each event with the moment it arrived; None when the worker's stdout closes."""
        for line in self.process.stdout:
            if line.startswith(PREFIX):
                self.events.put((time.monotonic(), json.loads(line[len(PREFIX) :])))
        self.events.put((time.monotonic(), None))

    def collect(self, seconds: float, devices: int) -> UpstreamRuns:
        """Every run's outcome of the case asked for (on ``devices`` devices), a hang when one
        gives nothing within ``seconds`` of the event before it (the worker then killed)."""
        found = UpstreamRuns(devices, seconds)
        deadline = time.monotonic() + (seconds if self.loaded else STARTUP_SECONDS)
        try:
            while True:
                try:
                    at, event = self.events.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    self._hung(found, seconds)
                    break
                deadline = at + seconds
                if not self._take(found, event):
                    break
        except BaseException:
            self.close()
            raise
        if found.hung or self.process.poll() is not None:
            self.close()
        return found

    def close(self) -> None:
        """Kills the worker (this object started it) if it still runs, cleans up, and forgets
        it (``WORKERS``)."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.process.stdin.close()
        self.folder.cleanup()
        if WORKERS.get(self.key) is self:
            del WORKERS[self.key]

    def _hung(self, found: UpstreamRuns, seconds: float) -> None:
        label = self.label
        if not self.loaded:  # not upstream's hang: the case's file did not load in time
            error = _rebuilt("WorkerExit", f"the worker did not load the case in "
                             f"{STARTUP_SECONDS:g} s", ())  # fmt: skip
            found.runs.append(Outcome(label, error=error, stage="load"))
            return
        error = UpstreamHang(
            f"upstream's TPU interpret mode ({label}, {found.devices} devices) gave no result "
            f"within the time box of {seconds:g} s; the worker was killed"
        )
        found.runs.append(Outcome(label, error=error, stage="eval", seconds=seconds))
        found.hung = True

    def _take(self, found: UpstreamRuns, event: dict | None) -> bool:
        """Records ``event``; False when the case is done (or the worker gone)."""
        if event is None:  # the worker ended before its runs did
            tail = "".join(self.stderr)[-2000:]
            error = _rebuilt("WorkerExit", f"the worker ended early: {tail}", ())
            found.runs.append(Outcome(self.label, error=error, stage="load"))
            return False
        kind = event["event"]
        self.loaded = True
        self.label = event.get("label", self.label)
        if kind == "no-case":
            message = f"{event['file']} defines no case {event['case']!r} at module level"
            error = _rebuilt("CaseNotFound", message, ())
            found.runs.append(Outcome(self.label, error=error, stage="load"))
        if kind == "failed":
            error = _rebuilt(event["error"], event["message"], event["where"])
            found.runs.append(Outcome(event["label"], error=error, stage=event["stage"]))
        if kind == "ran":
            found.runs.append(self._outputs(event))
            if event["races"] is not None and not found.races:  # the first race named stays
                found.races, found.race_report = event["races"], event["printed"]
        return kind != "done"

    def _outputs(self, event: dict) -> Outcome:
        with np.load(Path(self.folder.name) / f"run-{event['run']}.npz") as saved:
            raw = [saved[f"arr_{k}"] for k in range(len(event["dtypes"]))]
        outputs = [r.view(jax.numpy.dtype(d)) for r, d in zip(raw, event["dtypes"], strict=True)]
        return Outcome(event["label"], outputs=outputs, seconds=event["seconds"])


# the workers, by (file, device count): one serves every case of its file, one after another
WORKERS: dict[tuple[str, int], UpstreamWorker] = {}


def _worker(case: Case) -> UpstreamWorker:
    """A worker running ``case`` upstream: its file's, or a new one (with as many CPU devices
    as this process has: the file may build the meshes of other cases too)."""
    key = (case.origin, len(jax.devices("cpu")))
    if key not in WORKERS or WORKERS[key].process.poll() is not None:
        WORKERS[key] = UpstreamWorker(*key)
    WORKERS[key].ask(case.name)
    return WORKERS[key]


# -- the ways --------------------------------------------------------------------------------


def run_ways(report: Report, devices: int, seconds: float) -> None:
    """Upstream's runs (``report.upstream_runs``; the first is the ``upstream`` way) and
    minipallas's ways of a case that spans ``devices`` devices (module docstring)."""
    case = report.case
    worker = _worker(case) if os.path.isfile(case.origin) else None
    try:
        simulate(report)
        compiled_way(report)
    except BaseException:  # interrupted: no waiting for the worker
        if worker is not None:
            worker.close()
        raise
    if worker is not None:
        found = worker.collect(seconds, devices)
    else:  # made in a REPL or by ``python -c``: nothing the worker can load
        found = UpstreamRuns(devices, seconds)
        error = _rebuilt("CaseNotFound", f"the case {case.name!r} was not made in a file", ())
        found.runs.append(Outcome("loading the case", error=error, stage="load"))
    report.upstream_runs = found
    first, up = found.runs[0], report.outcomes["upstream"]  # ``up`` holds the trace's time
    up.outputs, up.error, up.stage = first.outputs, first.error, first.stage
    up.seconds += first.seconds


def compiled_way(report: Report) -> None:
    """The ``on-devices`` way: the case's function with each kernel that spans devices compiled
    to XLA collectives (``minipallas.on_devices``, issue 47 item 3), run under ``jax.jit`` on
    this process's devices, where minipallas has it. A kernel it refuses (communication that
    depends on data runs only in the simulator) is noted, not a way that failed."""
    if "on_devices" not in minipallas.__all__:
        return
    o = report.outcomes["on-devices"] = Outcome("on-devices")

    def go() -> list[np.ndarray]:
        compiled = jax.jit(minipallas.on_devices(report.case.fn))
        return [np.asarray(r) for r in jax.tree.leaves(compiled(*initial(report.case.args)))]

    o.outputs = timed("run", go, o)
    if isinstance(o.error, MiniPallasError):
        del report.outcomes["on-devices"]
        report.check_notes.append(f"on-devices: not compiled: {o.error}")


def simulate(report: Report) -> None:
    """minipallas's ways: the import simulated under each schedule."""
    args = report.case.args
    ways = {"interpret": "lockstep", **{f"schedule-{s}": s for s in SCHEDULES}}
    first = report.outcomes["interpret"] = Outcome("interpret")
    fn = timed("import", lambda: minipallas.from_jaxpr(report.jaxpr), first)
    report.program = fn
    for way, schedule in ways.items():
        o = report.outcomes.setdefault(way, Outcome(way))
        if fn is None:
            o.error, o.stage = first.error, "import"
            continue
        o.outputs = timed("interpret", lambda s=schedule: interpret_outputs(
            fn, args, collectives="simulate", schedule=s), o)  # fmt: skip
