"""The mesh-kernel corpus (issue 38): minipallas's own realistic multi-core kernels
(``mesh_corpus``) and upstream's tests of ``pl.kernel`` / ``core_map`` on TensorCore meshes
(``mesh_corpus_upstream``), each imported, refused by default with upstream's message,
simulated with numpy's bits (or its race or deadlock named), and compiled with the same bits
where the one-program form takes it.

``python tests/interop/test_mesh_corpus.py`` prints the table docs/guides/collectives.md
shows.
"""

from __future__ import annotations

import jax
import mesh_corpus
import mesh_corpus_upstream
import numpy as np
import pytest

import minipallas as mp
from minipallas.ir.collectives import CollectiveAxesError

CASES = [*mesh_corpus.CASES, *mesh_corpus_upstream.CASES]
SCHEDULES = ("lockstep", 0, 1, 2, 3, 4, 5, 6, 7)


def _same(case: object, got: np.ndarray, want: np.ndarray) -> bool:
    got = np.asarray(got)
    if getattr(case, "exact", True):
        return got.dtype == want.dtype and got.tobytes() == want.tobytes()
    return np.allclose(got, want, rtol=1e-5, atol=1e-5)


def _outputs(case: object, f: object, args: tuple) -> tuple:
    want = case.reference(*args)
    return want if isinstance(want, tuple) else (want,)


def verdict(case: object) -> dict[str, str]:
    """What each path does with one case, in words (the table's row)."""
    f, args = case.build()
    args = tuple(np.asarray(a) for a in args)
    row = {"case": case.name, "cores": str(case.cores), "expect": case.expect}
    try:
        fn = mp.from_jaxpr(jax.make_jaxpr(f)(*args))
    except mp.MiniPallasError as e:
        return {**row, "imported": f"no: {e.message}"}
    row["imported"] = "yes"
    try:
        mp.interpret(fn, *args)
        row["default"] = "runs (nothing shared)"
    except CollectiveAxesError as e:
        row["default"] = f"refused: {e}"
    except mp.MiniPallasError as e:
        row["default"] = f"{type(e).__name__}"
    if case.expect != "ok":
        found = set()
        for schedule in SCHEDULES:
            try:
                mp.interpret(fn, *args, collectives="simulate", schedule=schedule)
            except (mp.RaceError, mp.DeadlockError) as e:
                found.add("race" if isinstance(e, mp.RaceError) else "deadlock")
            except mp.MiniPallasError as e:
                found.add(f"{type(e).__name__}")
        row["simulated"] = " and ".join(sorted(found)) or "nothing found"
        return row
    want = _outputs(case, f, args)
    try:
        got = mp.interpret(fn, *args, collectives="simulate")
        again = mp.interpret(fn, *args, collectives="simulate", schedule=1)
    except mp.MiniPallasError as e:
        return {**row, "simulated": f"{type(e).__name__}: {e.message}"}
    ok = all(_same(case, g, w) for g, w in zip(got, want, strict=True))
    ok = ok and all(a.tobytes() == g.tobytes() for a, g in zip(again, got, strict=True))
    exactly = "numpy's bits" if getattr(case, "exact", True) else "numpy within 1e-5"
    row["simulated"] = exactly if ok else "DIFFERS"
    try:
        compiled = mp.compile(mp.discharge(fn, collectives="simulate"))(*args)
        same = all(_same(case, g, w) for g, w in zip(compiled, want, strict=True))
        row["compiled"] = exactly if same else "DIFFERS"
    except mp.MiniPallasError as e:
        row["compiled"] = f"refused: {e.message.split(' (')[0]}"
    return row


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_corpus_kernel_runs_as_it_should(case):
    row = verdict(case)
    assert row["imported"] == "yes", row
    if case.expect == "ok":
        assert row["simulated"].startswith("numpy"), row
        assert row["compiled"] != "DIFFERS", row
    else:
        assert case.expect in row["simulated"], row


def test_the_corpus_is_big_enough_and_mostly_compiles():
    ours = [c for c in mesh_corpus.CASES if c.expect == "ok"]
    assert len({c.name.rsplit("_x", 1)[0] for c in ours}) >= 10
    assert {c.expect for c in mesh_corpus.CASES} == {"ok", "race", "deadlock"}


def table(cases: list) -> str:
    columns = ("case", "cores", "imported", "default", "simulated", "compiled")
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for case in cases:
        row = verdict(case)
        lines.append("| " + " | ".join(row.get(c, "") for c in columns) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    which = {"ours": mesh_corpus.CASES, "upstream": mesh_corpus_upstream.CASES}
    print(table(which[sys.argv[1]] if len(sys.argv) > 1 else CASES))
