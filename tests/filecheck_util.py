"""FileCheck from Python, for the tests whose input text is built in Python (a kernel or
function constructed programmatically, a parametrized dtype) and so cannot be a file in a
``filecheck/`` folder. It runs the same ``filecheck`` tool (the ``filecheck`` pip package) as
the RUN lines ``tests/conftest.py`` collects, so a pattern means the same in both places."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import tempfile

TOOLS = pathlib.Path(sys.executable).parent  # minipallas-opt and filecheck, the virtualenv's
FILECHECK = TOOLS / "filecheck"


def filecheck(text: str, checks: str) -> None:
    """Matches the FileCheck directives in ``checks`` (``CHECK:``, ``CHECK-NEXT:``...) against
    ``text``; fails with FileCheck's report and the text."""
    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder) / "checks"
        path.write_text(checks)
        done = subprocess.run(
            [str(FILECHECK), str(path)], input=text, capture_output=True, text=True
        )
    assert done.returncode == 0, f"{done.stdout}{done.stderr}\n--- input ---\n{text}"
