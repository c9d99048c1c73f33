"""The process that runs a case that spans devices upstream (``devices.UpstreamWorker`` starts it).

``python -m minipallas.difftest.device_worker FILE CASE OUT`` runs the ``Case`` named CASE that
FILE defines (at module level, or in a list or tuple there: ``cli.cases_in``) in upstream's TPU
interpret mode (``plan``): twice with ``InterpretParams()`` (does it give the same result
twice?), then with ``detect_races=True`` (does upstream's race detector name a race?). jax must
see the case's devices: the parent sets ``XLA_FLAGS`` before this one starts.

Why a process of its own: upstream's interpret mode waits forever on a kernel that deadlocks,
and only a process can be stopped from outside; the parent kills this one when a run outlives
its time box. A ``pallas_call`` reads its interpret mode when it is made, so the file runs again
under ``pltpu.force_tpu_interpret_mode`` for each mode, and the function is called under it.

Each event is one line on stdout, ``devices.PREFIX`` then JSON (upstream's own prints, such as
its race reports, are captured and sent in the events): ``loaded`` (the file ran), ``started``
(a run, by its label), ``ran`` (run K's outputs are in OUT/run-K.npz, as unsigned integers of
their width, their dtypes named in the event), ``failed`` (the exception's class, message and
the functions on its traceback, which ``classify.recognize_crash`` reads), ``no-case``,
``done``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
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

from minipallas.difftest.cli import cases_in
from minipallas.difftest.devices import DETECT, DETECT_TRIES, PLAIN, PREFIX
from minipallas.difftest.outputs import initial
from minipallas.lowering.jax_private import pallas_tpu_interpret


def emit(event: str, **fields: Any) -> None:  # noqa: ANN401
    print(PREFIX + json.dumps({"event": event, **fields}), flush=True)


def load(path: str, name: str, params: Any) -> Any:  # noqa: ANN401
    """The case ``name`` of ``path``, its file run under upstream's interpret ``params``."""
    with pltpu.force_tpu_interpret_mode(params):
        return next((c for c in cases_in(Path(path)) if c.name == name), None)


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


def orphaned() -> None:
    """Ends this process when its parent's end of stdin closes (the parent died without killing
    it): a run upstream waits in forever must not outlive the difftest."""
    sys.stdin.read()
    os._exit(3)


def main(path: str, name: str, out: str) -> int:
    threading.Thread(target=orphaned, daemon=True).start()
    loaded: tuple[str, Any] | None = None
    for k, (label, params) in enumerate(plan()):
        try:
            if loaded is None or loaded[0] != repr(params):
                loaded = (repr(params), load(path, name, params))
                if loaded[1] is None:
                    emit("no-case", file=path, case=name)
                    return 0
                emit("loaded")
            emit("started", label=label)
            start = time.perf_counter()
            outputs, printed = run_once(loaded[1], params)
        except Exception as e:  # upstream's crash is the way's outcome, reported to the parent
            stage = "load" if loaded is None or loaded[1] is None else "eval"
            emit("failed", label=label, stage=stage, error=type(e).__name__, message=str(e),
                 where=_functions(e))  # fmt: skip
            return 0
        races = pallas_tpu_interpret.races
        np.savez(Path(out) / f"run-{k}.npz", *(o.view(f"u{o.dtype.itemsize}") for o in outputs))
        emit("ran", run=k, label=label, seconds=time.perf_counter() - start,
             dtypes=[str(o.dtype) for o in outputs], printed=printed[-4000:],
             races=bool(races.races_found) if params.detect_races else None)  # fmt: skip
    emit("done")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
