"""Runs the FileCheck tests in ``filecheck/``: kernel files (``.py``) and text IR (``.mir``)
through ``minipallas-opt --emit=...``. Each ``RUN:`` line is a shell pipeline (``%s`` is the
file) that must exit with status 0; ``not CMD`` succeeds when CMD fails."""

import os
import pathlib
import shlex
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).parent / "filecheck"
FILES = sorted([*HERE.glob("*.py"), *HERE.glob("*.mir")])


def run_lines(path: pathlib.Path) -> list[str]:
    return [line.split("RUN:", 1)[1].strip() for line in path.read_text().splitlines()
            if "RUN:" in line]  # fmt: skip


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_filecheck(path):
    assert run_lines(path)
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    for line in run_lines(path):
        command = line.replace("%s", shlex.quote(str(path)))
        script = 'set -o pipefail\nnot() { ! "$@"; }\n' + command
        run = subprocess.run(
            ["bash", "-c", script], cwd=HERE, env=env, capture_output=True, text=True
        )
        assert run.returncode == 0, f"RUN: {line}\n{run.stdout}{run.stderr}"
