"""The FileCheck runner itself (``tests/conftest.py``) and its Python twin
(``filecheck_util.filecheck``): a pattern that is not in the text fails, so the text tests can
fail at all."""

import pytest
from conftest import run_command, run_lines
from filecheck_util import filecheck


def test_a_check_that_is_not_in_the_text_fails():
    with pytest.raises(AssertionError, match="no_such_op"):
        filecheck("module {}\n", "// CHECK: stablehlo.no_such_op\n")
    filecheck("module {}\n", "// CHECK: module\n")


def test_run_lines_join_continuations_and_skip_other_comments(tmp_path):
    path = tmp_path / "t.mir"
    path.write_text("// RUN: echo a \\\n// RUN:   b | filecheck %s\n// CHECK: a b\n# RUN: true\n")
    assert [c.split() for c in run_lines(path)] == [
        ["echo", "a", "b", "|", "filecheck", "%s"],
        ["true"],
    ]


def test_a_run_line_passes_on_exit_status_zero_only(tmp_path):
    """``%s`` is the file; a failing FileCheck fails the pipeline; ``not`` inverts."""
    path = tmp_path / "t.mir"
    path.write_text("// CHECK: stablehlo.no_such_op\n")
    assert run_command("echo module | filecheck %s", path).returncode != 0
    assert run_command("echo module | not filecheck %s", path).returncode == 0
    assert run_command("echo stablehlo.no_such_op | filecheck %s", path).returncode == 0
    assert run_command("false | cat", path).returncode != 0
