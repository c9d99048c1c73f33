"""Builds and traces every case: ``python -m minipallas.tools.corpora.mesh_corpus``."""

from __future__ import annotations

from minipallas.tools.corpora.mesh_corpus import CASES, ONE_CORE, _check

if __name__ == "__main__":
    names = [c.name for c in CASES + ONE_CORE]
    assert len(set(names)) == len(names)
    for case in CASES + ONE_CORE:
        print(_check(case))
    counts = {e: sum(c.expect == e for c in CASES) for e in ("ok", "race", "deadlock")}
    print(f"{len(CASES)} cases {counts}, {len(ONE_CORE)} one-core cases")
