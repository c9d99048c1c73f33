"""Fuzzing a pass of one's own proves something (issue 48): the fuzzer says how many programs
each pass changed and when one never fired, directs generation at the loaded pass so a pass
that rewrites a pattern is exercised, and catches the two planted wrong passes of
``fuzz_planted_passes.py``. Bounded by program counts and fixed seeds, never by the clock."""

import argparse
from pathlib import Path

import pytest

import minipallas.tools.fuzz.programs as fuzz
from minipallas.ir.errors import MiniPallasError
from minipallas.passes.cleanup_patterns import PATTERNS
from minipallas.passes.registry import PASSES, load
from minipallas.tools.fuzz import loop
from minipallas.tools.fuzz import upstream as fuzz_upstream
from minipallas.tools.generate.check import PropertyFailure
from minipallas.tools.user_passes import PassCoverage, directs, loaded, pass_targets

PLANTED = str(Path(__file__).with_name("fuzz_planted_passes.py"))
NO_CLOCK = ["--seconds", "1e9"]  # the program count ends these runs, never the clock


@pytest.mark.parametrize("wrong", ["times-two-thrice", "add-to-sub"])
def test_each_planted_pass_is_caught_and_its_changes_counted(wrong, tmp_path, capsys):
    argv = ["--seed", "0", "--count", "40", "--max-failures", "1", "--max-stmts", "8", *NO_CLOCK]
    argv += ["--load", PLANTED, "--pass-pipeline", wrong, "--save", str(tmp_path)]
    assert fuzz.main(argv) == 1
    out = capsys.readouterr().out
    assert f"pass-directed: {wrong}" in out
    assert f"=== failure 1: pass {wrong} ===" in out
    changed = [line for line in out.splitlines() if line.startswith(f"pass {wrong} changed ")]
    assert len(changed) == 1 and "never exercised" not in changed[0], out[-2000:]
    (saved,) = tmp_path.iterdir()  # no space in the name, minipallas's own text extension
    assert saved.name == f"failure-001-pass-{wrong}.mir"


def test_a_pass_that_never_fires_is_said_plainly(capsys):
    """``cleanup`` after discharge and cleanup finds nothing left to do."""
    argv = ["--seed", "1", "--count", "10", "--batch", "10", "--max-stmts", "4", *NO_CLOCK]
    assert fuzz.main([*argv, "--pass-pipeline", "cleanup"]) == 0
    out = capsys.readouterr().out
    assert "pass cleanup changed 0 of 10 programs: it was never exercised" in out
    assert "pass-directed" not in out  # a built-in pass: plain generation


def test_coverage_counts_a_pass_when_its_text_changes():
    coverage = PassCoverage("a,b{k=1}")
    assert coverage.record(["x", "y", "y"]) == 1
    assert coverage.record(["x", "x"]) == 0  # the pipeline stopped after a
    assert coverage.lines() == [
        "pass a changed 1 of 2 programs",
        "pass b{k=1} changed 0 of 2 programs: it was never exercised",
    ]


def test_pass_targets_are_the_ops_and_numbers_a_pass_names():
    before = set(PASSES)
    try:
        load(PLANTED)
        # the ops a pass compares with, not those it builds (``Op("add", ...)``, ``"sub"``)
        assert pass_targets("times-two-thrice") == (("broadcast_in_dim", "constant", "mul"), (2,))
        assert pass_targets("add-to-sub") == (("add",), ())
        with pytest.raises(MiniPallasError, match="not a pass of the pipeline"):
            loop.targeted_passes("add-to-sub", "times-two-thrice")
        assert loop.targeted_passes("cleanup,add-to-sub", None) == ["add-to-sub"]
        assert loop.targeted_passes("add-to-sub", "none") == []
    finally:
        for name in set(PASSES) - before:
            del PASSES[name]


def test_a_wrong_target_pass_is_a_usage_error(capsys):
    argv = ["--count", "1", "--load", PLANTED, "--pass-pipeline", "add-to-sub"]
    assert fuzz.main([*argv, "--target-pass", "cleanup"]) == 2
    assert "--target-pass cleanup: not a pass of the pipeline" in capsys.readouterr().err


def test_the_deadline_ends_a_shrink_where_it_is(monkeypatch):
    """Once ``--seconds`` has passed, every further example passes at once: the shrink stops
    and its smallest failure so far is the finding."""
    campaign = fuzz.Campaign(count=50, deadline=float("inf"))

    def fails_then_the_time_is_up(fn, args, partial):
        campaign.deadline = 0.0  # the clock runs out as the first failure is found
        raise PropertyFailure("compare", "planted failure")

    monkeypatch.setattr(fuzz, "check_all_modes", fails_then_the_time_is_up)
    fuzz.run_batch(campaign, fuzz.Config(max_stmts=4), 50, seed=0)
    assert [f.stage for f in campaign.failures] == ["compare"]
    assert campaign.programs == 1 and campaign.shrink_runs == 0
    assert campaign.failures[0].found.startswith("after ")


def test_the_deadline_in_the_middle_of_a_batch_ends_it_quietly(monkeypatch):
    """With no failure, the examples after the deadline draw nothing, which hypothesis calls
    flaky data generation (FlakyStrategyDefinition): the batch ends there, not the run with a
    traceback (a 20 s run of a pass of one's own did, at 200 programs)."""
    campaign = fuzz.Campaign(count=50, deadline=float("inf"))
    real = fuzz.check_all_modes

    def the_time_is_up_after_ten(fn, args, partial):
        real(fn, args, partial)
        if campaign.programs == 10:
            campaign.deadline = 0.0

    monkeypatch.setattr(fuzz, "check_all_modes", the_time_is_up_after_ten)
    fuzz.run_batch(campaign, fuzz.Config(max_stmts=4), 50, seed=0)
    assert campaign.programs == 10 and campaign.failures == []


