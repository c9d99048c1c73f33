"""Runs the FileCheck text tests in ``tests/ir/filecheck``: each ``// RUN:`` line of each
``.mir`` file is a shell pipeline (``%s`` is the file) that must exit with status 0.

As in LLVM's lit: a RUN line ending in ``\\`` continues on the next, ``not CMD`` succeeds when
CMD fails, and a pipeline fails when any command in it fails. ``minipallas-opt`` and
``filecheck`` are found next to the running Python (the project's virtualenv).
"""

import os
import pathlib
import shlex
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).parent / "filecheck"
FILES = sorted(HERE.glob("*.mir"))


def run_lines(path: pathlib.Path) -> list[str]:
    lines, current = [], ""
    for line in path.read_text().splitlines():
        if "RUN:" not in line:
            continue
        current += line.split("RUN:", 1)[1].strip()
        if current.endswith("\\"):
            current = current[:-1] + " "
        else:
            lines.append(current)
            current = ""
    return lines


def test_every_file_has_a_run_line():
    assert FILES
    assert all(run_lines(path) for path in FILES)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_filecheck(path):
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    for line in run_lines(path):
        command = line.replace("%s", shlex.quote(str(path)))
        script = 'set -o pipefail\nnot() { ! "$@"; }\n' + command
        run = subprocess.run(
            ["bash", "-c", script], cwd=HERE, env=env, capture_output=True, text=True
        )
        assert run.returncode == 0, f"RUN: {line}\n{run.stdout}{run.stderr}"
