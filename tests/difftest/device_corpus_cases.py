"""The device corpus (``minipallas.tools.corpora.multi_device``) as difftest cases, for
``minipallas-difftest --devices 8 tests/difftest/device_corpus_cases.py`` (issue 47 item 4).

Each corpus kernel becomes a ``Case`` at module level (the upstream worker loads this file
again), expecting what the corpus says it does: agreement for a correct kernel, its race or
deadlock, a kernel bug of some kind for a wrong semaphore count, and an upstream crash (or
hang) where the corpus records that upstream's interpret mode fails (or never finishes) on
it. Every way is compared bit for bit (ring attention's exponentials, compiled by XLA, are
not: a finding).
"""

from minipallas.tools.corpora.multi_device import CASES as CORPUS
from minipallas.tools.difftest import Case

EXPECT = {"ok": None, "race": "race", "deadlock": "deadlock", "wrong-count": "kernel-bug"}


def _expect(kernel) -> str | None:
    if kernel.expect == "ok" and kernel.upstream.startswith("hangs"):
        return "upstream-hangs"
    crashes = kernel.expect == "ok" and kernel.upstream.startswith("error")
    return "upstream-crash" if crashes else EXPECT[kernel.expect]


CASES = [Case(k.name, k.build(), k.inputs(), expect=_expect(k)) for k in CORPUS]