def test_the_upstream_fuzzers_shrink_ends_with_the_run(monkeypatch):
    """``--seconds`` bounds fuzz_upstream's shrink too, whatever ``--shrink-seconds`` says."""
    from minipallas.tools.difftest.classify import Finding
    from minipallas.tools.fuzz import upstream as fuzz_upstream

    campaign = fuzz_upstream.Campaign(count=20, deadline=float("inf"), shrink_seconds=1e9)

    class Found:
        finding = Finding("minipallas-bug", "planted difference")

        def text(self):
            return "planted"

    def found_then_the_time_is_up(case, compile=True):
        campaign.deadline = 0.0  # the clock runs out as the finding comes
        return Found()

    monkeypatch.setattr(fuzz_upstream, "run", found_then_the_time_is_up)
    fuzz_upstream.run_batch(campaign, fuzz.Config(max_stmts=4), 20, seed=0)
    assert campaign.programs == 1 and campaign.shrink_runs == 0
    assert [s.finding.name for s in campaign.saved] == ["planted difference"]


PATTERN = str(Path(__file__).with_name("fuzz_planted_patterns.py"))


def test_a_planted_wrong_pattern_directs_cleanup_and_is_caught(capsys):
    """A ``@pattern`` rewrite is no pass: direction is read from the op it is registered for
    and the numbers its code names, and goes to the pass applying it (``cleanup``). Plain
    generation does not catch ``x * 2.0 -> x + 2.0`` in 40 programs; directed, it is caught,
    and the pattern is unregistered once the command ends."""
    argv = ["--seed", "0", "--count", "40", "--max-failures", "1", "--max-stmts", "8", *NO_CLOCK]
    argv += ["--load", PATTERN, "--pass-pipeline", "cleanup"]
    assert fuzz.main([*argv, "--target-pass", "none"]) == 0
    out = capsys.readouterr().out
    assert "pattern twice_is_plus_two rewrote 0 of 40 programs: it was never exercised" in out
    assert fuzz.main(argv) == 1
    out = capsys.readouterr().out
    assert "pass-directed: cleanup; favouring ops ['mul'], numbers [2]" in out
    assert "=== failure 1: " in out
    assert all(f.__module__ != "__minipallas_load__" for fns in PATTERNS.values() for f in fns)


def test_pattern_targets_are_those_of_the_loaded_patterns_only():
    assert pass_targets("cleanup")[0] != ("mul",) and not directs("cleanup")
    with loaded(argparse.Namespace(load=[PATTERN], pass_pipeline="cleanup")):
        assert pass_targets("cleanup") == (("mul",), (2,)) and directs("cleanup")
        assert loop.targeted_passes("discharge,cleanup", None) == ["cleanup"]
    assert not directs("cleanup")


def test_a_correct_patterns_rewrites_are_counted_where_cleanup_runs_before_the_pipeline(capsys):
    """Chapter 15's ``x * 2 -> x + x``: the discharge and cleanup before the pipeline already
    apply it, so the pipeline's ``cleanup`` changes nothing; the pattern's own line says it
    was exercised."""
    chapter = Path(__file__).parents[3] / "examples" / "ch15_patterns.py"
    argv = ["--seed", "0", "--count", "10", "--batch", "10", "--max-stmts", "8", *NO_CLOCK]
    assert fuzz.main([*argv, "--load", str(chapter), "--pass-pipeline", "cleanup"]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("pattern ")]
    assert line.startswith("pattern double_is_add rewrote ") and line.endswith(" of 10 programs")
    assert line != "pattern double_is_add rewrote 0 of 10 programs"


def test_a_replay_without_its_passes_or_its_file_is_a_usage_error(tmp_path, capsys):
    """Replayed without the ``--load`` that registers its pass, a saved failure read as the
    pass's own ('it raised PassError: unknown pass'); a missing file was a traceback."""
    saved = tmp_path / "failure-001-pass-add-to-sub.mir"
    header = "# stage: pass add-to-sub\n# should_discharge (partial mode): [True]\n"
    header += "# input seed: 0\n# pipeline: add-to-sub\n"
    saved.write_text(header + "func @f(%0: f32[4]) -> (f32[4]) {\n  %1 = add %0, %0 : f32[4]\n"
                     "  return %1\n}\n")  # fmt: skip
    assert fuzz.main(["--replay", str(saved)]) == 2
    err = capsys.readouterr().err
    assert f"{saved} was saved with the pipeline 'add-to-sub': unknown pass" in err
    assert "fix: give --replay the --load files that register its passes" in err
    assert fuzz.main(["--replay", str(saved), "--load", PLANTED]) == 1
    assert fuzz.main(["--replay", str(tmp_path / "none.mir")]) == 2
    assert "cannot read" in capsys.readouterr().err


@pytest.mark.parametrize("main", [fuzz.main, fuzz_upstream.main])
def test_a_kernel_pass_in_a_program_fuzzer_is_a_usage_error(main, capsys):
    """Each program was a failure of the pass (``python -m minipallas.tools.fuzz.programs``: 'it
    raised PassError ... runs on a function'), or it never ran (``fuzz_upstream``)."""
    assert main(["--count", "1", "--pass-pipeline", "cleanup,fuse-grid-steps"]) == 2
    err = capsys.readouterr().err
    assert "pass 'fuse-grid-steps' transforms a kernel" in err and "tools.fuzz.kernels" in err
