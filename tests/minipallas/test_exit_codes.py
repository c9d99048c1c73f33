"""One exit-code convention for every command (issue 48 §4): 0 when all is well, 1 for a
finding (a program rejected, a case not as expected), 2 for a usage error (an unknown pass or
option, a file that cannot be read, a file that defines nothing to run), with a one-line error."""

import textwrap

import pytest

from minipallas import cli as opt
from minipallas.tools.difftest import cli as difftest

PROGRAM = "func @f(%x: f32[4]) -> (f32[4]) {\n  return %x\n}\n"
BAD_PROGRAM = "func @f(%x: f32[4]) -> (f32[4]) {\n  return %y\n}\n"
CASES = textwrap.dedent(
    """
    import numpy as np
    from minipallas.tools.difftest import Case, ref

    def double(r):
        r[...] = r[...] * 2.0

    CASES = [Case("double", double, (ref(np.arange(4, dtype=np.float32)),))]
    WRONG = Case("wrong", double, (ref(np.ones(2, np.float32)),), expect="transpose-view")
    """
)


@pytest.fixture
def files(tmp_path):
    (tmp_path / "f.mir").write_text(PROGRAM)
    (tmp_path / "bad.mir").write_text(BAD_PROGRAM)
    (tmp_path / "cases.py").write_text(CASES)
    (tmp_path / "empty.py").write_text("x = 1\n")
    return tmp_path


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["f.mir"], 0),
        (["bad.mir"], 1),
        (["f.mir", "--pass-pipeline=nosuch"], 2),
        (["f.mir", "--pass-pipeline=cleanup{nosuch=1}"], 2),
        (["missing.mir"], 2),
        (["f.mir", "--load", "missing.py"], 2),
        (["empty.py"], 2),
    ],
)
def test_minipallas_opt(files, capsys, monkeypatch, argv, code):
    monkeypatch.chdir(files)
    assert opt.main(argv) == code
    if code == 2:
        err = capsys.readouterr().err
        assert err.startswith(("minipallas-opt: ", argv[0])), err
        assert "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["cases.py", "-k", "double"], 0),
        (["cases.py"], 1),
        (["missing.py"], 2),
        (["empty.py"], 2),
        (["cases.py", "--pass-pipeline=nosuch"], 2),
    ],
)
def test_minipallas_difftest(files, capsys, monkeypatch, argv, code):
    monkeypatch.chdir(files)
    assert difftest.main(argv) == code
    if code == 2:
        err = capsys.readouterr().err.strip()
        assert err.startswith("minipallas-difftest: "), err
        assert "Traceback" not in err
