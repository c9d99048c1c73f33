"""``python -m minipallas.tools.fuzz.programs``: counts programs, exits 0 when all pass; a failure
is shrunk, printed as text IR, saved, replayable, and makes the exit code 1."""

import minipallas.tools.fuzz.programs as fuzz
from minipallas.tools.generate.check import PropertyFailure


def test_a_clean_campaign_reports_throughput_and_exits_0(capsys):
    assert fuzz.main(["--count", "20", "--seconds", "1e9", "--seed", "4", "--batch", "10"]) == 0
    out = capsys.readouterr().out
    assert "20 programs (" in out and "programs/second" in out and "no failures" in out


def _fails_on_swap(fn, args, partial):
    if any(op.name == "swap" for f in (fn, *fn.callees()) for op in f.walk()):
        raise PropertyFailure("compare", "planted failure: the program swaps")
    return []


def test_a_failure_is_shrunk_printed_saved_and_replayable(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(fuzz, "check_all_modes", _fails_on_swap)
    flags = ["--count", "200", "--seconds", "1e9", "--max-stmts", "3", "--max-failures", "1"]
    code = fuzz.main([*flags, "--save", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1
    assert "=== failure 1: compare ===" in out and "1 failures: 1 compare" in out
    (saved,) = tmp_path.iterdir()
    assert saved.name == "failure-001-compare.mir"  # minipallas's text extension, no space
    text = saved.read_text()
    assert "# [compare] planted failure: the program swaps" in text
    program = [line for line in text.splitlines() if not line.startswith("#")]
    # Shrunk: a single function with one swap and little else.
    assert sum(" = swap " in line for line in program) == 1
    assert len(program) <= 12, text
    assert fuzz.replay(saved) == 1
    monkeypatch.undo()
    assert fuzz.replay(saved) == 0
