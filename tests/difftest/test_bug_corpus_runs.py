"""The bug corpus (``bug_corpus``) is well formed, its correct kernels compute what they mean
under upstream's plain interpret mode, and the chip runner (``bench/chip/tpu_bugs.py``) works on
the CPU."""

import functools
import json
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from minipallas.tools.corpora.bug_corpus import BUGS, BY_NAME, CHIPS, ENTRIES
from minipallas.tools.corpora.bug_corpus.common import matches

ROOT = Path(__file__).resolve().parents[2]
CORRECT = [e for e in ENTRIES if e.bug is None]


def test_entries_are_well_formed():
    assert len(BY_NAME) == len(ENTRIES), "entry names are unique"
    for e in ENTRIES:
        assert e.bug is None or e.bug in BUGS, e.name
        assert e.chip in CHIPS, e.name
        assert (e.bug is None) == (e.chip == "correct"), e.name
        assert e.note and "\n" not in e.note, e.name
        assert all(isinstance(a, np.ndarray) for a in e.args), e.name
    assert {e.bug for e in ENTRIES} - {None} == set(BUGS), "every kind of bug has an entry"
    assert len(CORRECT) >= 10


@pytest.mark.parametrize("entry", CORRECT, ids=lambda e: e.name)
def test_correct_entries_compute_want(entry):
    got = jax.jit(functools.partial(entry.fn, interpret=True))(*entry.args)
    assert matches(got, entry.want(*entry.args))


def test_importing_the_corpus_opens_no_backend():
    """The chip runner's parent imports the corpus: it must not take the chip from its
    workers."""
    code = (
        "import minipallas.tools.corpora.bug_corpus; "
        "from jax._src import xla_bridge; assert not xla_bridge._backends, 'backend opened'"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=120)


def test_chip_runner_on_the_cpu(tmp_path):
    """Two entries in CPU interpret mode, the first "halting" its worker: it is recorded as a
    halt and a fresh worker measures the second."""
    from bench.chip import tpu_bugs

    out = tmp_path / "bugs.json"
    only = "matmul_init,partial_elementwise"
    argv = ["--cpu", "--only", only, "--out", str(out), "--simulate-halt", "matmul_init"]
    assert tpu_bugs.main(argv) == 0
    report = json.loads(out.read_text())
    chips = {r["name"]: r["chip"] for r in report["entries"]}
    assert chips == {"matmul_init": "halt", "partial_elementwise": "correct"}
