"""FileCheck text tests, run the way LLVM's lit runs them.

Every ``.mir`` or ``.py`` file in a folder named ``filecheck`` is collected; each of its
``// RUN:`` (or ``# RUN:``) lines is one test: a shell pipeline, ``%s`` standing for the file,
that must exit with status 0. A RUN line ending in ``\\`` continues on the next; ``not CMD``
succeeds when CMD fails; a pipeline fails when any command in it fails. ``minipallas-opt`` and
``filecheck`` are found next to the running Python (the project's virtualenv). A file in such a
folder without a RUN line is an error, so a test cannot be dropped by accident.
"""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

RUN = re.compile(r"^\s*(?://|#)\s*RUN:(.*)$")
PRELUDE = 'set -o pipefail\nnot() { ! "$@"; }\n'


def run_lines(path: Path) -> list[str]:
    lines, current = [], ""
    for line in path.read_text().splitlines():
        match = RUN.match(line)
        if not match:
            continue
        current += match.group(1).strip()
        if current.endswith("\\"):
            current = current[:-1] + " "
        else:
            lines.append(current)
            current = ""
    return lines


def pytest_collect_file(parent: pytest.Collector, file_path: Path) -> pytest.File | None:
    if file_path.parent.name == "filecheck" and file_path.suffix in (".mir", ".py"):
        return LitFile.from_parent(parent, path=file_path)
    return None


class LitFile(pytest.File):
    def collect(self):  # noqa: ANN201
        lines = run_lines(self.path) or [None]
        for k, command in enumerate(lines, 1):
            yield LitItem.from_parent(self, name=f"RUN{k}", command=command)


class LitItem(pytest.Item):
    def __init__(self, *, command: str | None, **kwargs) -> None:  # noqa: ANN003
        super().__init__(**kwargs)
        self.command = command

    def runtest(self) -> None:
        assert self.command is not None, f"{self.path.name} has no RUN line"
        env = dict(os.environ)
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
        script = PRELUDE + self.command.replace("%s", shlex.quote(str(self.path)))
        done = subprocess.run(
            ["bash", "-c", script],
            cwd=self.path.parent,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, f"RUN: {self.command}\n{done.stdout}{done.stderr}"

    def reportinfo(self) -> tuple:
        return self.path, None, f"{self.path.name}: RUN: {self.command}"
