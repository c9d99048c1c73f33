"""Runs a case both ways and says what came of it, as a small dict (a JSON line in the tests).

Upstream: the kernel in upstream's TPU interpret mode (``pltpu.force_tpu_interpret_mode``) with
its race detector on; a kernel that deadlocks is never run there (it hangs with no report).
minipallas: ``mp.from_jaxpr`` of the jitted function's jaxpr, then ``mp.interpret(...,
collectives="simulate", schedule=s)`` for each schedule; compiled: ``jax.jit(mp.on_devices(f))``,
each remote copy an XLA collective (a kernel whose communication depends on data is refused).
Each verdict is ``{"kind": ...,
"detail": ...}``; the kinds:

- ``ok``: the reference's values (exactly, or within the case's ``atol``);
- ``wrong``: other values (the detail counts NaNs and differing elements);
- ``race`` / ``deadlock``: upstream's detector found a race / minipallas raised ``RaceError``
  or ``DeadlockError`` (the detail is the error's first line);
- ``wrong-count``: upstream printed a semaphore left non-zero at kernel exit;
- ``not-run``: a deadlock, never run upstream;
- ``hangs``: a correct kernel upstream's interpret mode never finishes, not run here
  (``minipallas-difftest`` runs it time-boxed: ``upstream-hangs``);
- ``refused``: minipallas's importer (or ``on_devices``) refused the program with a
  ``MiniPallasError``;
- ``error``: upstream raised, or minipallas's simulator raised another ``MiniPallasError``;
- ``crash``: minipallas raised something not a ``MiniPallasError`` (a bug of minipallas).
"""

from __future__ import annotations

import contextlib
import io
import time
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.experimental.pallas import tpu as pltpu

import minipallas as mp
from minipallas.lowering.compat.jax_private import pallas_tpu_interpret as upstream_interpret
from minipallas.tools.corpora.multi_device.case import Case


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"


def compare(case: Case, got: Any, x: Sequence[np.ndarray]) -> dict:
    """``ok`` or ``wrong`` against the case's reference (``-0.0`` equals ``0.0``)."""
    got = np.asarray(got)
    want = np.asarray(case.reference(*x))
    if got.shape == want.shape:
        close = np.isclose(got, want, rtol=0, atol=case.atol) if case.atol else got == want
        if close.all():
            return {"kind": "ok", "detail": ""}
        bad = int((~close).sum())
    else:
        bad = -1
    nans = int(np.isnan(got).sum())
    return {
        "kind": "wrong",
        "detail": f"{bad} of {want.size} elements differ, {nans} NaNs "
        f"(shape {got.shape}, want {want.shape})",
    }


def upstream(case: Case) -> dict:
    """What upstream's TPU interpret mode does with the case (race detector on)."""
    if case.expect == "deadlock":
        return {"kind": "not-run", "detail": "a deadlock hangs upstream's interpret mode"}
    if case.upstream_kinds == ("hangs",):  # a correct kernel upstream never finishes
        return {"kind": "hangs", "detail": case.upstream.split(": ", 1)[1]}
    x = case.inputs()
    printed = io.StringIO()
    start = time.perf_counter()
    params = pltpu.InterpretParams(detect_races=True)
    try:
        with contextlib.redirect_stdout(printed), pltpu.force_tpu_interpret_mode(params):
            got = np.asarray(jax.jit(case.build())(*x))
    except Exception as e:  # upstream's own failure is what we report
        upstream_interpret.reset_tpu_interpret_mode_state()
        return {"kind": "error", "detail": _first_line(e)}
    seconds = round(time.perf_counter() - start, 2)
    values = compare(case, got, x) if case.reference is not None else {"kind": "ok"}
    races = upstream_interpret.races
    if races is not None and races.races_found:
        detail = "its race detector reports a race; values " + values["kind"]
        return {"kind": "race", "detail": detail, "seconds": seconds}
    if "non-zero count" in printed.getvalue():
        detail = printed.getvalue().strip().splitlines()[0]
        return {"kind": "wrong-count", "detail": detail, "seconds": seconds}
    return {"detail": "", **values, "seconds": seconds}


def minipallas(case: Case, schedules: Sequence[int | str]) -> list[dict]:
    """minipallas's verdict for each schedule (one import, then one simulation each)."""
    x = case.inputs()
    try:
        fn = mp.from_jaxpr(jax.make_jaxpr(jax.jit(case.build()))(*x))
    except mp.MiniPallasError as e:
        return [{"schedule": s, "kind": "refused", "detail": _first_line(e)} for s in schedules]
    except Exception as e:  # a crash is a finding: reported, not raised
        return [{"schedule": s, "kind": "crash", "detail": _first_line(e)} for s in schedules]
    return [{"schedule": s, **_timed(_simulate, case, fn, x, s)} for s in schedules]


def compiled(case: Case) -> dict:
    """What ``jax.jit(mp.on_devices(f))`` gives: the kernel's remote copies as XLA collectives
    (its seconds count the first call: tracing, import, XLA's compile and the run)."""
    return _timed(_compiled, case)


def _timed(way: Any, *args: Any) -> dict:
    """``way(*args)``'s verdict with the seconds it took."""
    start = time.perf_counter()
    verdict = way(*args)
    return {**verdict, "seconds": round(time.perf_counter() - start, 3)}


def _compiled(case: Case) -> dict:
    x = case.inputs()
    try:
        got = jax.jit(mp.on_devices(case.build()))(*x)
    except mp.MiniPallasError as e:
        return {"kind": "refused", "detail": _first_line(e)}
    except Exception as e:  # a crash: reported
        return {"kind": "crash", "detail": _first_line(e)}
    return compare(case, got, x)


def _simulate(case: Case, fn: mp.Function, x: Sequence[np.ndarray], schedule: Any) -> dict:
    try:
        outs = mp.interpret(fn, *x, collectives="simulate", schedule=schedule)
    except mp.RaceError as e:
        return {"kind": "race", "detail": _first_line(e), "text": str(e)}
    except mp.DeadlockError as e:
        return {"kind": "deadlock", "detail": _first_line(e), "text": str(e)}
    except mp.MiniPallasError as e:
        return {"kind": "error", "detail": _first_line(e), "text": str(e)}
    except Exception as e:  # a crash: reported
        return {"kind": "crash", "detail": _first_line(e)}
    if case.reference is None:
        return {"kind": "ok", "detail": "no reference to compare with"}
    return compare(case, outs[0], x)
