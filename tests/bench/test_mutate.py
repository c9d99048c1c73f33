"""The mutation tool: its catalogue matches the code as it is, a mutant changes only its own
file of a copy, the worker refuses a run whose imports do not come from the copy, and one
cheap mutant is killed end to end by the corpus in a subprocess."""

import collections
import hashlib
import sys
import types
from dataclasses import replace
from pathlib import Path

import pytest

from bench.mutation import mutate
from bench.mutation.mutants import BY_NAME, CATEGORIES, MUTANTS


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
    assert verdict.detail.startswith("difftest_cases:static_int_and_slice (discharge disagrees")
    assert verdict.by_corpus


def test_programs_option_fixes_the_fuzz_counts():
    assert mutate.parse_programs("discharge=625,upstream=69,kernels=17") == {
        "discharge": 625,
        "upstream": 69,
        "kernels": 17,
    }
    assert mutate.parse_programs("kernels=3") == {"kernels": 3}
    for bad in ("kernel=3", "kernels", "kernels=-1", "kernels=x"):
        with pytest.raises(mutate.argparse.ArgumentTypeError, match="FUZZER=COUNT"):
            mutate.parse_programs(bad)
    with pytest.raises(SystemExit):  # argparse turns the error into a usage message
        mutate.main(["--programs", "fuzz=1", "--only", "for-loop-le"])


def _fake_frontend(tmp_path, monkeypatch, problems):
    """A copy whose front-end checks are ``problems``: the file exists in the copy, and its
    module (as the worker imports it from the copy) holds those checks."""
    folder = tmp_path / mutate.CORPUS_FOLDER
    folder.mkdir(parents=True)
    (folder / f"{mutate.FRONTEND}.py").write_text("")
    Check = collections.namedtuple("Check", "name run")
    module = types.ModuleType(mutate.FRONTEND)
    module.CHECKS = tuple(Check(n, lambda p=p: p) for n, p in problems)
    monkeypatch.setitem(sys.modules, f"{mutate.CORPUS_PACKAGE}.{mutate.FRONTEND}", module)


def test_the_frontend_stage_kills_at_the_first_check_reporting_a_problem(tmp_path, monkeypatch):
    _fake_frontend(tmp_path, monkeypatch, [("fine", None), ("bad", "compile 1 != 0"), ("x", "y")])
    assert mutate._frontend_kill(tmp_path) == "frontend_checks:bad (compile 1 != 0)"


def test_the_frontend_stage_passes_when_every_check_agrees(tmp_path, monkeypatch):
    _fake_frontend(tmp_path, monkeypatch, [("fine", None), ("also", None)])
    assert mutate._frontend_kill(tmp_path) is None


@pytest.mark.parametrize(
    ("killed_by", "without_fuzzers"),
    [("corpus", True), ("frontend", True), ("crash (frontend)", True), ("crash (setup)", True),
     ("fuzz kernels", False), ("crash (fuzz kernels)", False), (None, False)],
)  # fmt: skip
def test_kills_without_the_fuzzers_are_counted_apart(killed_by, without_fuzzers):
    verdict = mutate.Verdict(BY_NAME["for-loop-le"], killed_by, "", 1.0, {}, [])
    assert verdict.by_corpus is without_fuzzers


def test_the_default_run_fuzzes_fixed_counts_and_fuzz_seconds_time_boxes():
    assert mutate.fuzz_plan(None, None) == (mutate.DEFAULT_PROGRAMS, 20.0)
    assert mutate.fuzz_plan(None, 5.0) == ({}, 5.0)
    assert mutate.fuzz_plan({"kernels": 3}, None) == ({"kernels": 3}, 20.0)
    assert mutate.DEFAULT_PROGRAMS["upstream"] >= 140  # past the former false alarm


def _deadlines(monkeypatch, mutant, counts, seconds, limits=None):
    """The deadline each fuzzer got from the worker, as seconds from its start."""
    monkeypatch.setattr(mutate, "_check_isolation", lambda copy, m: None)
    monkeypatch.setattr(mutate, "_corpus_kill", lambda copy: (None, []))
    monkeypatch.setattr(mutate, "_frontend_kill", lambda copy: None)
    got = {}

    def fake(name):
        def run(count, deadline):
            got[name] = deadline - mutate.time.monotonic()
            return min(count, 7), None

        return run

    monkeypatch.setattr(mutate, "_FUZZ", {n: fake(n) for n in mutate.FUZZERS})
    verdict = mutate.worker(Path("."), mutant, counts, seconds, limits)
    assert verdict["killed_by"] is None and set(verdict["fuzz_seconds"]) == set(mutate.FUZZERS)
    return got


def test_the_control_runs_fixed_counts_to_the_end_and_mutants_get_its_measured_time(
    monkeypatch,
):
    control = _deadlines(monkeypatch, None, {"discharge": 5, "upstream": 5}, 20.0)
    assert control["discharge"] == control["upstream"] == float("inf")
    assert 19 < control["kernels"] <= 20  # not fixed: time-boxed
    limits = mutate.Verdict(None, None, "", 9.0, {}, [], 0, {"discharge": 2.0}).limits()
    assert limits == {"discharge": 36.0}
    mutant = _deadlines(monkeypatch, BY_NAME["for-loop-le"], {"discharge": 5}, 20.0, limits)
    assert 35 < mutant["discharge"] <= 36
    assert 89 < mutant["upstream"] <= 90  # no measurement: 3x the time box, plus 30 s
