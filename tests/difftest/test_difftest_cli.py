"""``minipallas-difftest``: a module's cases with a progress bar and a summary table, and the
fuzzer (a few programs only: the long campaigns are ``make fuzz-upstream``)."""

import io
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from minipallas.tools.difftest import cli
from minipallas.tools.fuzz import upstream as fuzz_upstream

MODULE = textwrap.dedent(
    """
    import numpy as np
    from minipallas.tools.difftest import Case, ref

    def double(r):
        r[...] = r[...] * 2.0

    def strided(r):
        return r[0, ::2]

    CASES = [
        Case("double", double, (ref(np.arange(4, dtype=np.float32)),)),
        Case("strided", strided, (ref(np.zeros((2, 4), np.float32)),),
             expect="strided-slice-with-int-index"),
    ]
    LONE = Case("lone", double, (ref(np.ones(2, np.float32)),), expect="transpose-view")
    """
)


@pytest.fixture
def module(tmp_path):
    path = tmp_path / "programs.py"
    path.write_text(MODULE)
    return path


def test_cases_in_finds_module_level_and_listed_cases(module):
    assert [c.name for c in cli.cases_in(module)] == ["double", "strided", "lone"]


def test_runs_a_module_and_prints_a_table(module, capsys):
    assert cli.main([str(module), "--show"]) == 1  # "lone" does not crash as it expects
    out, err = capsys.readouterr()
    assert "3/3" not in err and "case" not in err  # stderr is no terminal here: no bar
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["case", "finding", "expected"]
    row = {line.split()[0]: line for line in lines[2:5]}
    assert row["double"].split()[1:3] == ["agree", "yes"]
    assert "upstream-crash (strided-slice-with-int-index)" in row["strided"]
    assert row["lone"].split()[1:3] == ["agree", "NO"]
    assert "3 cases, 1 not as expected" in out
    assert "case lone: agree" in out and "--- upstream jaxpr ---" in out  # --show


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_progress_bar_is_drawn_on_a_terminal_only(module, monkeypatch):
    """Once a line a case in any log (issue 48), now the fuzzers' bar
    (``minipallas.tools.progress``)."""
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert cli.main([str(module), "-k", "doub"]) == 0
    assert "difftest: 100%" in terminal.getvalue() and "1/1" in terminal.getvalue()
    log = io.StringIO()  # not a terminal
    monkeypatch.setattr(sys, "stderr", log)
    assert cli.main([str(module), "-k", "doub"]) == 0
    assert log.getvalue() == ""


def test_load_help_names_both_registrations(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(@register)" in text and "(@pattern)" in text


def test_keyword_selects_cases(module, capsys):
    assert cli.main([str(module), "-k", "doub"]) == 0
    assert "1 cases, 0 not as expected" in capsys.readouterr().out


def test_console_script_is_installed(module):
    script = Path(sys.executable).parent / "minipallas-difftest"
    out = subprocess.run(
        [str(script), str(module), "-k", "strided"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "strided-slice-with-int-index" in out.stdout


def test_without_a_tpu_libtpu_starts_quietly(module):
    """libtpu (installed with the test extras) loads at jax's first device query; on a
    machine without a chip it logged start-up errors (``E0000 ... unexpected worker hostname``)
    unless told the one-chip host it asks for, which the command now tells it. The shell's
    environment, but for ``ALLOW_MULTIPLE_LIBTPU_LOAD``: with it, libtpu loads even while
    another process holds its lock file (a test worker), and so logs if it is going to."""
    from minipallas.lowering.runtime.libtpu import LIBTPU_NO_CHIP, libtpu_available, tpu_chips

    if not libtpu_available() or tpu_chips():
        pytest.skip("about a machine with libtpu installed and no TPU chip")
    quiet = {"JAX_PLATFORMS", "TF_CPP_MIN_LOG_LEVEL", *LIBTPU_NO_CHIP}
    env = {k: v for k, v in os.environ.items() if k not in quiet}
    env["ALLOW_MULTIPLE_LIBTPU_LOAD"] = "1"
    script = Path(sys.executable).parent / "minipallas-difftest"
    out = subprocess.run(
        [str(script), str(module), "-k", "doub"], capture_output=True, text=True, env=env
    )
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""  # nor a bar: stderr is no terminal


def test_fuzz_saves_shrunk_findings_and_a_summary(tmp_path, capsys):
    save = tmp_path / "findings"
    # the count ends the run, never the clock (a wall-clock limit fails under load)
    argv = ["--count", "12", "--seconds", "1e9", "--seed", "3", "--batch", "12"]
    shrink = ["--shrink-known", "--shrink-seconds", "1"]  # known findings shrink on request
    code = cli.main(["fuzz", *argv, "--save", str(save), *shrink, "--no-compile"])
    out = capsys.readouterr().out
    assert "12 programs in" in out and "programs/second" in out
    assert int(re.search(r"(\d+) shrink runs", out).group(1)) > 0
    summary = (save / "summary.txt").read_text()
    assert summary.splitlines()[0].split() == ["finding", "kind", "programs", "share"]
    found = sorted(p for p in save.iterdir() if p.name != "summary.txt")
    kinds = {line.split()[1] for line in summary.splitlines()[2:] if line.strip()}
    assert code == int("minipallas-bug" in kinds)
    assert found  # a dozen random programs always hit one of upstream's known crashes
    for path in found:  # each saved finding replays to the same finding
        text = path.read_text()
        assert text.startswith("# finding: ")
        assert fuzz_upstream.REFERENCE_HEADER in text
        assert str(fuzz_upstream.replay(path).finding) in text.splitlines()[0]


def test_a_file_imports_the_modules_beside_it(tmp_path, monkeypatch, capsys):
    """Once a ``ModuleNotFoundError``: the file's folder goes on the path, as pytest does."""
    folder = tmp_path / "suite"
    folder.mkdir()
    (folder / "shared_programs_beside.py").write_text("def triple(r):\n    r[...] = r[...] * 3.0\n")
    (folder / "cases.py").write_text(
        textwrap.dedent(
            """
            import numpy as np
            from shared_programs_beside import triple
            from minipallas.tools.difftest import Case, ref

            CASES = [Case("triple", triple, (ref(np.arange(4, dtype=np.float32)),))]
            """
        )
    )
    monkeypatch.chdir(tmp_path)  # not the file's folder
    monkeypatch.setattr(sys, "path", list(sys.path))  # undone afterwards
    monkeypatch.delitem(sys.modules, "shared_programs_beside", raising=False)
    assert cli.main(["suite/cases.py"]) == 0
    row = capsys.readouterr().out.splitlines()[2]
    assert row.split()[:3] == ["triple", "agree", "yes"]
    assert sys.path[0] == str(folder.resolve())
