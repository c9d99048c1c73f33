"""The mutation tool: its catalogue matches the code as it is, a mutant changes only its own
file of a copy, the worker refuses a run whose imports do not come from the copy, and one
cheap mutant is killed end to end by the corpus in a subprocess."""

import hashlib
import sys
from dataclasses import replace
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import mutate  # noqa: E402
from mutants import BY_NAME, CATEGORIES, MUTANTS  # noqa: E402


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_every_snippet_occurs_exactly_once_in_its_file(mutant):
    assert mutate.snippet_line(mutant) >= 1  # raises CatalogueError naming mutant and file


def test_catalogue_is_well_formed():
    names = [m.name for m in MUTANTS]
    assert len(set(names)) == len(names) >= 40
    assert {m.category for m in MUTANTS} == set(CATEGORIES)
    for m in MUTANTS:
        assert m.find != m.replace and m.description, m.name
        assert not m.file.startswith("ir/interpret"), f"{m.name} mutates the oracle"
        assert mutate.copied_path(m.file).startswith("site/minipallas/"), m.name


def test_a_drifted_snippet_is_an_error_naming_the_mutant_and_file():
    drifted = replace(BY_NAME["for-loop-le"], find="no such code")
    with pytest.raises(mutate.CatalogueError, match=r"for-loop-le.*0 times.*control\.py"):
        mutate.snippet_line(drifted)


def _digests(root):
    return {
        p.relative_to(root): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*.py"))
    }


def test_applying_a_mutant_changes_only_its_file_of_the_copy(tmp_path):
    mutant = BY_NAME["cond-branches-swapped"]
    mutate.make_copy(tmp_path, mutate.ROOT)
    before = _digests(tmp_path)
    original = (mutate.ROOT / mutant.file).read_text()
    assert (tmp_path / mutate.copied_path(mutant.file)).read_text() == original
    changed = mutate.apply(mutant, tmp_path)
    after = _digests(tmp_path)
    assert [k for k in before if before[k] != after[k]] == [changed.relative_to(tmp_path)]
    assert changed.read_text() == original.replace(mutant.find, mutant.replace)
    assert (mutate.ROOT / mutant.file).read_text() == original  # the checkout is untouched


def test_the_worker_refuses_imports_that_do_not_come_from_the_copy(tmp_path):
    """In this process minipallas comes from the checkout, so the canary must fire."""
    mutate.make_copy(tmp_path, mutate.ROOT)
    verdict = mutate.worker(tmp_path, None, {}, 0.0)
    assert verdict["killed_by"] == "not isolated", verdict
    assert str(mutate.ROOT / "minipallas") in verdict["detail"]


def test_a_cheap_mutant_is_killed_by_the_corpus_in_a_subprocess():
    mutant = BY_NAME["swap-drops-write"]  # the corpus's first case writes a window
    verdict = mutate.check(mutant, mutate.ROOT, {}, 0.0, timeout=120)
    assert verdict.killed_by == "corpus", verdict
    assert verdict.detail.startswith("corpus:static_int_and_slice (discharge disagrees")
    assert verdict.by_corpus
