"""The mesh-kernel corpus (issue 38): minipallas's own realistic multi-core kernels
(``mesh_corpus``) and upstream's tests of ``pl.kernel`` / ``core_map`` on TensorCore meshes
(``mesh_corpus_upstream``, jax 0.10.2).

Each is imported, refused by default with upstream's message, simulated (numpy's bits, or its
race or deadlock named) and compiled with the same bits where the one-program form takes it.
What must never happen: a wrong bit, or an error that is not a ``MiniPallasError``. The
suite runs every kernel of ours and a fixed sample of upstream's (one parameterization per
upstream test: all 492 take too long for ``make test``); ``python
tests/interop/test_mesh_corpus.py [ours|upstream]`` prints the table of
docs/guides/collectives.md for all of them.
"""

from __future__ import annotations

import re

import jax
import mesh_corpus_upstream
import numpy as np
import pytest

import minipallas as mp
from minipallas.ir.collectives import CollectiveAxesError
from minipallas.tools.corpora import mesh_corpus

CASES = [*mesh_corpus.CASES, *mesh_corpus_upstream.CASES]
SCHEDULES = ("lockstep", 0, 1, 2, 3, 4, 5, 6, 7)


def _same(case: object, got: np.ndarray, want: np.ndarray) -> bool:
    got, want = np.asarray(got), np.asarray(want)
    if getattr(case, "exact", True):
        return got.dtype == want.dtype and got.tobytes() == want.tobytes()
    return np.allclose(got, want, rtol=1e-5, atol=1e-5)


def _short(e: BaseException) -> str:
    text = e.message if isinstance(e, mp.MiniPallasError) else str(e)
    return f"{type(e).__name__}: {text.splitlines()[0][:140]}"


def verdict(case: object) -> dict[str, str]:
    """What each path does with one case, in words (the table's row); ``error`` holds a
    failure that is a bug of minipallas (a raw exception, a wrong bit)."""
    row = {"case": case.name, "cores": str(case.cores), "expect": case.expect.split(":")[0]}
    try:
        f, args = case.build()
        args = tuple(np.asarray(a) for a in args)
        jaxpr = jax.make_jaxpr(f)(*args)
    except Exception as e:  # noqa: BLE001 - upstream refusing to trace is the case's point
        return {**row, "imported": f"upstream's trace raises {type(e).__name__}"}
    try:
        fn = mp.from_jaxpr(jaxpr)
    except mp.MiniPallasError as e:
        return {**row, "imported": f"refused: {_short(e)}"}
    row["imported"] = "yes"
    try:
        mp.interpret(fn, *args)
        row["default"] = "runs (nothing shared)"
    except CollectiveAxesError as e:
        row["default"] = f"refused: {e}"
    except mp.MiniPallasError as e:
        row["default"] = _short(e)
    if case.expect in ("race", "deadlock"):
        found = set()
        for schedule in SCHEDULES:
            try:
                mp.interpret(fn, *args, collectives="simulate", schedule=schedule)
            except (mp.RaceError, mp.DeadlockError) as e:
                found.add("race" if isinstance(e, mp.RaceError) else "deadlock")
            except mp.MiniPallasError as e:
                found.add(type(e).__name__)
        row["simulated"] = " and ".join(sorted(found)) or "nothing found"
        return row
    try:
        got = mp.interpret(fn, *args, collectives="simulate")
        again = mp.interpret(fn, *args, collectives="simulate", schedule=1)
    except mp.MiniPallasError as e:
        return {**row, "simulated": _short(e)}
    if case.reference is None:  # upstream checks its lowering only, or refuses later
        row["simulated"] = "runs"
        return row
    want = case.reference(*args)
    want = want if isinstance(want, tuple) else (want,)
    ok = all(_same(case, g, w) for g, w in zip(got, want, strict=True))
    ok = ok and all(a.tobytes() == g.tobytes() for a, g in zip(again, got, strict=True))
    exactly = "numpy's bits" if getattr(case, "exact", True) else "numpy within 1e-5"
    row["simulated"] = exactly if ok else "DIFFERS"
    try:
        compiled = mp.compile(mp.discharge(fn, collectives="simulate"))(*args)
        same = all(_same(case, g, w) for g, w in zip(compiled, want, strict=True))
        row["compiled"] = exactly if same else "DIFFERS"
    except mp.MiniPallasError as e:
        row["compiled"] = f"refused: {_short(e)}"
    return row


def _sample(cases: list) -> list:
    """One parameterization of each upstream test (its first), the fusion tests left out."""
    seen, sample = set(), []
    for case in cases:
        test = re.sub(r"\[.*", "", case.name)
        if test not in seen and "Fusible" not in test and "ExcessPrecision" not in test:
            seen.add(test)
            sample.append(case)
    return sample


IN_SUITE = [*mesh_corpus.CASES, *_sample(mesh_corpus_upstream.CASES)]


@pytest.mark.parametrize("case", IN_SUITE, ids=lambda c: c.name)
def test_every_corpus_kernel_runs_or_is_refused_never_wrong(case):
    try:
        row = verdict(case)
    except mp.MiniPallasError:
        raise
    except Exception as e:  # a raw exception reaching the user is a bug
        raise AssertionError(f"{case.name}: {type(e).__name__}: {e}") from e
    assert "DIFFERS" not in row.values(), row
    if case in mesh_corpus.CASES:  # ours: every path as designed
        assert row["imported"] == "yes", row
        if case.expect == "ok":
            assert row["simulated"].startswith("numpy"), row
        else:
            assert case.expect in row["simulated"], row


def test_the_corpus_is_big_enough():
    ours = [c for c in mesh_corpus.CASES if c.expect == "ok"]
    assert len({c.name.rsplit("_x", 1)[0] for c in ours}) >= 10
    assert {c.expect for c in mesh_corpus.CASES} == {"ok", "race", "deadlock"}
    assert len(_sample(mesh_corpus_upstream.CASES)) >= 30


def table(cases: list) -> None:
    """Prints the table, a row per case as it is done."""
    columns = ("case", "cores", "imported", "default", "simulated", "compiled")
    print("| " + " | ".join(columns) + " |\n|" + "---|" * len(columns), flush=True)
    for case in cases:
        row = verdict(case)
        print("| " + " | ".join(row.get(c, "") for c in columns) + " |", flush=True)


if __name__ == "__main__":
    import sys

    which = {"ours": mesh_corpus.CASES, "upstream": mesh_corpus_upstream.CASES}
    table(which[sys.argv[1]] if len(sys.argv) > 1 else CASES)
