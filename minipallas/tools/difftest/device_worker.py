"""The process that runs cases that span devices upstream (``devices.UpstreamWorker`` starts it).

``python -m minipallas.tools.difftest.device_worker FILE OUT`` reads case names from stdin, one a
line, and runs each ``Case`` of that name that FILE defines (at module level, or in a list or tuple
there: ``cli.cases_in``) in upstream's TPU interpret mode (``plan``): twice with
``InterpretParams()`` (does it give the same result twice?), then with ``detect_races=True`` (does
upstream's race detector name a race?). jax must see the case's devices: the parent sets
``XLA_FLAGS`` before this one starts. It serves the file's cases until stdin closes, loading the
file once for each interpret mode, so only the first case pays for starting jax.

Why a process of its own: upstream's interpret mode waits forever on a kernel that deadlocks,
and only a process can be stopped from outside; the parent kills this one when a run outlives
its time box. A ``pallas_call`` reads its interpret mode when it is made, so the file runs
under ``pltpu.force_tpu_interpret_mode`` for each mode, and the function is called under it.

Each event is one line on stdout, ``devices.PREFIX`` then JSON (upstream's own prints, such as
its race reports, are captured and sent in the events): ``started`` (a run, by its label),
``ran`` (run K's outputs are in OUT/run-K.npz, as unsigned integers of their width, their dtypes
named in the event), ``failed`` (the exception's class, message and the functions on its
traceback, which ``classify.recognize_crash`` reads), ``no-case``; ``done`` ends each case.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import queue
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.experimental.pallas import tpu as pltpu

from minipallas.lowering.compat.jax_private import pallas_tpu_interpret
from minipallas.tools.difftest.cli import cases_in
from minipallas.tools.difftest.devices import DETECT, DETECT_TRIES, PLAIN, PREFIX
from minipallas.tools.difftest.outputs import initial


def emit(event: str, **fields: Any) -> None:  # noqa: ANN401
    print(PREFIX + json.dumps({"event": event, **fields}), flush=True)


def run_once(case: Any, params: Any) -> tuple[list[np.ndarray], str]:  # noqa: ANN401
    """The case's outputs in upstream's interpret mode, and what upstream printed meanwhile."""
    pallas_tpu_interpret.reset_tpu_interpret_mode_state()
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), pltpu.force_tpu_interpret_mode(params):
        results = jax.jit(case.fn)(*initial(case.args))
        outputs = [np.asarray(r) for r in jax.tree.leaves(results)]
    return outputs, printed.getvalue()


def _functions(error: BaseException) -> list[str]:
    names: list[str] = []
    e: BaseException | None = error
    while e is not None and len(names) < 500:
        names += [frame.name for frame in traceback.extract_tb(e.__traceback__)]
        e = e.__cause__ or e.__context__
    return names


def plan() -> Iterator[tuple[str, Any]]:
    """The runs, (label, upstream's parameters): ``PLAIN`` twice, then ``DETECT`` until its race
    detector names a race, ``DETECT_TRIES`` times at most (it misses one now and then)."""
    yield "InterpretParams()", PLAIN
    yield "InterpretParams() again", PLAIN
    for k in range(DETECT_TRIES):
        yield "InterpretParams(detect_races=True)" + (f", try {k + 1}" if k else ""), DETECT
        if pallas_tpu_interpret.races is not None and pallas_tpu_interpret.races.races_found:
            return


def requests(names: queue.Queue) -> None:
    """The parent's requests, a case name a line, into ``names``; ends this process when stdin
    closes: the parent is done, or died without killing it (a run upstream waits in forever
    must not outlive the difftest)."""
    for line in sys.stdin:
        names.put(line.strip())
    os._exit(0)


def serve(path: str, name: str, out: str, files: dict[str, dict[str, Any]], k: int) -> int:
    """Runs the case ``name`` (``plan``), its file's cases loaded once for each interpret mode
    (``files``); returns the next run's number (numbered across cases: OUT/run-K.npz)."""
    for label, params in plan():
        try:
            if repr(params) not in files:
                with pltpu.force_tpu_interpret_mode(params):
                    files[repr(params)] = {c.name: c for c in cases_in(Path(path))}
            case = files[repr(params)].get(name)
            if case is None:
                emit("no-case", file=path, case=name)
                return k
            emit("started", label=label)
            start = time.perf_counter()
            outputs, printed = run_once(case, params)
        except Exception as e:  # upstream's crash is the way's outcome, reported to the parent
            stage = "load" if repr(params) not in files else "eval"
            emit("failed", label=label, stage=stage, error=type(e).__name__, message=str(e),
                 where=_functions(e))  # fmt: skip
            return k
        races = pallas_tpu_interpret.races
        np.savez(Path(out) / f"run-{k}.npz", *(o.view(f"u{o.dtype.itemsize}") for o in outputs))
        emit("ran", run=k, label=label, seconds=time.perf_counter() - start,
             dtypes=[str(o.dtype) for o in outputs], printed=printed[-4000:],
             races=bool(races.races_found) if params.detect_races else None)  # fmt: skip
        k += 1
    return k


def main(path: str, out: str) -> int:
    names: queue.Queue = queue.Queue()
    threading.Thread(target=requests, args=(names,), daemon=True).start()
    files: dict[str, dict[str, Any]] = {}
    k = 0
    while True:
        k = serve(path, names.get(), out, files, k)
        emit("done")


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
